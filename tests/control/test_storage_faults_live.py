"""Checkpoint storage faults on real runs (issue 16) and the durability_lag alert (issue 15).

Two ranks under torchrun (gloo) train tests/control/scripts/alert_phases.py, driven by the
controller, with `checkpoint.location: faulty+file://...`: their checkpoints go through the
fault-injecting file system (runwright/ckpt/faultfs.py), whose faults this test arms and
disarms from outside through the control file, as an operator's drill would.

- durability_lag (default suite): async saves with `slow` armed trail staging by more than the
  default rule's two checkpoint intervals; the rule fires; the test disarms `slow` on the
  ALERT_FIRED event, persistence catches up, and the rule clears on its exit condition.
- slow suite: a storage timeout, a full volume and a volume that turns read-only mid-save under
  `on_save_failure: skip` (the run trains on and ends bitwise where a fault-free run does); the
  same faults under `stop` (the run fails with class `storage`, each restart restores the last
  good checkpoint, and it too ends bitwise-equal), a save that hangs past
  `checkpoint.save_timeout_seconds` among them; and a volume that stays read-only, which ends
  the run FAILED once the storage retries are spent, its latest checkpoint untouched.
"""

import errno
from pathlib import Path

import pytest

from runwright.ckpt import faultfs
from runwright.ckpt.faultfs import Fault
from runwright.ckpt.fence import open_fence
from runwright.control.controller import Controller
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.spec import spec_from_mapping
from runwright.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "alert_phases.py"
EVERY = 2
STEPS = 24

pytestmark = pytest.mark.integration


def spec_for(
    control: Path, location: str, steps: int, devices: int = 2, retries: int = 2, **checkpoint
):
    return spec_from_mapping(
        {
            "name": "storage-faults",
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-seconds", "0.02"]},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": devices},
            "checkpoint": {
                "interval": {"policy": "steps", "every_steps": EVERY},
                "location": location,
                **checkpoint,
            },
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "policies": {"storage": {"max_retries": retries, "backoff_seconds": 0.2}},
            },
            "environment": {"env": {faultfs.CONTROL_ENV: str(control)}},
            "governance": {"owner": "alice"},
        }
    )


def durability_lag(store, run_id, kind):
    return [
        e for e in store.events(run_id, types=[kind]) if e.attributes["rule"] == "durability_lag"
    ]


def test_durability_lag_fires_while_persistence_trails_and_clears_once_it_catches_up(tmp_path):
    """One rank: the rule reads rank 0's saves, and a second rank would only add start-up time."""
    control = tmp_path / "faults.json"
    # Each file a save writes takes 1 s more: the rank's five (its shard, its file list, DCP's
    # metadata, the manifest, COMMITTED) make a persist of about 5 s against 2 steps of 0.02 s,
    # so three saves in flight (max_inflight) trail the newest staged one by 6 steps: 3 intervals,
    # past the default rule's 2.
    faultfs.arm(control, Fault(kind="slow", seconds=1.0))
    location = f"faulty+file://{tmp_path}/ckpt"
    spec = spec_for(control, location, STEPS, devices=1, mode="async", max_inflight=3)
    assert [r for r in spec.observability.alerts.effective() if r.kind == "durability_lag"]
    store = Store.open(tmp_path)
    disarmed: list[int] = []

    def on_event(event) -> None:
        if event.type == EventType.ALERT_FIRED and event.attributes["rule"] == "durability_lag":
            faultfs.disarm(control)
            disarmed.append(event.seq)

    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec, tmp_path)
    ended = controller.drive(run.run_id)
    assert ended.state == "SUCCEEDED", ended.state_detail
    (fired,) = durability_lag(store, run.run_id, EventType.ALERT_FIRED)
    assert fired.attributes["value"] > 2.0 and fired.attributes["interval_steps"] == EVERY
    assert fired.attributes["lag_steps"] > 2 * EVERY and fired.attributes["owner"] == "alice"
    (cleared,) = durability_lag(store, run.run_id, EventType.ALERT_CLEARED)
    assert cleared.seq > fired.seq and "exit: value <= 1" in cleared.attributes["reason"]
    # Nothing was lost on the way: every save committed, the last one at the last step.
    assert disarmed == [fired.seq] and faultfs.armed(control).faults == []
    assert not store.events(run.run_id, types=[EventType.CHECKPOINT_FAILED])
    staged = store.events(run.run_id, types=[EventType.CHECKPOINT_STAGED])
    committed = store.events(run.run_id, types=[EventType.CHECKPOINT_COMMITTED])
    assert [e.step for e in committed] == [e.step for e in staged] == list(range(2, 25, 2))
    store.close()


# -- the slow suite: each fault against a fault-free run of the same spec ------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store and a fault-free reference run that the fault runs are compared with."""
    root = tmp_path_factory.mktemp("storage-faults")
    store = Store.open(root)
    reference = drive(store, root, spec_for(root / "none.json", f"faulty+file://{root}/ref", 12))
    assert reference.state == "SUCCEEDED", reference.state_detail
    yield root, store, reference.run_id
    store.close()


def drive(store, root, spec, on_event=None):
    controller = Controller(store, root, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec, root)
    return controller.drive(run.run_id)


