"""ZeRO model-state ledger: hand-derived values from Rajbhandari et al. 2020 and invariants."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.plan import (
    Offload,
    PlanError,
    StateBytes,
    ZeroStage,
    memory_ledger,
    model_state_bytes,
)

GB = 1e9


@pytest.mark.parametrize(
    ("stage", "expected_gb"),
    # ZeRO Figure 1: P = 7.5e9, D = 64, K = 12.
    # stage 0: 16 x 7.5 = 120; stage 1: (4 + 12/64) x 7.5 = 31.4;
    # stage 2: (2 + 14/64) x 7.5 = 16.6; stage 3: 16/64 x 7.5 = 1.875 (the paper's 1.9).
    [(0, 120.0), (1, 31.40625), (2, 16.640625), (3, 1.875)],
)
def test_zero_figure_1(stage, expected_gb):
    states = model_state_bytes(7_500_000_000, dp=64, zero_stage=ZeroStage(stage))
    assert states.device_bytes / GB == pytest.approx(expected_gb)


@pytest.mark.parametrize("stage", list(ZeroStage))
def test_dp_one_makes_every_stage_plain_data_parallel(stage):
    # With D = 1 there is nothing to shard over: every stage keeps 16P, ZeRO-3 included.
    states = model_state_bytes(1_000, dp=1, zero_stage=stage)
    assert (states.parameters_bytes, states.gradients_bytes, states.optimizer_bytes) == (
        2_000,
        2_000,
        12_000,
    )


def test_rows_split_by_stage():
    # P = 1024, D = 4, stage 2: params 2P = 2048, grads 2P/4 = 512, optimizer 12P/4 = 3072.
    states = model_state_bytes(1024, dp=4, zero_stage=ZeroStage.GRADIENTS)
    assert states.parameters_bytes == 2048
    assert states.gradients_bytes == 512
    assert states.optimizer_bytes == 3072


def test_tiny_and_huge_models():
    assert model_state_bytes(0, dp=8, zero_stage=ZeroStage.PARAMETERS).device_bytes == 0
    # 1e12 parameters at stage 3 over 1024 ranks: 16e12 / 1024 = 15.625e9 bytes.
    huge = model_state_bytes(10**12, dp=1024, zero_stage=ZeroStage.PARAMETERS)
    assert huge.device_bytes == pytest.approx(15.625e9)


def test_custom_state_bytes():
    # fp32 everything with plain Adam: 4 + 4 + 8 = 16 bytes, but split differently.
    fp32 = StateBytes(parameter_bytes=4, gradient_bytes=4, optimizer_bytes=8)
    states = model_state_bytes(100, dp=2, zero_stage=ZeroStage.OPTIMIZER, state=fp32)
    assert (states.parameters_bytes, states.gradients_bytes, states.optimizer_bytes) == (
        400,
        400,
        400,
    )


def test_offload_moves_states_to_host():
    # ZeRO-Offload: grads 2P/D and optimizer 12P/D go to the host; 2P stays on the device.
    states = model_state_bytes(
        1000, dp=2, zero_stage=ZeroStage.GRADIENTS, offload=Offload.OPTIMIZER
    )
    assert states.device_bytes == 2000
    assert states.host_bytes == 1000 + 6000
    infinity = model_state_bytes(1000, dp=2, zero_stage=ZeroStage.PARAMETERS, offload=Offload.ALL)
    assert infinity.device_bytes == 0
    assert infinity.host_bytes == 8000


def test_parameter_offload_needs_stage_3():
    with pytest.raises(PlanError, match="ZeRO stage 3"):
        model_state_bytes(1000, dp=2, zero_stage=ZeroStage.GRADIENTS, offload=Offload.ALL)


@pytest.mark.parametrize("dp", [0, -1])
def test_bad_dp_is_refused(dp):
    with pytest.raises(PlanError, match="dp="):
        model_state_bytes(1000, dp=dp)


def test_ledger_fit_and_headroom():
    # 16 x 1e9 = 16e9 model state + 2e9 activations + 1e9 buffers = 19e9 bytes.
    ledger = memory_ledger(
        10**9, activations_bytes=2e9, buffers_bytes=1e9, device_memory_bytes=20 * 10**9
    )
    assert ledger.total_bytes == 19e9
    assert ledger.usable_bytes == pytest.approx(18e9)  # 20e9 x (1 - 0.1)
    assert ledger.fits is False
    assert memory_ledger(10**9, device_memory_bytes=20 * 10**9).fits is True
    assert memory_ledger(10**9).fits is None
    assert "not the allocator peak" in ledger.note
    assert [name for name, _ in ledger.rows()][-1] == "total"


def test_ledger_refuses_bad_headroom():
    with pytest.raises(PlanError, match="headroom"):
        memory_ledger(10, headroom_fraction=1.0)


params = st.integers(min_value=0, max_value=10**13)
dps = st.integers(min_value=1, max_value=4096)
stages = st.sampled_from(list(ZeroStage))


@given(params, dps, stages)
def test_higher_stage_never_needs_more_memory(p, dp, stage):
    if stage == ZeroStage.PARAMETERS:
        return
    lower = model_state_bytes(p, dp, stage).device_bytes
    higher = model_state_bytes(p, dp, ZeroStage(stage + 1)).device_bytes
    assert higher <= lower * (1 + 1e-12)


@given(params, dps, st.integers(min_value=1, max_value=64), stages)
def test_larger_dp_never_needs_more_memory(p, dp, extra, stage):
    smaller = model_state_bytes(p, dp, stage).device_bytes
    larger = model_state_bytes(p, dp + extra, stage).device_bytes
    assert larger <= smaller * (1 + 1e-12)


@given(params, dps, stages)
def test_states_never_exceed_plain_data_parallel(p, dp, stage):
    # 16 bytes per parameter is the ZeRO baseline every stage improves on or equals.
    assert model_state_bytes(p, dp, stage).device_bytes <= 16 * p * (1 + 1e-12)
