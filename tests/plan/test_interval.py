"""Checkpoint interval: Young 1974, Daly 2006, and the waste W(T) of seed 003."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.plan import (
    PlanError,
    daly_interval_seconds,
    daly_waste_fraction,
    expected_waste_fraction,
    pause_share,
    plan_interval,
    young_interval_seconds,
)


def test_seed_003_example():
    # C = 30 s, M = 6 h: sqrt(2 x 30 x 21600) = sqrt(1,296,000) = 1138.4 s = 18.97 min.
    assert young_interval_seconds(30, 6 * 3600) == pytest.approx(1138.42, abs=0.01)
    # W(10 min) = 30/600 + 600/43200 + 180/21600 = 0.05 + 0.01389 + 0.00833 = 7.22%.
    waste = expected_waste_fraction(600, 30, 21600, restart_seconds=180)
    assert waste == pytest.approx(0.05 + 600 / 43200 + 180 / 21600)


@pytest.mark.parametrize(
    ("mtbf_minutes", "expected_minutes"),
    # Daly 2006, Figures 3-5: delta = 5 min; M = 24 h -> 117 min, 6 h -> 57 min, 15 min -> 9.1.
    [(24 * 60, 117), (6 * 60, 57), (15, 9.1)],
)
def test_daly_paper_examples(mtbf_minutes, expected_minutes):
    got = daly_interval_seconds(5 * 60, mtbf_minutes * 60) / 60
    assert got == pytest.approx(expected_minutes, abs=0.5)


def test_daly_caps_at_mtbf_when_checkpoint_exceeds_twice_mtbf():
    assert daly_interval_seconds(300, 100) == 100


def test_seed_004_pause_shares():
    # 500 steps x 2.4 s = 1200 s: 75 / (1200 + 75) = 5.9%; 2000 steps: 75 / 4875 = 1.5%.
    assert pause_share(1200, 75) == pytest.approx(0.0588, abs=1e-4)
    assert pause_share(4800, 75) == pytest.approx(0.0154, abs=1e-4)


def test_plan_table_and_steps():
    plan = plan_interval(30, 21600, restart_seconds=120, detect_seconds=60, step_seconds=2.4)
    labels = [row.label for row in plan.rows]
    assert {"young", "daly"} <= set(labels)
    times = [row.interval_seconds for row in plan.rows]
    assert times == sorted(times)
    young = next(row for row in plan.rows if row.label == "young")
    assert young.interval_steps == round(plan.young_seconds / 2.4)
    assert min(row.expected_waste_fraction for row in plan.rows) == pytest.approx(
        young.expected_waste_fraction
    )


def test_plan_with_given_intervals():
    plan = plan_interval(75, 36000, intervals_seconds=[1200, 4800])
    assert [row.label for row in plan.rows if row.label.endswith(" s")] == ["1200 s", "4800 s"]


def test_refuses_checkpoint_cost_not_small_against_mtbf():
    with pytest.raises(PlanError, match=r"C << T << M") as info:
        plan_interval(600, 3600)
    assert "asynchronous" in str(info.value)


def test_refuses_recovery_longer_than_mtbf():
    with pytest.raises(PlanError, match="no progress"):
        plan_interval(1, 10_000, restart_seconds=6000, detect_seconds=4000)


@pytest.mark.parametrize(("c", "m"), [(0, 100), (10, -1), (math.inf, 10)])
def test_refuses_non_positive(c, m):
    with pytest.raises(PlanError):
        young_interval_seconds(c, m)


costs = st.floats(min_value=1, max_value=600)
ratios = st.floats(min_value=1e-5, max_value=1e-2)


@given(costs, ratios, st.floats(min_value=0.5, max_value=2.0).filter(lambda k: k != 1.0))
def test_first_order_waste_is_minimised_at_young(c, ratio, k):
    m = c / ratio
    t = young_interval_seconds(c, m)
    assert expected_waste_fraction(t, c, m) <= expected_waste_fraction(k * t, c, m) + 1e-12


@given(costs, ratios)
def test_daly_optimum_minimises_his_complete_model(c, ratio):
    m = c / ratio
    t = daly_interval_seconds(c, m)
    best = daly_waste_fraction(t, c, m)
    # A dense scan around the optimum finds nothing meaningfully better.
    scan = min(daly_waste_fraction(t * k / 100, c, m) for k in range(50, 201))
    assert best <= scan * (1 + 1e-4)


@given(costs, ratios)
def test_models_agree_when_checkpoints_are_cheap(c, ratio):
    m = c / ratio
    young, daly = young_interval_seconds(c, m), daly_interval_seconds(c, m)
    # The gap grows like sqrt(C/M); at C/M <= 1% it stays under 5%.
    assert abs(young - daly) / daly < 0.05
    plan = plan_interval(c, m)
    assert plan.model_disagreement < 0.05
