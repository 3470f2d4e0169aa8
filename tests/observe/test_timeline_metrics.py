"""Steps merged over ranks on one time axis, and the Prometheus exposition."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runwright.observe import build_timeline, run_metrics

from .events import event, step


def run_events():
    return [
        event("STATE_CHANGED", 9.0, from_state="STARTING", to_state="RUNNING"),
        step(
            10.0,
            1,
            rank=0,
            seconds=1.0,
            loss=2.0,
            loss_tokens=100,
            device_tokens=128,
            data_wait_seconds=0.25,
        ),
        step(10.1, 1, rank=1, seconds=1.2, loss=4.0, loss_tokens=300, device_tokens=128),
        event(
            "CHECKPOINT_COMMITTED",
            10.5,
            step=1,
            checkpoint_id="c1",
            rank=0,
            stall_seconds=0.5,
            bytes=10,
        ),
        event(
            "CHECKPOINT_COMMITTED",
            10.5,
            step=1,
            checkpoint_id="c1",
            rank=1,
            stall_seconds=0.5,
            bytes=10,
        ),
        event("FAILURE_CLASSIFIED", 11.0, failure_class="oom", rank=1),
        event(
            "RECOVERY_SUCCEEDED",
            13.0,
            generation=2,
            lost_steps=0,
            replayed_tokens=0,
            recovery_seconds=2.0,
        ),
        step(14.0, 1, rank=0, generation=2, loss="nan"),
    ]


def test_ranks_merge_into_one_point_and_replays_are_marked():
    timeline = build_timeline(run_events())
    first, again = timeline.steps
    assert first.step_seconds == 1.2 and first.rank_step_seconds == {0: 1.0, 1: 1.2}
    # token-weighted loss: (2.0 x 100 + 4.0 x 300) / 400
    assert first.loss == pytest.approx(3.5)
    assert first.device_tokens == 256 and first.data_wait_seconds == 0.25
    assert not first.replay and again.replay and again.loss is None
    assert timeline.ranks == [0, 1]
    assert [m.kind for m in timeline.markers] == ["checkpoint", "incident"]


def test_exposition_counts_each_commit_once():
    text = run_metrics(run_events(), state="SUCCEEDED").exposition()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("runwright_steps_total", ())] == 2
    assert samples[("runwright_tokens_total", (("kind", "device"),))] == 256
    assert samples[("runwright_checkpoints_committed_total", ())] == 1
    assert samples[("runwright_checkpoint_stall_seconds_total", ())] == 0.5
    assert samples[("runwright_input_wait_seconds_total", ())] == 0.25
    assert samples[("runwright_failures_total", (("failure_class", "oom"),))] == 1
    assert samples[("runwright_recoveries_total", (("failure_class", "oom"),))] == 1
    assert samples[("runwright_run_state", (("state", "SUCCEEDED"),))] == 1
    assert samples[("runwright_run_state", (("state", "RUNNING"),))] == 0
    assert samples[("runwright_step_seconds_count", ())] == 3
    assert all(name.startswith("runwright_") for name, _ in samples)