def ends_where_the_reference_does(store, reference_id, run_id):
    verdict = compare_runs(store, reference_id, run_id)
    assert verdict.equivalence == "bitwise-equal", verdict
    assert verdict.parameters_compared > 0


def failed_saves(store, run_id):
    """(generation, step) -> (errno, on_save_failure) of every CHECKPOINT_FAILED."""
    return {
        (e.generation, e.step): (e.attributes["errno"], e.attributes["on_save_failure"])
        for e in store.events(run_id, types=[EventType.CHECKPOINT_FAILED])
    }


@pytest.mark.slow
def test_skip_trains_past_a_timeout_a_full_volume_and_a_volume_turned_read_only(world):
    root, store, reference = world
    control = root / "skip.json"
    faultfs.arm(
        control,
        Fault(kind="timeout", seconds=0.5, path="*/0000000004-*", times=1),
        Fault(kind="full", path="*/0000000006-*", times=1),
        # read-only once the shards are written: DCP's metadata rename, the manifest, the
        # commit marker and the failed save's cleanup are refused
        Fault(kind="read_only", path="*/0000000008-*", operations=["put", "mutate"]),
    )
    location = f"faulty+file://{root}/skip"
    ended = drive(store, root, spec_for(control, location, 12, on_save_failure="skip"))
    assert (ended.state, ended.generation) == ("SUCCEEDED", 1), ended.state_detail
    assert failed_saves(store, ended.run_id) == {
        (1, 4): (errno.ETIMEDOUT, "skip"),
        (1, 6): (errno.ENOSPC, "skip"),
        (1, 8): (errno.EROFS, "skip"),
    }
    committed = store.events(ended.run_id, types=[EventType.CHECKPOINT_COMMITTED])
    assert [e.step for e in committed] == [2, 10, 12]
    assert open_fence(f"{location}/{ended.run_id}").latest().step == 12
    # step 8's shards stayed (their removal was refused too), uncommitted: never a checkpoint
    (residue,) = (root / "skip" / ended.run_id).glob("0000000008-*")
    assert list(residue.glob("*.distcp")) and not (residue / "COMMITTED").exists()
    assert not list((root / "skip" / ended.run_id).glob("000000000[46]-*"))
    ends_where_the_reference_does(store, reference, ended.run_id)


@pytest.mark.slow
def test_stop_restarts_as_storage_and_each_generation_restores_the_last_good_save(world):
    """Generation 1's save of step 6 finds the volume full; generation 2's save of step 8 hangs
    (a write blocked for 60 s) past save_timeout_seconds=3. Each stops its generation as a
    `storage` failure, each restart restores the newest good checkpoint, and the third
    generation finishes where a run without faults does."""
    root, store, reference = world
    control = root / "stop.json"
    faultfs.arm(
        control,
        Fault(kind="full", path="*/0000000006-g000001-*"),
        Fault(kind="timeout", seconds=60.0, path="*/0000000008-g000002-*", times=1),
    )
    spec = spec_for(control, f"faulty+file://{root}/stop", 12, save_timeout_seconds=3.0)
    ended = drive(store, root, spec)
    assert (ended.state, ended.generation) == ("SUCCEEDED", 3), ended.state_detail
    assert failed_saves(store, ended.run_id) == {
        (1, 6): (errno.ENOSPC, "stop"),
        (2, 8): (errno.ETIMEDOUT, "stop"),
    }
    failures = store.events(ended.run_id, types=[EventType.FAILURE_CLASSIFIED])
    assert [e.attributes["failure_class"] for e in failures] == ["storage", "storage"]
    assert "past checkpoint.save_timeout_seconds=3" in failures[1].attributes["message"]
    restored = store.events(ended.run_id, types=[EventType.RESTORED])
    assert {(e.generation, e.step) for e in restored} == {(1, 0), (2, 4), (3, 6)}
    ends_where_the_reference_does(store, reference, ended.run_id)


@pytest.mark.slow
def test_a_volume_that_stays_read_only_ends_the_run_failed_with_its_latest_checkpoint_intact(
    world,
):
    """From step 4 on every write is refused, so every generation fails its first save there:
    after the one storage retry the run is FAILED (FAILED_RECOVERABLE), and its latest
    checkpoint is still step 2, which the retry restored."""
    root, store, _ = world
    control = root / "read-only.json"
    faultfs.arm(
        control,
        Fault(kind="read_only", path="*/000000000[4-9]-*"),
        Fault(kind="read_only", path="*/00000000[1-9][0-9]-*"),
    )
    location = f"faulty+file://{root}/read-only"
    spec = spec_for(control, location, 12, retries=1)
    ended = drive(store, root, spec)
    assert (ended.state, ended.terminal_reason) == ("FAILED", "FAILED_RECOVERABLE")
    assert "storage retries exhausted" in ended.state_detail
    assert failed_saves(store, ended.run_id) == {
        (1, 4): (errno.EROFS, "stop"),
        (2, 4): (errno.EROFS, "stop"),
    }
    restored = store.events(ended.run_id, types=[EventType.RESTORED])
    assert {(e.generation, e.step) for e in restored} == {(1, 0), (2, 2)}
    assert open_fence(f"{location}/{ended.run_id}").latest().step == 2
