"""Admission under the controller (issue 13): with an inventory, a QUEUED run starts only once
the scheduler admits its whole gang, says why it waits, and a gang no state of the inventory can
hold is refused at submit. Real runs under torchrun on an inventory of one two-device node."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from runwright.control.controller import Controller
from runwright.control.states import RunState
from runwright.errors import PlacementError
from runwright.govern.compare import compare_runs
from runwright.observe.rank_steps import per_rank
from runwright.sched.inventory import Inventory, Node
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"
TWO_DEVICES = Inventory(
    nodes=(Node(name=socket.gethostname(), device_type="cpu", device_count=2, cpus=2),)
)


def spec_for(name: str, steps: int, devices: int = 2, step_sleep: float = 0.1, **resources):
    return spec_from_mapping(
        {
            "name": name,
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-sleep", str(step_sleep)]},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": devices, **resources},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 2}},
            "recovery": {"heartbeat_interval_seconds": 0.5, "progress_timeout_seconds": 60},
        }
    )


def test_a_run_waits_with_its_reason_until_the_gang_ahead_of_it_ends(tmp_path):
    """Through the CLI: `runwright controller --inventory` without a run id picks up every
    unfinished run and admits them one after the other."""
    store = Store.open(tmp_path)
    submitter = Controller(store, tmp_path, inventory=TWO_DEVICES)
    first, _ = submitter.submit(spec_for("first", steps=4), tmp_path)
    second, _ = submitter.submit(spec_for("second", steps=2), tmp_path)
    inventory = tmp_path / "nodes.yaml"
    inventory.write_text(yaml.safe_dump(TWO_DEVICES.model_dump(mode="json")))
    argv = [sys.executable, "-m", "runwright.cli.main", "controller", "--root", str(tmp_path)]
    done = subprocess.run(
        [*argv, "--inventory", str(inventory)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 run(s) reached a terminal state" in done.stdout
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


def test_a_higher_priority_run_preempts_a_preemptible_one_which_resumes_after_it(tmp_path):
    """The low-priority run holds both devices; the high-priority one is admitted by stopping it
    at a step boundary (saved), and it requeues behind the other and resumes from that save."""
    store = Store.open(tmp_path)
    submitted: dict[str, str] = {}

    def submit_urgent(event) -> None:
        if "urgent" not in submitted and event.type == "STEP_HEALTHY" and (event.step or 0) >= 3:
            urgent, _ = controller.submit(spec_for("urgent", steps=2, priority=10), tmp_path)
            submitted["urgent"] = urgent.run_id

    controller = Controller(
        store, tmp_path, poll_seconds=0.1, inventory=TWO_DEVICES, on_event=submit_urgent
    )
    # Six seconds of steps after the urgent run is submitted: time for a busy controller to
    # ingest, admit and ask before the batch run could end on its own.
    spec = spec_for("batch", steps=30, step_sleep=0.2, preemptible=True)
    batch, _ = controller.submit(spec, tmp_path)
    controller.drive_all()
    urgent_id = submitted["urgent"]
    assert store.get_run(batch.run_id).state == "SUCCEEDED"
    assert store.get_run(urgent_id).state == "SUCCEEDED"

    (asked,) = store.events(batch.run_id, types=["STOP_REQUESTED"])
    assert asked.attributes["reason"] == "preemption"
    assert asked.attributes["preempted_by"] == urgent_id
    (failure,) = store.events(batch.run_id, types=["FAILURE_CLASSIFIED"])
    assert failure.attributes["failure_class"] == "preemption"
    # It may first wait on capacity alone: a batch run in CHECKPOINTING is never a victim.
    waiting = store.events(urgent_id, types=["ADMISSION_PENDING"])
    preempting = [w for w in waiting if w.attributes["code"] == "preemption"]
    assert preempting, [w.attributes for w in waiting]
    assert batch.run_id in preempting[0].attributes["reason"]
    # Never both at once: the urgent gang starts after the batch run let go, and the batch run
    # is admitted again only after the urgent one let go.
    _, again = store.events(batch.run_id, types=["RUN_ADMITTED"])
    released = store.events(batch.run_id, types=["ALLOCATION_RELEASED"])
    (urgent_admitted,) = store.events(urgent_id, types=["RUN_ADMITTED"])
    (urgent_released,) = store.events(urgent_id, types=["ALLOCATION_RELEASED"])
    assert released[0].time_unix_s <= urgent_admitted.time_unix_s
    assert urgent_released.time_unix_s <= again.time_unix_s
    # It resumed from the step it saved at when it stopped.
    (stopped_at,) = {e.step for e in store.events(batch.run_id, types=["STOP_ACKNOWLEDGED"])}
    resumed = [
        e.step
        for e in per_rank(store.events(batch.run_id, types=["STEP_HEALTHY"]))
        if e.generation == 2 and e.attributes["rank"] == 0
    ]
    assert resumed[0] == stopped_at + 1 and resumed[-1] == 30
    # Nothing was lost: it ends bitwise-equal to an uninterrupted run of the same spec.
    reference = Controller(store, tmp_path, poll_seconds=0.1)
    uninterrupted, _ = reference.submit(spec, tmp_path)
    assert reference.drive(uninterrupted.run_id).state == "SUCCEEDED"
    comparison = compare_runs(store, batch.run_id, uninterrupted.run_id)
    assert comparison.equivalence == "bitwise-equal", comparison
    store.close()


def test_a_gang_larger_than_the_inventory_is_refused_at_submit(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, inventory=TWO_DEVICES)
    with pytest.raises(PlacementError, match="no run was recorded") as refused:
        controller.submit(spec_for("too-big", steps=2, devices=4), tmp_path)
    assert "4" in str(refused.value)
    assert store.list_runs() == []
    store.close()


def test_one_admission_pass_serves_every_queued_run_until_something_changes(tmp_path):
    """A sweep over N queued runs runs the policy once, not N times: the pass is reused while
    the queue and the holders are what it decided on, the runs it admitted counted as holders."""
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, inventory=TWO_DEVICES)
    runs = [controller.submit(spec_for(f"r{i}", steps=2, devices=1), tmp_path)[0] for i in range(3)]
    for run in runs:
        controller.journal.move(store.get_run(run.run_id), RunState.QUEUED, "JOB_ACCEPTED")
    step = controller.admission
    passes = []
    policy = step._admit
    step._admit = lambda *args: passes.append(1) or policy(*args)
    for run in runs:
        step.advance(store.get_run(run.run_id), controller.logs.of(run.run_id).events)
    assert [store.get_run(r.run_id).state for r in runs] == ["ALLOCATING"] * 2 + ["QUEUED"]
    assert len(passes) == 1
    assert "needs 1 devices" in store.get_run(runs[2].run_id).state_detail
    store.close()


def test_a_victim_under_another_controller_that_cannot_stop_is_killed_after_its_grace(
    tmp_path, time_bound
):
    """The batch run is driven by a controller process of its own and holds at step 2 (never
    reaching another step boundary); this controller's admission preempts it for an urgent run.
    Its own controller sees the stop request, kills it when its stop grace runs out, records so,
    and requeues it behind the urgent run; it resumes from its step-2 checkpoint and finishes."""
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1, inventory=TWO_DEVICES)
    batch_spec = spec_from_mapping(
        {
            **spec_for("batch", steps=4, preemptible=True).model_dump(mode="json"),
            "code": {
                "entrypoint": str(SCRIPT),
                "args": ["--hold-at-step", "2", "--hold-file", str(tmp_path / "never")],
            },
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "progress_timeout_seconds": 600,
                "stop_grace_seconds": 2,
            },
        }
    )
    batch, _ = controller.submit(batch_spec, tmp_path)
    inventory = tmp_path / "nodes.yaml"
    inventory.write_text(yaml.safe_dump(TWO_DEVICES.model_dump(mode="json")))
    argv = [sys.executable, "-m", "runwright.cli.main", "controller", batch.run_id]
    other = subprocess.Popen(
        [*argv, "--root", str(tmp_path), "--inventory", str(inventory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with time_bound(180):  # the batch run reached its hold
            while not [
                e for e in store.events(batch.run_id, types=["STEP_HEALTHY"]) if e.step == 2
            ]:
                assert other.poll() is None, other.stdout.read()[-2000:]
                time.sleep(0.2)
        urgent, _ = controller.submit(spec_for("urgent", steps=2, priority=10), tmp_path)
        assert controller.drive(urgent.run_id).state == "SUCCEEDED"
        out, _ = other.communicate(timeout=300)
    finally:
        other.kill()
    assert store.get_run(batch.run_id).state == "SUCCEEDED", out[-2000:]
    (asked,) = store.events(batch.run_id, types=["STOP_REQUESTED"])
    assert asked.attributes["reason"] == "preemption"
    (killed,) = store.events(batch.run_id, types=["STOP_GRACE_EXPIRED"])
    assert killed.attributes["reason"] == "preemption"
    assert killed.attributes["grace_seconds"] == 2
    assert killed.time_unix_s - asked.time_unix_s >= 2
    (failure,) = store.events(batch.run_id, types=["FAILURE_CLASSIFIED"])
    assert failure.attributes["failure_class"] == "preemption"
    # Requeued behind the urgent run: its second admission follows the urgent run's release.
    _, again = store.events(batch.run_id, types=["RUN_ADMITTED"])
    (urgent_released,) = store.events(urgent.run_id, types=["ALLOCATION_RELEASED"])
    assert urgent_released.time_unix_s <= again.time_unix_s
    restored = [e.step for e in store.events(batch.run_id, types=["RESTORED"]) if e.generation == 2]
    assert restored and set(restored) == {2}
    store.close()
