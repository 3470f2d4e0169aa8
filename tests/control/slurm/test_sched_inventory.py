"""The scheduler's Slurm inventory (runwright.sched.slurm_inventory) read from the live test
cluster: its nodes, partitions as pools, and a node drained by hand taken out of the offer (and
put back); and the controller admitting a run around another user's job, held to its placement
by `--nodelist`. A few `scontrol` calls and one short job on the session's cluster."""

import time

import pytest
import yaml

from runwright.control.cancel import request_cancel
from runwright.control.cluster_inventory import SlurmPoolsInventory
from runwright.control.controller import Controller
from runwright.control.pools import load_pools
from runwright.sched.slurm_inventory import parse_fields, read_cluster
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]


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


def test_the_controller_admits_a_slurm_run_around_other_jobs_and_holds_slurm_to_its_placement(
    slurm_cluster, tmp_path, time_bound
):
    """Another user's job fills n1. `--inventory slurm` reads the cluster live: n1's device is
    allocated, so runwright's admission places a 2-node gang of pool `cluster` (partition
    debug) on n2 and n3, and the sbatch it submits asks Slurm for exactly those nodes."""
    other = slurm_cluster.client(
        "sbatch", "--parsable", "-w", "n1", "-J", "other-user", "-o", "/dev/null",
        "--wrap", "sleep 300",
    ).strip()  # fmt: skip
    store = Store.open(tmp_path)
    run_id = None
    try:
        with time_bound(60):
            while slurm_cluster.job_state(other) != "RUNNING":
                time.sleep(0.2)
        pools = tmp_path / "pools.yaml"
        pools.write_text(
            yaml.safe_dump({"pools": {"cluster": {"executor": "slurm", "partition": "debug"}}})
        )
        source = SlurmPoolsInventory(load_pools(pools), refresh_seconds=0.0)
        view = source()
        by_name = {node.name: node for node in view.inventory.nodes}
        assert view.allocated["n1"] == 1 and by_name["n1"].pools == ("cluster",)
        assert by_name["n2"].pools == ("cluster",)
        controller = Controller(store, tmp_path, pools_file=pools, inventory=source)
        spec = spec_from_mapping(
            {
                "name": "placed",
                "code": {"entrypoint": "train.py"},
                "training": {"global_batch_samples": 2, "steps": 2},
                "resources": {"nodes": 2, "devices_per_node": 1, "pool": "cluster"},
            }
        )
        run, _ = controller.submit(spec, tmp_path)
        run_id = run.run_id
        with time_bound(60):  # queued, admitted, and asked of Slurm
            while not store.events(run_id, types=["ALLOCATION_REQUESTED"]):
                controller.reconcile(run_id)
        (admitted,) = store.events(run_id, types=["RUN_ADMITTED"])
        assert sorted(s["node"] for s in admitted.attributes["placement"]) == ["n2", "n3"]
        job = store.get_run(run_id).allocation["engine_id"]
        shown = parse_fields(slurm_cluster.client("scontrol", "show", "job", "--oneliner", job))
        assert shown["ReqNodeList"] == "n[2-3]"
    finally:
        if run_id is not None:
            request_cancel(store, run_id)
            with time_bound(120):
                while not controller.reconcile(run_id):
                    time.sleep(0.2)
        slurm_cluster.client("scancel", other)
        slurm_cluster.wait_queue_empty()
        store.close()
