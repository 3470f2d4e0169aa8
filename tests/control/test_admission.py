"""Admission under the controller (issue 13): with an inventory, a QUEUED run starts only once
the scheduler admits its whole gang, says why it waits, and a gang no state of the inventory can
hold is refused at submit. Real runs under torchrun on an inventory of one two-device node."""

import socket
from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.errors import PlacementError
from runwright.sched.inventory import Inventory, Node
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"
TWO_DEVICES = Inventory(
    nodes=(Node(name=socket.gethostname(), device_type="cpu", device_count=2, cpus=2),)
)


def spec_for(name: str, steps: int, devices: int = 2):
    return spec_from_mapping(
        {
            "name": name,
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-sleep", "0.1"]},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": devices},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 2}},
            "recovery": {"heartbeat_interval_seconds": 0.5, "progress_timeout_seconds": 60},
        }
    )


def test_a_run_waits_with_its_reason_until_the_gang_ahead_of_it_ends(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1, inventory=TWO_DEVICES)
    first, _ = controller.submit(spec_for("first", steps=4), tmp_path)
    second, _ = controller.submit(spec_for("second", steps=2), tmp_path)
    controller.drive_all()
    assert [store.get_run(r.run_id).state for r in (first, second)] == ["SUCCEEDED"] * 2

    (admitted_first,) = store.events(first.run_id, types=["RUN_ADMITTED"])
    assert admitted_first.attributes["policy"] == "gang-bestfit-v1"
    assert admitted_first.attributes["placement"] == [
        {"node": socket.gethostname(), "devices": [0, 1]}
    ]
    pending = store.events(second.run_id, types=["ADMISSION_PENDING"])
    assert pending, "the second run never said why it waited"
    assert pending[0].attributes["code"] == "capacity"
    assert "needs 2 devices" in pending[0].attributes["reason"]
    assert "0 are free" in pending[0].attributes["reason"]
    # All or nothing, and never both: the second gang is admitted once the first let go.
    (admitted_second,) = store.events(second.run_id, types=["RUN_ADMITTED"])
    (released,) = store.events(first.run_id, types=["ALLOCATION_RELEASED"])
    assert admitted_second.time_unix_s >= released.time_unix_s
    moves = [e.attributes["to_state"] for e in store.events(second.run_id, types=["STATE_CHANGED"])]
    assert moves[:3] == ["QUEUED", "ALLOCATING", "STARTING"]
    store.close()


def test_a_gang_larger_than_the_inventory_is_refused_at_submit(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, inventory=TWO_DEVICES)
    with pytest.raises(PlacementError, match="no run was recorded") as refused:
        controller.submit(spec_for("too-big", steps=2, devices=4), tmp_path)
    assert "4" in str(refused.value)
    assert store.list_runs() == []
    store.close()
