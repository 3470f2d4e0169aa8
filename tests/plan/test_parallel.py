"""Layout search: enumeration, rejection reasons, and the step-time estimate by hand."""

import pytest

from runwright.plan import Cluster, Layout, PlanError, Workload, ZeroStage, search_layouts
from runwright.plan.parallel import estimate_layout
from runwright.spec import ModelSpec

GIB = 2**30
MODEL = ModelSpec(n_layers=8, d_model=512, n_heads=8, vocab_size=1024)


def cluster(**overrides):
    fields = dict(
        world_size=16,
        devices_per_node=4,
        device_memory_bytes=80 * GIB,
        peak_flops_per_device=1e15,
    )
    return Cluster(**{**fields, **overrides})


def workload(**overrides):
    fields = dict(model=MODEL, sequence_length=256, global_batch_samples=64)
    return Workload(**{**fields, **overrides})


def test_every_factorisation_is_either_accepted_or_rejected():
    result = search_layouts(cluster(), workload())
    layouts = [e.layout for e in result.accepted] + [r.layout for r in result.rejected]
    # 16 = 2^4: tp and pp exponents with tp + pp <= 4 give 15 layouts.
    assert len(layouts) == len(set(layouts)) == 15
    assert all(lay.dp * lay.tp * lay.pp == 16 for lay in layouts)
    steps = [e.step_seconds for e in result.accepted]
    assert steps == sorted(steps)


def test_rejections_say_why():
    result = search_layouts(cluster(), workload())
    reasons = {(r.layout.dp, r.layout.tp, r.layout.pp): r.reasons for r in result.rejected}
    assert "exceeds the 4 devices of one node" in reasons[(2, 8, 1)][0]
    assert "pp=16 does not divide n_layers=8" in reasons[(1, 1, 16)][0]
    tight = search_layouts(cluster(device_memory_bytes=GIB // 64), workload())
    assert not tight.accepted
    assert "GiB per device, more than" in tight.rejected[0].reasons[-1]
    batch = search_layouts(cluster(world_size=4), workload(global_batch_samples=2))
    assert any("not a multiple of dp 4" in r.reasons[0] for r in batch.rejected)


def test_single_device_estimate_by_hand():
    # One device: no communication, no bubble; compute = 6N+12LHQT per token x tokens / peak x mfu.
    work = workload(mfu=0.5)
    estimate = estimate_layout(Layout(dp=1, tp=1, pp=1), cluster(world_size=1), work)
    flops_per_token = 6 * MODEL.parameter_count + 12 * 8 * 8 * 64 * 256
    expected = flops_per_token * 64 * 256 / (1e15 * 0.5)
    assert estimate.compute_seconds == pytest.approx(expected)
    assert estimate.step_seconds == pytest.approx(expected)
    assert estimate.dp_comm_seconds == estimate.tp_comm_seconds == estimate.pp_comm_seconds == 0


def test_bubble_and_zero3_volume():
    c = cluster(world_size=4)
    # pp 2 with m = 64 / (2 x 1) = 32 micro-batches: bubble = compute x 1/32.
    piped = estimate_layout(Layout(dp=2, tp=1, pp=2), c, workload())
    assert piped.bubble_seconds == pytest.approx(piped.compute_seconds / 32)
    # ZeRO-3 sends 3 half-volume phases instead of 2: 1.5x the bytes of an all-reduce.
    plain = estimate_layout(Layout(dp=4, tp=1, pp=1), c, workload())
    zero3 = estimate_layout(Layout(dp=4, tp=1, pp=1), c, workload(zero_stage=ZeroStage(3)))
    link = c.intra_node
    bytes_term = plain.dp_comm_seconds - 2 * 3 * link.latency_seconds
    zero3_bytes_term = zero3.dp_comm_seconds - 3 * 3 * link.latency_seconds
    assert zero3_bytes_term == pytest.approx(1.5 * bytes_term)


def test_world_must_be_whole_nodes():
    with pytest.raises(PlanError, match="whole number of nodes"):
        search_layouts(cluster(world_size=6), workload())
