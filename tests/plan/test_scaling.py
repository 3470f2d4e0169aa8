"""Scaling efficiency E(N) = throughput(N) / (N x throughput(1)) (seed 000, 8.6)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.plan import PlanError, scaling_efficiency


def test_efficiency_by_hand():
    # E(8) = 7200 / (8 x 1000) = 0.9; E(64) = 48000 / 64000 = 0.75.
    report = scaling_efficiency([(1, 1000.0), (8, 7200.0), (64, 48000.0)])
    assert report.baseline_world_size == 1
    assert [p.efficiency for p in report.points] == pytest.approx([1.0, 0.9, 0.75])
    assert report.points[2].speedup == pytest.approx(48.0)


def test_duplicates_use_the_median_and_order_is_free():
    report = scaling_efficiency([(8, 7400.0), (1, 1000.0), (8, 7000.0), (8, 9000.0)])
    eight = report.points[1]
    assert (eight.tokens_per_second, eight.measurements) == (7400.0, 3)


def test_without_single_device_run_the_smallest_is_the_baseline():
    # (12000/16) / (8000/8) = 750 / 1000 = 0.75
    report = scaling_efficiency([(16, 12000.0), (8, 8000.0)])
    assert report.baseline_world_size == 8
    assert report.points[1].efficiency == pytest.approx(0.75)


@pytest.mark.parametrize("bad", [[], [(0, 10.0)], [(2, 0.0)], [(2.5, 10.0)], [(4, float("nan"))]])
def test_bad_measurements_are_refused(bad):
    with pytest.raises(PlanError):
        scaling_efficiency(bad)


@given(
    st.floats(min_value=1, max_value=1e7),
    st.lists(st.integers(min_value=2, max_value=4096), min_size=1, max_size=8),
)
def test_perfect_scaling_has_efficiency_one(base, sizes):
    report = scaling_efficiency([(1, base)] + [(n, n * base) for n in sizes])
    assert all(p.efficiency == pytest.approx(1.0) for p in report.points)
