"""The dashboard's data (govern/dashboard.py) for the fixture run of tests/govern/conftest.py: a
two-rank run that lost rank 1 after step 4 and replayed steps 3-4 in generation 2, every figure
known by hand."""

import pytest

from runwright.events import EventType
from runwright.govern.dashboard import (
    chart_data,
    compare_view,
    drift_windows,
    open_alerts,
    run_view,
)
from runwright.govern.report import collect_report

from .conftest import RUN_ID


@pytest.fixture
def view(store):
    report, timeline = collect_report(store, RUN_ID)
    events = [e.model_dump(mode="json") for e in store.events(RUN_ID)]
    return run_view(report.model_dump(mode="json"), timeline, events, now_unix_s=1030.0)


def test_step_series_by_hand(view):
    steps = view["steps"]
    assert steps["step"] == [1, 2, 3, 4, 3, 4, 5, 6]
    assert steps["generation"] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert steps["replay"] == [False] * 4 + [True, True, False, False]
    # Each rank feeds 256 device tokens per step; the slowest rank takes 2.0 s:
    # 2 ranks x 256 tokens / 2.0 s = 256 tokens/s.
    assert steps["tokens_per_second"] == [256.0] * 8
    # Replays add no tokens: 512 per first execution.
    assert steps["cumulative_device_tokens"] == [512, 1024, 1536, 2048, 2048, 2048, 2560, 3072]
    assert steps["rank_step_seconds"] == {"0": [2.0] * 8, "1": [1.5] * 8}
    # 2 ranks x 200 loss tokens / 2.0 s; the largest gradient norm of the two ranks (1.0, 1.1).
    assert steps["loss_tokens_per_second"] == [200.0] * 8
    assert steps["grad_norm"] == [pytest.approx(1.1)] * 8
    assert (steps["device_tokens"], steps["loss_tokens"], steps["padded_tokens"]) == (
        [512] * 8, [400] * 8, [32] * 8
    )  # fmt: skip
    # No gradient sync reported: busy = step time; 2.0 s over the median of (2.0, 1.5).
    assert steps["straggler_score"] == [pytest.approx(2.0 / 1.75)] * 8


def test_the_straggler_score_leaves_out_the_wait_in_gradient_sync():
    """Under DDP every rank's step takes the slowest's time, the fast ones waiting in the
    gradient all-reduce: the score reads busy time (step less sync), as the straggler alert."""
    from runwright.govern.dashboard import step_series
    from runwright.observe.timeline import build_timeline
    from runwright.store import EventRecord

    def step(rank: int, sync: float) -> EventRecord:
        return EventRecord(seq=rank + 1, event_id=f"e{rank}", run_id="r", generation=1,
                           type="STEP_HEALTHY", step=1, time_unix_s=10.0,
                           attributes={"rank": rank, "step_seconds": 0.5,
                                       "grad_sync_seconds": sync})  # fmt: skip

    # Rank 2 sleeps 0.4 s in its forward; ranks 0 and 1 wait for it in the all-reduce:
    # busy 0.1, 0.1, 0.5 s, median 0.1, the straggler at 5.0.
    timeline = build_timeline([step(0, 0.4), step(1, 0.4), step(2, 0.0)])
    assert timeline.steps[0].rank_busy_seconds == pytest.approx({0: 0.1, 1: 0.1, 2: 0.5})
    assert step_series(timeline)["straggler_score"] == [pytest.approx(5.0)]
    assert step_series(timeline)["rank_step_seconds"] == {"0": [0.5], "1": [0.5], "2": [0.5]}


def test_beyond_eight_ranks_the_step_time_chart_draws_the_slowest_only():
    from runwright.govern.dashboard import MAX_RANK_LINES, step_series
    from runwright.observe.timeline import build_timeline
    from runwright.store import EventRecord

    ranks = MAX_RANK_LINES + 1
    timeline = build_timeline(
        EventRecord(seq=r + 1, event_id=f"e{r}", run_id="r", generation=1, type="STEP_HEALTHY",
                    step=1, time_unix_s=10.0, attributes={"rank": r, "step_seconds": 1.0 + r})
        for r in range(ranks)
    )  # fmt: skip
    series = step_series(timeline)
    assert series["rank_step_seconds"] == {} and series["step_seconds"] == [float(ranks)]


