"""The scheduler's Slurm inventory (runwright.sched.slurm_inventory) read from the live test
cluster: its nodes, partitions as pools, and a node drained by hand taken out of the offer (and
put back). A few `scontrol` calls on the session's cluster (about a second)."""

import pytest

from runwright.sched.slurm_inventory import read_cluster

pytestmark = [pytest.mark.integration]


def test_the_live_cluster_reads_as_an_inventory_and_a_drained_node_is_not_offered(slurm_cluster):
    nodes = {node.name: node for node in read_cluster().nodes}
    assert {"n1", "n2", "n3"} <= set(nodes)
    assert "debug" in nodes["n1"].pools and "island" in nodes["n1"].pools
    assert nodes["n2"].device_type == "cpu" and nodes["n2"].device_count == nodes["n2"].cpus >= 1
    slurm_cluster.client(
        "scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=sched inventory test"
    )
    try:
        drained = next(n for n in read_cluster().nodes if n.name == "n2")
        # Drained; or unhealthy, which wins, when a loaded host's slurmd misses a ping then.
        assert drained.health.state in ("drained", "unhealthy") and not drained.offered
        assert drained.health.reason.startswith("sched inventory test")
    finally:
        slurm_cluster.client("scontrol", "update", "NodeName=n2", "State=RESUME")
        slurm_cluster.wait_nodes(["n2"], "idle")
