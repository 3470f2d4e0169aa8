"""The fleet simulation: closed-form periods, determinism, agreement with Young's and Daly's
models where they hold, MTTF against job size, async against sync saves, spare exhaustion,
the Llama 3 preset's interruption count, and the policy sweep."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.plan import PlanError
from runwright.plan.fleet_engine import WALL_USES, run_segment, simulate_run
from runwright.plan.fleet_model import FailureClass, FleetInputs, SavePolicy, SaveSpec
from runwright.plan.fleet_presets import KOKOLIS_RSC1, LLAMA3_16K, preset
from runwright.plan.fleet_sim import simulate_fleet
from runwright.plan.fleet_sweep import policy_candidates, simulate_interval_plan, sweep
from runwright.plan.interval import (
    daly_interval_seconds,
    daly_waste_fraction,
    expected_waste_fraction,
    plan_interval,
    young_interval_seconds,
)

HOUR = 3600.0


def job(mtbf_seconds: float, days: float, **save) -> FleetInputs:
    """One job-level failure process (one device at rate 1 / M), restart 120 s, detect 60 s."""
    return FleetInputs(
        devices=1,
        devices_per_node=1,
        days=days,
        classes=[
            FailureClass(
                name="job",
                rate_per_device_hour=HOUR / mtbf_seconds,
                detect_seconds=60,
                restart_seconds=120,
            )
        ],
        save=SaveSpec(**({"stall_seconds": 30.0} | save)),
    )


def test_segment_sync_periods_in_closed_form():
    # T = 100, S = 10: saves end at 110, 220, 330; at 250 the third period has trained 30 s.
    seg = run_segment(250, interval=100, blocking=10, lag=0)
    assert seg.work_seconds == pytest.approx(2 * 100 + 30)
    assert seg.blocked_seconds == pytest.approx(20)
    assert seg.durable_saves == 2
    assert seg.pending_fraction == 0
    # Mid-stall at 215: 5 of the 10 blocking seconds of save 2 are done.
    mid = run_segment(215, interval=100, blocking=10, lag=0)
    assert (mid.durable_saves, mid.pending_fraction) == (1, pytest.approx(0.5))


def test_segment_async_lag_and_backlog():
    # Async: stall 10, persist 150 > T = 100. Save 0 stalls 100-110 and is durable at 260;
    # period 1 trains 110-210, waits 50 s for the backlog, stalls 260-270.
    seg = run_segment(240, interval=100, blocking=10, lag=150)
    assert seg.work_seconds == pytest.approx(200)
    assert seg.blocked_seconds == pytest.approx(40)
    assert seg.durable_saves == 0  # save 0 is still persisting: a failure now loses 200 s
    assert seg.pending_fraction == pytest.approx((240 - 100) / 160)
    later = run_segment(265, interval=100, blocking=10, lag=150)
    assert later.durable_saves == 1
    assert later.work_seconds == pytest.approx(200)


seconds = st.floats(min_value=0.0, max_value=1e6)


@given(seconds, st.floats(min_value=1.0, max_value=1e5), seconds, seconds)
def test_segment_invariants(duration, interval, blocking, lag):
    seg = run_segment(duration, interval, blocking, lag)
    assert seg.work_seconds + seg.blocked_seconds == pytest.approx(duration, abs=1e-6)
    assert seg.blocked_seconds >= -1e-6
    # What is durable was trained: the kept work never exceeds the work done.
    assert seg.durable_saves * interval <= seg.work_seconds + 1e-6
    # At most one save is in flight, and it is part done.
    assert 0.0 <= seg.pending_fraction <= 1.0 + 1e-9


def test_same_seed_same_run_and_seeds_differ():
    inputs = preset_inputs(LLAMA3_16K, spares={"nodes": 2, "repair_seconds": 6 * HOUR})
    a, b = simulate_fleet(inputs, seeds=2), simulate_fleet(inputs, seeds=2)
    assert a.model_dump() == b.model_dump()
    one, two = simulate_run(inputs, 0), simulate_run(inputs, 1)
    assert one.interruptions != two.interruptions


def preset_inputs(p, **update) -> FleetInputs:
    """The preset's fleet with its assumed save, fields replaced by `update` (validated)."""
    fields = {
        "devices": p.devices,
        "devices_per_node": p.devices_per_node,
        "days": p.days,
        "classes": p.classes,
        "save": SaveSpec(stall_seconds=p.stall_seconds, restore_seconds=p.restore_seconds),
    }
    return FleetInputs.model_validate(fields | update)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_wall_second_goes_to_one_use(mode):
    # Every class kind at once: node loss with a short pool, a restart-only class, planned.
    inputs = FleetInputs(
        devices=64,
        devices_per_node=8,
        days=60,
        classes=[
            FailureClass(name="gpu", rate_per_device_hour=1e-3, detect_seconds=90,
                         restart_seconds=200, needs_spare=True),
            FailureClass(name="sw", rate_per_device_hour=1e-4, detect_seconds=300),
            FailureClass(name="maint", rate_per_device_hour=5e-5, restart_seconds=60,
                         planned=True),
        ],
        save=SaveSpec(stall_seconds=20, persist_seconds=200, mode=mode, restore_seconds=60,
                      bytes=1e9),
        spares={"nodes": 1, "repair_seconds": 24 * HOUR},
    )  # fmt: skip
    for seed in range(3):
        run = simulate_run(inputs, seed)
        assert set(run.wall) == set(WALL_USES)
        assert sum(run.wall.values()) == pytest.approx(inputs.wall_seconds, rel=1e-9)
        assert all(v >= 0 for v in run.wall.values())
        assert run.wall["spare_wait"] > 0 and run.interruptions["maint"] > 0
        assert sum(run.lost_per_failure) == pytest.approx(run.wall["lost"])


