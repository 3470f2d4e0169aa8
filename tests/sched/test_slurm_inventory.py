"""Slurm's node records as an inventory, on captured `scontrol show node --oneliner` text.

data/scontrol_nodes_22.05.txt is what Slurm 22.05.8 printed for the test cluster
(tests/control/slurm/cluster.py) with n3 drained by hand and n4 never started; data/
scontrol_nodes_gpu.txt is the same format for GPU nodes with GRES and label features (written for
this test: the test cluster has no GPUs). tests/control/slurm/test_sched_inventory.py reads the
live cluster.
"""

from pathlib import Path

import pytest

from runwright.sched.admission import admit
from runwright.sched.requests import AdmissionInput, GangRequest
from runwright.sched.slurm_inventory import (
    allocated,
    health_of,
    node_of,
    parse_fields,
    parse_nodes,
    parse_view,
)

DATA = Path(__file__).with_name("data")


def test_fields_keep_values_with_spaces():
    line = (DATA / "scontrol_nodes_22.05.txt").read_text().splitlines()[2]
    fields = parse_fields(line)
    assert fields["NodeName"] == "n3"
    assert fields["OS"] == "Linux 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["Reason"] == "bad ECC on gpu 2 [root@2026-12-02T12:11:02]"
    assert fields["AllocTRES"] == ""


def test_the_test_clusters_nodes_read_as_cpu_nodes_with_health():
    inventory = parse_nodes((DATA / "scontrol_nodes_22.05.txt").read_text(), at_seconds=7.0)
    by_name = {node.name: node for node in inventory.nodes}
    assert list(by_name) == ["n1", "n2", "n3", "n4"]
    assert by_name["n1"].pools == ("debug", "island")
    assert (by_name["n1"].device_type, by_name["n1"].device_count, by_name["n1"].cpus) == (
        "cpu",
        1,
        1,
    )
    assert by_name["n1"].host_memory_bytes == 2**20  # RealMemory=1 (MiB)
    assert by_name["n3"].health.state == "drained"
    assert by_name["n3"].health.reason == "bad ECC on gpu 2 [root@2026-12-02T12:11:02]"
    assert by_name["n3"].health.history[-1].at_seconds == 7.0
    assert by_name["n4"].health.state == "unhealthy"  # State=UNKNOWN: never registered
    assert [n.name for n in inventory.offered()] == ["n1", "n2"]


def test_gres_and_features_become_devices_and_labels():
    inventory = parse_nodes((DATA / "scontrol_nodes_gpu.txt").read_text())
    a01, a02, b01, b02 = inventory.nodes
    assert (a01.device_type, a01.device_count, a01.device_memory_bytes) == ("h100", 8, 80 * 2**30)
    assert a01.labels.fast_domain == "a"
    assert (a01.labels.rack, a01.labels.network_domain) == ("r1", "ib0")
    assert a01.labels.versions == {"driver": "550.54", "cuda": "12.4"}
    assert a01.labels.features == ("hopper",)
    assert a01.pools == ("train", "debug") and a01.cpus == 224
    assert a02.health.state == "healthy"  # MIXED: partly allocated, still offered
    assert (b01.device_type, b01.device_count) == ("gpu", 8)  # untyped GRES
    assert b01.health.state == "drained" and b01.health.reason.startswith("Xid 79 on gpu 3")
    assert b02.health.state == "unhealthy"

    assert [n.name for n in inventory.offered()] == ["gpu-a01", "gpu-a02"]


@pytest.mark.parametrize(
    ("state", "health"),
    [
        ("IDLE", "healthy"),
        ("MIXED", "healthy"),
        ("ALLOCATED", "healthy"),
        ("IDLE+DRAIN", "drained"),
        ("DRAINING", "drained"),
        ("MAINT", "drained"),
        ("DOWN", "unhealthy"),
        ("IDLE*", "unhealthy"),
        ("DOWN+DRAIN", "unhealthy"),
        ("FAIL", "unhealthy"),
        ("UNKNOWN", "unhealthy"),
    ],
)
def test_slurm_states_map_to_health(state, health):
    assert health_of(state, "", 0.0).state == health


def test_a_slurm_inventory_admits_only_on_offered_nodes_of_the_partition():
    inventory = parse_nodes((DATA / "scontrol_nodes_gpu.txt").read_text())
    request = GangRequest(run_id="r", pool="train", devices=16, device_type="H100", tp=8)
    decision = admit(inventory, AdmissionInput(pending=(request,))).of("r")
    assert {s.node for s in decision.placement} == {"gpu-a01", "gpu-a02"}
    bigger = request.model_copy(update={"devices": 24})
    reason = admit(inventory, AdmissionInput(pending=(bigger,))).of("r").reason
    assert reason.words == (
        "needs 24 devices of type H100 in pool train; 16 are free "
        "(8 more on drained or unhealthy nodes) "
        "[gpu-b02 unhealthy: Not responding [slurm@2026-12-02T11:02:10]]"
    )


def test_what_slurm_allocated_is_read_per_node():
    view = parse_view((DATA / "scontrol_nodes_gpu.txt").read_text())
    assert view.allocated == {"gpu-a01": 0, "gpu-a02": 4, "gpu-b01": 8, "gpu-b02": 0}
    cpu_view = parse_view((DATA / "scontrol_nodes_22.05.txt").read_text())
    assert set(cpu_view.allocated.values()) == {0}
    typed = parse_fields("NodeName=g Gres=gpu:a100:4 CPUTot=8 AllocTRES=cpu=4,gres/gpu:a100=3")
    assert allocated(typed, node_of(typed, 0.0, {})) == 3  # only the typed count is printed
    busy = parse_fields("NodeName=c CPUTot=4 CPUAlloc=3 AllocTRES=")
    assert allocated(busy, node_of(busy, 0.0, {})) == 3  # CPU node: CPUAlloc without TRES
    over = parse_fields("NodeName=c CPUTot=2 AllocTRES=cpu=4")  # hyperthreads: capped
    assert allocated(over, node_of(over, 0.0, {})) == 2
