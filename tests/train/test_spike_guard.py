"""The loss-spike guard's rollback and pause (training.loss_spike; issue 18) under the controller,
with the reference trainer on one gloo rank whose loss is made to spike at step 5 (--spike-at-step,
first generation only). `skip` is covered beside the layouts (test_layouts.py).

- rollback: the step fails (LossSpikeError, LOSS_SPIKE naming step 5), recovery restarts from
  the step-4 checkpoint and skips step 5's batch, and the run succeeds; the report lists it.
- pause: step 5's update is dropped (LOSS_SPIKE_SKIPPED), the group stops at the next boundary
  it agrees on (the stop file's poll) with a save, and the run waits in PAUSED for a person, as
  `runwright pause` leaves it.
"""

import json

import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.govern.report import collect_report
from runwright.layout import run_paths
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("spike")
    dataset = build_dataset(TINY_DATA, root / "data")
    store = Store.open(root)
    yield root, store, dataset
    store.close()


def drive(world, action: str, steps: int, *args: str):
    root, store, dataset = world
    data = tiny_gpt(dataset, steps=steps, name=f"spike-{action}", devices=1, every_steps=2)
    data["training"]["loss_spike"] = {"threshold_ratio": 4.0, "window_steps": 2, "action": action}
    data["code"]["args"] = ["--spike-at-step", "5", "--spike-factor", "100", *args]
    controller = Controller(store, root, poll_seconds=0.1)
    run, _ = controller.submit(spec_from_mapping(data), root)
    return controller.drive(run.run_id)


@pytest.mark.slow  # two generations and a failure's detection: about a minute on 2 busy cores
def test_rollback_restarts_from_the_last_checkpoint_past_the_spiked_batch(world):
    _, store, _ = world
    run = drive(world, "rollback", 6)
    assert run.state == "SUCCEEDED", run.state_detail
    (spike,) = store.events(run.run_id, types=[EventType.LOSS_SPIKE])
    assert spike.step == 5 and spike.attributes["action"] == "rollback"
    (started,) = store.events(run.run_id, types=[EventType.RECOVERY_STARTED])
    assert started.attributes["skip_steps"] == [5, 5]
    restored = store.events(run.run_id, types=[EventType.RESTORED])
    assert [e.step for e in restored] == [0, 4]  # the fresh start, then the step-4 checkpoint
    healthy = list(per_rank(store.events(run.run_id, types=[EventType.STEP_HEALTHY])))
    skipped = [e.step for e in healthy if e.attributes.get("skipped")]
    assert skipped == [5]  # the restart consumed step 5's batch without learning from it
    report, _ = collect_report(store, run.run_id)
    assert [i.kind for i in report.interventions] == ["loss_spike_rollback"]
    assert report.incidents and report.incidents[0].failure_class == "nan_inf"


def test_pause_stops_with_a_save_and_waits_for_a_person(world):
    root, store, _ = world
    # Steps of 0.2 s: the stop file is polled every 0.5 s and the vote read a step later, so
    # the group stops a few steps after the spike, well before step 16.
    run = drive(world, "pause", 16, "--step-sleep", "0.2")
    assert run.state == "PAUSED", run.state_detail
    (skipped,) = store.events(run.run_id, types=[EventType.LOSS_SPIKE_SKIPPED])
    assert skipped.step == 5 and skipped.attributes["action"] == "pause"
    assert 5 <= run.last_step < 16
    assert store.checkpoints.list(run.run_id, status="COMMITTED")[-1].step == run.last_step
    kinds = [i.kind for i in collect_report(store, run.run_id)[0].interventions]
    assert kinds[:2] == ["loss_spike_pause", "pause"]
    # The spiked step was captured for the bundle before its update was dropped.
    (capture,) = run_paths(root, run.run_id).guard_captures(1, 0)
    record = json.loads(capture.read_text())
    assert (record["guard"], record["step"]) == ("loss_spike", 5)
    assert record["figures"]["window_mean"] > 0 and record["inputs"]["rows"]
