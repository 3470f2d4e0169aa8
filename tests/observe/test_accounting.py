"""The cost split: every allocated device-second lands in exactly one category."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.observe import account, build_timeline

from .events import attempt, event, step


def split_of(events, attempts, price=0.0):
    return account(events, attempts, build_timeline(events).steps, device_hour_price=price)


def test_replayed_steps_and_recovery_window():
    events = [
        step(11.0, 1),
        step(12.0, 2),
        event("FAILURE_CLASSIFIED", 13.0, failure_class="hang"),
        step(16.0, 2, generation=2),  # replay of step 2, starts at 15
        step(17.0, 3, generation=2),
    ]
    split = split_of(events, [attempt(1, 10.0, 14.0), attempt(2, 14.0, 18.0)])
    # productive: gen 1 steps 1, 2 (10-12) and gen 2 step 3 (16-17) = 3 s; replay: step 2
    # again (15-16); recovery: detection 13 -> 15; idle: 12-13 crash to detection, 17-18 tail
    assert split.wall_seconds.model_dump() == pytest.approx(
        {"productive": 3.0, "checkpoint": 0.0, "replay": 1.0, "recovery": 2.0, "idle": 2.0}
    )
    assert split.recoveries[0].healthy_unix_s == 15.0


def test_commit_outside_any_step_is_checkpoint_time():
    events = [step(11.0, 1), event("CHECKPOINT_COMMITTED", 13.0, step=7, stall_seconds=1.5)]
    split = split_of(events, [attempt(1, 10.0, 14.0, world_size=4)], price=36.0)
    assert split.wall_seconds.checkpoint == pytest.approx(1.5)
    assert split.device_seconds.checkpoint == pytest.approx(6.0)
    assert split.cost.checkpoint == pytest.approx(6.0 / 3600 * 36.0)


def test_without_attempts_the_events_bound_the_allocation():
    events = [step(11.0, 1, rank=0), step(11.0, 1, rank=1), step(12.0, 2, rank=0)]
    split = split_of(events, [])
    assert split.attempts[0].world_size == 2
    assert split.device_seconds.total == pytest.approx(2 * (12.0 - 11.0))


step_plans = st.lists(
    st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 2.0), st.floats(0.0, 1.0), st.booleans()),
    min_size=0,
    max_size=12,
)


@given(step_plans, st.integers(1, 8), st.floats(0.0, 5.0), st.booleans())
def test_split_partitions_the_allocation(plan, world_size, gap, fail):
    # Steps of random lengths and stalls, some overlapping, a failure and a second attempt.
    events, now, number_ = [], 100.0, 0
    for pause, seconds, stall, commit in plan:
        now += pause + seconds
        number_ += 1
        events.append(step(now, number_, seconds=seconds, checkpoint_stall_seconds=stall))
        if commit:
            events.append(
                event("CHECKPOINT_COMMITTED", now + 0.1, step=number_, stall_seconds=stall)
            )
    end1 = now + 1.0
    attempts = [attempt(1, 100.0, end1, world_size)]
    if fail:
        events.append(event("FAILURE_CLASSIFIED", end1 - 0.5))
        start2 = end1 + gap
        events.append(step(start2 + 2.0, max(number_, 1), generation=2, seconds=1.0))
        attempts.append(attempt(2, start2, start2 + 3.0, world_size))
    split = split_of(events, attempts, price=1.0)
    allocated = sum(a.device_seconds for a in split.attempts)
    assert split.device_seconds.total == pytest.approx(allocated, rel=1e-9, abs=1e-6)
    window = max(a.end_unix_s for a in split.attempts) - 100.0
    assert split.wall_seconds.total == pytest.approx(window, rel=1e-9, abs=1e-6)
    assert all(getattr(split.device_seconds, c) >= 0 for c in ("productive", "idle", "replay"))
