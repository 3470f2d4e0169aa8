"""Activation bytes per layer: Korthikanti et al. 2022, Table 2, derived by hand."""

import pytest

from runwright.plan import (
    PlanError,
    Recompute,
    activation_bytes_per_device,
    activation_bytes_per_layer,
)

# GPT-3 175B-like layer: s = 2048, b = 1, h = 12288, a = 96, t = 8.
S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H
SCORES = 5 * A * S / H  # 5as/h = 5 x 96 x 2048 / 12288 = 80


def test_scores_term_by_hand():
    assert SCORES == 80


def test_no_parallelism():
    # sbh (34 + 5as/h) = sbh x 114
    assert activation_bytes_per_layer(S, B, H, A) == SBH * 114


def test_tensor_parallel():
    # sbh (10 + 24/t + 5as/(ht)) = sbh (10 + 3 + 10) = 23 sbh
    assert activation_bytes_per_layer(S, B, H, A, tp=T) == pytest.approx(SBH * 23)


def test_tensor_and_sequence_parallel():
    # sbh (34/t + 5as/(ht)) = sbh (4.25 + 10) = 14.25 sbh
    got = activation_bytes_per_layer(S, B, H, A, tp=T, sequence_parallel=True)
    assert got == pytest.approx(SBH * 14.25)


def test_selective_recompute():
    # TP only: sbh (10 + 24/t) = 13 sbh; TP + SP: sbh 34/t = 4.25 sbh
    sel = Recompute.SELECTIVE
    assert activation_bytes_per_layer(S, B, H, A, tp=T, recompute=sel) == pytest.approx(SBH * 13)
    assert activation_bytes_per_layer(
        S, B, H, A, tp=T, sequence_parallel=True, recompute=sel
    ) == pytest.approx(SBH * 4.25)


def test_full_recompute_stores_only_layer_input():
    full = Recompute.FULL
    assert activation_bytes_per_layer(S, B, H, A, tp=T, recompute=full) == 2 * SBH


def test_tp_one_variants_agree_with_no_parallelism():
    # At t = 1, the TP and TP+SP rows of Table 2 both reduce to sbh (34 + 5as/h).
    plain = activation_bytes_per_layer(128, 4, 256, 4)
    assert activation_bytes_per_layer(128, 4, 256, 4, tp=1, sequence_parallel=True) == plain
    assert plain == 128 * 4 * 256 * (34 + 5 * 4 * 128 / 256)


def test_per_device_pipeline_holds_l_layers_worth():
    # 1F1B: first stage keeps pp micro-batches x L/pp layers = L layers' worth.
    assert activation_bytes_per_device(10.0, n_layers=32, pp=1) == 320.0
    assert activation_bytes_per_device(10.0, n_layers=32, pp=4) == 320.0
    # Fewer micro-batches than stages: only 2 in flight x 8 layers.
    assert activation_bytes_per_device(10.0, n_layers=32, pp=4, microbatches=2) == 160.0


def test_bad_shape_is_refused():
    with pytest.raises(PlanError):
        activation_bytes_per_layer(0, 1, 64, 4)
    with pytest.raises(PlanError):
        activation_bytes_per_device(1.0, n_layers=0)
