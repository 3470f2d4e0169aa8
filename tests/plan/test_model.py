"""Parameters per device under Megatron TP/PP, and PaLM Appendix B FLOPs per token."""

import pytest

from runwright.plan import PlanError, model_flops_per_token, parameters_per_device
from runwright.spec import ModelSpec

SMALL = ModelSpec(n_layers=4, d_model=64, n_heads=4, vocab_size=512)


def test_no_parallelism_is_the_whole_model():
    assert parameters_per_device(SMALL) == SMALL.parameter_count


def test_tensor_parallel_by_hand():
    # H = 64, F = 256: split per block 4H^2 + 3H + 2HF + F = 16384 + 192 + 32768 + 256 = 49600
    # -> 24800 per rank at tp 2, plus 6H = 384 replicated; embedding 512 x 64 / 2 = 16384;
    # final LayerNorm 128. 4 x (24800 + 384) + 16384 + 128 = 117248.
    assert parameters_per_device(SMALL, tp=2) == 117_248


def test_pipeline_heaviest_stage_by_hand():
    # pp 2: 2 blocks of 49600 + 384 on the last stage, plus the tied embedding 32768 and 128.
    assert parameters_per_device(SMALL, pp=2) == 2 * 49_984 + 32_768 + 128


def test_tp_must_divide_heads():
    with pytest.raises(PlanError, match="n_heads"):
        parameters_per_device(SMALL, tp=3)


def test_palm_flops_by_hand():
    # 6N + 12 L H Q T with L = 4, H = 4 heads, Q = 16, T = 128: 12 x 4 x 4 x 16 x 128 = 393216.
    assert model_flops_per_token(SMALL, 128) == 6 * SMALL.parameter_count + 393_216


def test_flops_refuse_empty_sequence():
    with pytest.raises(PlanError):
        model_flops_per_token(SMALL, 0)