def test_markers_states_and_checkpoints(view):
    kinds = [m["kind"] for m in view["markers"]]
    assert "incident" in kinds and "restore" in kinds and "checkpoint" in kinds
    # The log's state changes as spans; the run ended at 1025, so its window ends there (not
    # at "now", 1030).
    spans = [(s["state"], s["start_unix_s"], s["end_unix_s"]) for s in view["states"]]
    assert spans == [("STARTING", 1000.0, 1025.0), ("SUCCEEDED", 1025.0, 1025.0)]
    (saved,) = view["checkpoints"]
    assert saved["checkpoint_id"] == "ck-2" and saved["step"] == 2
    # Step 2 ended at 1006.0 and its checkpoint committed at 1006.5.
    assert saved["durability_lag_seconds"] == pytest.approx(0.5)
    assert {r["source"] for r in view["mixture"]} == {"code", "prose"}
    assert view["last_seq"] == view["events"][-1]["seq"]


def test_a_live_runs_last_state_is_open_until_now():
    from runwright.govern.dashboard import state_spans

    history = [{"time_unix_s": 1000.0, "to_state": "RUNNING", "generation": 1}]
    (span,) = state_spans({"state_history": history}, now_unix_s=1030.0)
    assert (span["start_unix_s"], span["end_unix_s"]) == (1000.0, 1030.0)


def test_evaluations_are_charted_beside_the_training_loss(store):
    from runwright.store import NewEvent

    for step, loss in ((2, 3.5), (4, 3.1)):
        store.append_event(
            NewEvent(event_id=f"eval-{step}", run_id=RUN_ID, generation=1,
                     type=EventType.EVALUATED, step=step, checkpoint_id=f"ck-{step}",
                     time_unix_s=1000.0 + 2 * step, attributes={"eval_loss": loss, "rank": 0}),
            fenced=False,
        )  # fmt: skip
    report, timeline = collect_report(store, RUN_ID)
    events = [e.model_dump(mode="json") for e in store.events(RUN_ID)]
    data = chart_data(report.model_dump(mode="json"), timeline, events, now_unix_s=1030.0)
    shown = [(e["step"], e["eval_loss"], e["checkpoint_id"]) for e in data["evaluations"]]
    assert shown == [(2, 3.5, "ck-2"), (4, 3.1, "ck-4")]


def _alert(seq: int, kind: str, alert_id: str, **attrs) -> dict:
    return {"seq": seq, "type": kind, "time_unix_s": 1000.0 + seq, "step": seq,
            "attributes": {"alert_id": alert_id, **attrs}}  # fmt: skip


def test_an_alert_is_open_from_fired_until_cleared():
    events = [
        _alert(1, EventType.ALERT_FIRED, "straggler:rank1", rule="straggler", severity="warning"),
        _alert(2, EventType.ALERT_FIRED, "input_stall", rule="input_stall"),
        _alert(3, EventType.ALERT_CLEARED, "input_stall", reason="exit condition held"),
        _alert(4, EventType.ALERT_FIRED, "loss_spike", rule="loss_spike"),
        _alert(5, EventType.ALERT_CLEARED, "loss_spike"),
        _alert(6, EventType.ALERT_FIRED, "loss_spike", rule="loss_spike", severity="critical"),
    ]
    shown = {a["alert_id"]: a["severity"] for a in open_alerts(events)}
    assert shown == {"straggler:rank1": "warning", "loss_spike": "critical"}


def test_drift_windows_come_from_the_loaders_reports_in_order():
    attrs = {"first_step": 1, "last_step": 50, "shares": {"a": 0.7}, "targets": {"a": 0.6},
             "max_deviation": 0.1, "loss_token_share": 0.9, "draws": {"a": 7}}  # fmt: skip
    events = [
        {"seq": 1, "type": EventType.STEP_HEALTHY, "time_unix_s": 10.0, "attributes": {}},
        {"seq": 2, "type": EventType.MIXTURE_WINDOW, "time_unix_s": 11.0, "attributes": attrs},
    ]
    (window,) = drift_windows(events)
    assert window == {"time_unix_s": 11.0, **{k: v for k, v in attrs.items() if k != "draws"}}


def test_compare_drops_replays_and_carries_the_diff(store):
    report, timeline = collect_report(store, RUN_ID)
    content = report.model_dump(mode="json")
    view = compare_view([(content, timeline), (content, timeline)], [[]])
    first = view["runs"][0]
    assert first["step"] == [1, 2, 3, 4, 5, 6]
    assert first["tokens"] == [512, 1024, 1536, 2048, 2560, 3072]
    assert view["spec_diff"] == [{"against": RUN_ID, "run_id": RUN_ID, "differences": []}]
