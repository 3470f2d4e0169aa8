"""The watchdog's steady-state no-progress limit: derived from the generation's own step times,
separate from the start-up allowance, capped by progress_timeout_seconds (control/watchdog.py)."""

import pytest

from runwright.control.watchdog import MIN_STEP_SAMPLES, Watchdog
from runwright.spec import FailureClass, RecoverySpec

REC = RecoverySpec(
    heartbeat_interval_seconds=0.5,
    heartbeat_timeout_seconds=5,
    progress_timeout_seconds=45,
    warmup_steps=1,
)


def trained(dog: Watchdog, steps: int, seconds_per_step: float, t0: float = 100.0) -> float:
    """Both ranks report `steps` steps, `seconds_per_step` apart by the workers' clocks; the
    controller reads them all at once (as a busy controller does): the monotonic time read."""
    for step in range(1, steps + 1):
        for rank in range(dog.world_size):
            dog.step(rank, step, at_unix_s=1e9 + step * seconds_per_step)
    dog.beats = dict.fromkeys(range(dog.world_size), t0)
    dog.last_advance = t0
    return t0


def test_start_up_is_judged_by_the_progress_timeout_until_step_times_are_measured():
    dog = Watchdog(REC, world_size=2)
    t0 = trained(dog, MIN_STEP_SAMPLES, 0.3)  # MIN_STEP_SAMPLES steps: one interval short
    assert dog.steady_limit() is None
    dog.beats = {0: t0 + 40, 1: t0 + 40}
    assert dog.check(now=t0 + 40) is None  # 40 s < 45 s: start-up rules
    dog.beats = {0: t0 + 46, 1: t0 + 46}
    late = dog.check(now=t0 + 46)
    assert late is not None and late.failure_class is FailureClass.NO_PROGRESS
    assert not late.suspect  # the cap: no confirmation needed


def test_once_steps_flow_a_stall_of_a_few_step_times_is_suspected_and_the_cap_still_stands():
    dog = Watchdog(REC, world_size=2)
    t0 = trained(dog, 20, 0.3)
    limit, why = dog.steady_limit()
    assert limit == 5.0 and "10 x p95 step 0.30 s" in why  # the floor: heartbeat timeout
    dog.beats = {0: t0 + 4.9, 1: t0 + 4.9}
    assert dog.check(now=t0 + 4.9) is None
    suspected = dog.check(now=t0 + 5.1)
    assert suspected.failure_class is FailureClass.NO_PROGRESS and suspected.suspect
    assert suspected.rank is None and "steady-state limit 5.0 s" in suspected.detail
    dog.beats = {0: t0 + 46, 1: t0 + 46}
    capped = dog.check(now=t0 + 46)
    assert capped.failure_class is FailureClass.NO_PROGRESS and not capped.suspect


def test_the_limit_follows_the_step_times_and_never_passes_the_cap():
    slow = Watchdog(REC, world_size=1)
    trained(slow, 20, 1.2)
    assert slow.steady_limit()[0] == pytest.approx(12.0)  # 10 x 1.2 s
    crawling = Watchdog(REC, world_size=1)
    trained(crawling, 20, 8.0)
    assert crawling.steady_limit()[0] == 45.0  # 80 s, capped


def test_warmup_and_saves_in_flight_keep_their_allowances():
    warm = Watchdog(REC.model_copy(update={"warmup_steps": 50}), world_size=1)
    t0 = trained(warm, 20, 0.3)
    warm.beats = {0: t0 + 60}
    assert warm.check(now=t0 + 60) is None  # warming up: 3 x 45 s
    saving = Watchdog(REC, world_size=1, save_timeout_seconds=30.0)
    t0 = trained(saving, 20, 0.3)
    saving.saves_changed(True, now=t0)
    saving.beats = {0: t0 + 20}
    assert saving.check(now=t0 + 20) is None  # the save's own timeout first
    saving.beats = {0: t0 + 36}
    assert saving.check(now=t0 + 36).suspect  # 30 s + the 5 s limit


def test_a_report_without_a_time_measures_nothing():
    dog = Watchdog(REC, world_size=1)
    for step in range(1, 30):
        dog.step(0, step)
    assert dog.steady_limit() is None


def test_a_step_that_waited_for_a_save_is_not_a_step_time():
    dog = Watchdog(REC, world_size=1)
    for step in range(1, 8):
        if step == 4:
            dog.saves_changed(True)  # a sync save of step 3: step 4 came 30 s later
            dog.saves_changed(False)
        dog.step(0, step, at_unix_s=1e9 + step * 0.3 + (30 if step >= 4 else 0))
    assert len(dog.step_seconds) == 5 and max(dog.step_seconds) < 0.31


def test_a_rank_that_acknowledged_a_stop_is_judged_by_the_progress_timeout():
    """A rank that stopped on request exits while the launcher collects the group: its silence
    past the heartbeat timeout is no hang, past the progress timeout it still is."""
    rec = RecoverySpec(heartbeat_timeout_seconds=4, progress_timeout_seconds=60)
    dog = Watchdog(rec, world_size=2, started_monotonic=0.0)
    dog.beats = {0: 100.0, 1: 100.0}
    dog.last_step, dog.last_advance = 5, 100.0
    assert dog.check(now=110.0).failure_class is FailureClass.HANG
    dog.finishing(0)
    dog.finishing(1)
    assert dog.check(now=110.0) is None
    assert dog.check(now=161.0).failure_class is FailureClass.HANG