def test_simulated_waste_matches_daly_and_young_where_they_hold():
    # C = 30 s, M = 6 h, R + D = 180 s: C << T << M. 8 runs of 800 failures each.
    m = 6 * HOUR
    t = young_interval_seconds(30, m)
    report = simulate_fleet(job(m, days=800 * m / 86_400, policy="young"), seeds=8)
    waste = 1 - report.ettr.mean
    assert report.interval_seconds.mean == pytest.approx(t)
    # Daly's complete model (failures during restarts too) is what the engine walks: to 2 %.
    assert waste == pytest.approx(daly_waste_fraction(t, 30, m, 180), rel=0.02)
    # Young's first-order W(T) drops second-order terms: within a few percent.
    assert waste == pytest.approx(expected_waste_fraction(t, 30, m, 120, 60), rel=0.05)
    assert report.analytic is not None
    assert report.analytic.first_order_ettr == pytest.approx(report.ettr.mean, abs=0.005)


def test_mttf_falls_as_one_over_devices():
    # RSC-1's rate: 6.50 failures per 1,000 node-days; ~1,000 failures per run at each size.
    rate = KOKOLIS_RSC1.classes[0].rate_per_device_hour
    products = []
    for devices in (1024, 4096, 16_384):
        mttf_hours = 1 / (devices * rate)
        inputs = preset_inputs(KOKOLIS_RSC1, devices=devices, days=1000 * mttf_hours / 24)
        products.append(simulate_fleet(inputs, seeds=4).mttf_hours.mean * devices)
        if devices == 16_384:  # Kokolis et al. 2024's projection for 16,384 GPUs: 1.8 h
            assert products[-1] / devices == pytest.approx(1.8, rel=0.04)
    assert max(products) / min(products) < 1.05


def test_async_beats_sync_when_persist_is_long_and_lags_durability():
    m = 4 * HOUR
    common = {"stall_seconds": 5.0, "persist_seconds": 300.0, "policy": "fixed",
              "interval_seconds": 1200.0}  # fmt: skip
    days = 400 * m / 86_400
    sync = simulate_fleet(job(m, days, **common, mode="sync"), seeds=4)
    asyn = simulate_fleet(job(m, days, **common, mode="async"), seeds=4)
    # Sync blocks 305 s a save, async 5 s: at T = 1200 s that is ~20 points of wall time.
    assert asyn.ettr.min > sync.ettr.max + 0.1
    # But an async save is durable 300 s late, so each failure loses more work on average.
    assert asyn.lost_per_failure.mean_seconds > sync.lost_per_failure.mean_seconds + 100
    assert asyn.abandoned_saves.mean > 0


def test_spare_exhaustion_turns_into_waiting():
    # Node losses every ~2 h; a lost node is back after 12 h on average.
    waits, ettr = [], []
    for nodes in (None, 8, 4, 1, 0):
        spares = {"nodes": nodes, "repair_seconds": 12 * HOUR}
        inputs = preset_inputs(KOKOLIS_RSC1, devices=4096, days=60, spares=spares)
        report = simulate_fleet(inputs, seeds=2)
        waits.append(report.spare_wait_seconds.mean)
        ettr.append(report.ettr.mean)
    assert waits[0] == 0
    assert waits == sorted(waits) and waits[-1] > 10 * HOUR
    assert ettr == sorted(ettr, reverse=True)
    # Spares cost devices even when idle: goodput counts them, ETTR does not.
    held = simulate_fleet(preset_inputs(KOKOLIS_RSC1, devices=4096, spares={"nodes": 8}), seeds=1)
    assert held.goodput_fraction.mean == pytest.approx(held.ettr.mean * 4096 / (4096 + 8 * 8))


