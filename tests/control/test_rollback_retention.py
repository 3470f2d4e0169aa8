"""An alert's rollback whose last healthy point retention has already removed (issue 15's
rollback, ARCHITECTURE.md's "retention that always keeps the last healthy point").

A controller that reads a run's steps late (a busy machine) learns of a loss spike only after
the group has trained past it and committed more checkpoints; with `keep_last: 3` the ones
before the spike are gone by then. Rolling back "to the newest checkpoint before the spike" would
then restart from scratch and skip every step since. The run is paused for a person instead, with
the reason in words; `resume` goes on from the newest checkpoint. The late reading is made
deterministic: the test's event hook holds the controller at generation 1's restore until the
fence names a checkpoint past the ones retention removes."""

import time
from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.control.pause import request_resume
from runwright.events import EventType
from runwright.spec import spec_from_mapping
from runwright.store import Outcome, Store
from runwright.store.fence import published_latest

SCRIPT = Path(__file__).parent / "scripts" / "alert_phases.py"
HELD_UNTIL_STEP = 25
"""The controller reads on once this checkpoint is published: with one every 5 steps and three
kept, its commit removed the ones at steps 5 and 10, both before the spike at step 12."""
HOLD_BOUND_SECONDS = 300.0
"""The bound of a hang while the group trains to HELD_UNTIL_STEP (about 5 s on a quiet machine)."""

pytestmark = pytest.mark.integration


def _spec():
    return spec_from_mapping(
        {
            "name": "rollback-retention",
            # Paced: the group must still be training when the late controller stops it.
            "code": {"entrypoint": str(SCRIPT), "args": ["--phase", "spike:12",
                                                         "--step-seconds", "0.15"]},
            "training": {"global_batch_samples": 8, "steps": 60, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 5}, "keep_last": 3},
            "recovery": {"heartbeat_interval_seconds": 0.5, "heartbeat_timeout_seconds": 60,
                         "progress_timeout_seconds": 120},
            "observability": {"alerts": {"defaults": False, "rules": [
                {"name": "loss_spike", "kind": "loss_spike", "threshold": 3.0,
                 "window_steps": 1, "clear_steps": 3, "action": "rollback"}]}},
        }
    )  # fmt: skip


def test_a_rollback_whose_checkpoints_retention_removed_pauses_for_a_person(tmp_path):
    store = Store.open(tmp_path)
    held: dict = {}

    def read_late(event) -> None:
        if held or event.type != EventType.RESTORED or event.generation != 1:
            return
        run = store.get_run(event.run_id)
        deadline = time.monotonic() + HOLD_BOUND_SECONDS
        while (latest := published_latest(run)) is None or latest[0].step < HELD_UNTIL_STEP:
            assert time.monotonic() < deadline, "the group never committed step 25"
            time.sleep(0.05)
        held["until"] = latest[0].step

    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=read_late)
    run, _ = controller.submit(_spec(), tmp_path)
    paused = controller.drive(run.run_id)
    assert held, "the controller was never held"
    assert paused.state == "PAUSED", paused.state_detail
    detail = paused.state_detail
    assert detail.startswith(f"paused at step {paused.last_step}: alert loss_spike: loss spike")
    assert (
        "its rollback was not taken: retention (checkpoint.keep_last 3) removed the checkpoints "
        "at step 5, 10 before the alert was acted on, so the newest one before step 12 is none "
        f"(the run's start) and a rollback would skip steps 1-{paused.last_step}"
    ) in detail, detail
    assert f"resume with `runwright resume {run.run_id}`" in detail
    assert not store.events(run.run_id, types=[EventType.RECOVERY_STARTED])
    (fired,) = store.events(run.run_id, types=[EventType.ALERT_FIRED])
    assert fired.attributes["action"] == "rollback" and fired.attributes["at_step"] == 12
    kept = [c.step for c in store.checkpoints.list(run.run_id, status="COMMITTED")]
    assert min(kept) > 12 and max(kept) >= HELD_UNTIL_STEP, kept

    # The person resumes: a new generation goes on from the newest checkpoint and finishes.
    assert request_resume(store, run.run_id, actor="alice").outcome is Outcome.APPLIED
    ended = controller.drive(run.run_id)
    assert ended.state == "SUCCEEDED", ended.state_detail
    restored = [e.step for e in store.events(run.run_id, types=[EventType.RESTORED])
                if e.generation > 1]  # fmt: skip
    assert restored == [max(kept)]
    store.close()
