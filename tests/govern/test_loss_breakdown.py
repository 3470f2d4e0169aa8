"""The loss by source and by length bucket on the time axis: every rank's sums merged into one
token-weighted mean per step (observe/timeline.py), the report's table and the charts' lines
(govern/loss_breakdown.py), worked by hand."""

import pytest

from runwright.govern.dashboard import step_series
from runwright.govern.loss_breakdown import breakdown_rows
from runwright.observe.timeline import build_timeline
from runwright.store import EventRecord


def step(seq: int, generation: int, number: int, rank: int, sources, lengths) -> EventRecord:
    return EventRecord(seq=seq, event_id=f"e{seq}", run_id="r", generation=generation,
                       type="STEP_HEALTHY", step=number, time_unix_s=10.0 * seq,
                       attributes={"rank": rank, "loss": 1.0, "loss_tokens": 10,
                                   "source_loss": sources, "length_loss": lengths})  # fmt: skip


def test_ranks_merge_into_token_weighted_means_and_the_table_counts_first_executions():
    events = [
        # step 1: rank 0 saw 30 web tokens summing 90 and 10 code summing 10; rank 1 10 web
        # tokens summing 50. web = (90 + 50) / 40 = 3.5, code = 1.0.
        step(1, 1, 1, 0, {"web": [90.0, 30], "code": [10.0, 10]}, {"1-128": [100.0, 40]}),
        step(2, 1, 1, 1, {"web": [50.0, 10]}, {">512": [50.0, 10]}),
        step(3, 1, 2, 0, {"web": [40.0, 20], "code": [6.0, 3]}, {"1-128": [46.0, 23]}),
        # generation 2 replays step 2 after a restore: drawn, not counted again in the table.
        step(4, 2, 2, 0, {"web": [80.0, 20]}, {"129-512": [80.0, 20]}),
        step(5, 1, 0, 1, "not a mapping", {"1-128": ["x", 3], "bad": [1.0]}),  # ignored
    ]
    timeline = build_timeline(events)
    first, _, replay = (p for p in timeline.steps if p.step in (1, 2))
    assert first.source_loss == {"code": [1.0, 10], "web": [3.5, 40]}
    assert first.length_loss == {"1-128": [2.5, 40], ">512": [5.0, 10]}
    # The tokens of the sources add up to the step's, and so does their weighted loss:
    # (1.0 x 10 + 3.5 x 40) / 50 = 3.0 = the bucket side's (2.5 x 40 + 5.0 x 10) / 50.
    assert sum(t for _, t in first.source_loss.values()) == 50
    assert replay.replay and replay.source_loss == {"web": [4.0, 20]}
    rows = {(r.kind, r.name): r for r in breakdown_rows(timeline)}
    web = rows["source", "web"]
    assert (web.steps, web.loss_tokens, web.first_loss, web.last_loss) == (2, 60, 3.5, 2.0)
    assert web.mean_loss == pytest.approx((3.5 * 40 + 2.0 * 20) / 60)
    assert [r.name for r in breakdown_rows(timeline) if r.kind == "length"] == ["1-128", ">512"]
    series = step_series(timeline)
    assert series["source_loss"]["code"][:3] == [1.0, pytest.approx(2.0), None]
    assert list(series["length_loss"]) == ["1-128", "129-512", ">512"]  # by lower bound