def test_llama3_preset_gives_its_466_interruptions():
    report = simulate_fleet(preset_inputs(LLAMA3_16K), seeds=8)
    # Poisson: 466 +- sqrt(466) = 21.6 per run; the mean of 8 within 3 standard errors.
    assert report.interruptions.mean == pytest.approx(466, abs=3 * math.sqrt(466 / 8))
    assert report.unplanned_interruptions.mean == pytest.approx(419, abs=3 * math.sqrt(419 / 8))
    assert report.interruptions.max - report.interruptions.min < 8 * math.sqrt(466)
    assert report.interruptions_by_class["gpu"] / report.unplanned_interruptions.mean == (
        pytest.approx(268 / 419, abs=0.04)
    )


def test_planned_interruptions_drain_and_lose_nothing():
    inputs = FleetInputs.model_validate(
        job(10 * HOUR, 120, stall_seconds=1.0, policy="fixed", interval_seconds=900).model_dump()
        | {"classes": [FailureClass(name="maint", rate_per_device_hour=0.1, planned=True)]}
    )
    report = simulate_fleet(inputs, seeds=2, first_seed=3)
    assert report.interruptions.mean > 250  # 0.1 an hour for 120 days: 288 expected
    assert report.lost_seconds.max == 0
    assert report.analytic is None  # nothing loses work: no first-order model to compare


def test_adaptive_recovers_from_a_wrong_prior():
    m = 2 * HOUR
    wrong = 10 * m  # declared MTBF ten times too optimistic; it weighs as one failure
    days = 400 * m / 86_400
    adaptive = simulate_fleet(job(m, days, policy="adaptive", prior_mtbf_seconds=wrong), seeds=4)
    stale = simulate_fleet(
        job(m, days, policy="fixed", interval_seconds=daly_interval_seconds(30, wrong)), seeds=4
    )
    daly = simulate_fleet(job(m, days, policy="daly"), seeds=4)
    assert adaptive.ettr.mean > stale.ettr.mean + 0.01
    assert adaptive.ettr.mean == pytest.approx(daly.ettr.mean, abs=0.005)
    assert adaptive.interval_seconds.mean < 1.2 * daly.interval_seconds.mean


def test_interval_sweep_finds_the_optimum_near_young_and_daly():
    plan = plan_interval(30, 6 * HOUR, restart_seconds=120, detect_seconds=60)
    result = simulate_interval_plan(plan, seeds=4)
    assert {r.label for r in result.rows} >= {"young", "daly", "adaptive", "0.25 x young"}
    young = next(r for r in result.rows if r.label == "young")
    assert young.gain_vs_reference.mean == 0
    # The flat optimum: whatever wins lies near Young's and gains little over it.
    assert 0.7 < result.best.interval_seconds / plan.young_seconds < 1.45
    assert result.best.gain_vs_reference.mean < 0.002
    quarter = next(r for r in result.rows if r.label == "0.25 x young")
    assert quarter.gain_vs_reference.max < -0.03  # a far interval loses on every seed


def test_policy_candidates_compare_on_the_same_failures():
    inputs = preset_inputs(
        LLAMA3_16K, save=SaveSpec(stall_seconds=30, policy="fixed", interval_seconds=600)
    )
    result = sweep(inputs, policy_candidates(inputs), seeds=2)
    assert [r.policy for r in result.rows].count(SavePolicy.FIXED) == 1
    assert {r.label for r in result.rows} == {"young", "daly", "adaptive", "fixed"}


def test_bad_inputs_are_refused_in_words():
    with pytest.raises(ValueError, match="interval_seconds"):
        SaveSpec(stall_seconds=10, policy="fixed")
    with pytest.raises(ValueError, match="positive stall"):
        SaveSpec(stall_seconds=0, policy="young")
    with pytest.raises(ValueError, match="distinct"):
        preset_inputs(LLAMA3_16K, classes=[{"name": "a", "rate_per_device_hour": 1}] * 2)
    with pytest.raises(PlanError, match="--preset 'nope'"):
        preset("nope")
    huge = preset_inputs(LLAMA3_16K, devices=10_000_000, days=36_000)
    with pytest.raises(PlanError, match="shorter window"):
        simulate_run(huge, 0)
