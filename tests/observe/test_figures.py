"""The derived figures: hand-worked examples from their docstrings and hypothesis properties."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.observe import figures
from runwright.plan import model_flops_per_token
from runwright.spec import ModelSpec

seconds = st.floats(min_value=0.001, max_value=1e6, allow_nan=False)
ranks = st.dictionaries(st.integers(0, 63), seconds, min_size=1, max_size=16)


def test_hand_worked_examples():
    assert figures.loss_tokens_per_second(1000, 4.0) == 250.0
    assert figures.input_wait_share(0.3, 2.0) == pytest.approx(0.15)
    assert figures.checkpoint_exposure(75.0, 1200.0) == pytest.approx(0.0625)
    assert figures.ettr(540.0, 600.0) == pytest.approx(0.9)
    assert figures.palm_flops_per_token(10**6, 2, 4, 16, 128) == 6_196_608
    assert figures.mfu(1e6, 6.2e6, 20.0, 1e12) == pytest.approx(0.31)
    assert figures.cost(2 * 900.0, 2.0) == pytest.approx(1.0)
    assert figures.straggler_scores({0: 1.0, 1: 1.0, 2: 1.6}) == {0: 1.0, 1: 1.0, 2: 1.6}


def test_nothing_measured_is_none_not_zero():
    assert figures.ettr(0.0, 0.0) is None
    assert figures.input_wait_share(1.0, 0.0) is None
    assert figures.mfu(1.0, 1.0, 1.0, 0.0) is None
    assert figures.straggler_scores({}) == {}


def test_spec_flops_match_the_planner_and_palm():
    model = ModelSpec(n_layers=2, d_model=64, n_heads=4)
    flops = figures.spec_flops_per_token(model, 128)
    assert flops == model_flops_per_token(model, 128)
    assert flops == figures.palm_flops_per_token(model.parameter_count, 2, 4, 16, 128)


@given(st.floats(0, 1e6), seconds)
def test_ettr_is_a_share_when_productive_fits(productive, extra):
    value = figures.ettr(productive, productive + extra)
    assert value is not None and 0.0 <= value < 1.0


@given(ranks, st.floats(min_value=0.01, max_value=100))
def test_straggler_scores_are_scale_free(times, factor):
    scaled = figures.straggler_scores({r: t * factor for r, t in times.items()})
    assert scaled == pytest.approx(figures.straggler_scores(times))


@given(ranks)
def test_straggler_median_rank_scores_one(times):
    scores = sorted(figures.straggler_scores(times).values())
    if len(scores) % 2:
        assert scores[len(scores) // 2] == pytest.approx(1.0)
    assert sum(s <= 1.0 + 1e-12 for s in scores) >= len(scores) / 2


@given(st.lists(ranks, min_size=1, max_size=8))
def test_run_straggler_scores_cover_every_rank(steps):
    scores = figures.run_straggler_scores(steps)
    assert set(scores) == {r for step in steps for r in step}
    assert all(s > 0 for s in scores.values())


@given(st.floats(0, 1e9), st.floats(1, 1e9), seconds, st.floats(1e9, 1e15))
def test_mfu_scales_linearly_with_tokens(tokens, flops, device_seconds, peak):
    once = figures.mfu(tokens, flops, device_seconds, peak)
    twice = figures.mfu(2 * tokens, flops, device_seconds, peak)
    assert once is not None and twice == pytest.approx(2 * once)
