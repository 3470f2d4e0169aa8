"""Derived figures of a training run: throughput, input wait, checkpoint exposure, ETTR, MFU and
stragglers. Pure functions of already-summed quantities; `runwright.observe.timeline` and
`runwright.observe.accounting` produce the sums from a run's events.

Every function states its formula, its units and where the formula comes from. A ratio whose
denominator is zero (nothing measured yet) is None, never a division error or a made-up zero.
"""

import statistics
from collections.abc import Mapping

from runwright.plan import model_flops_per_token
from runwright.spec import ModelSpec


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def tokens_per_second(tokens: float, seconds: float) -> float | None:
    """tokens / seconds, in tokens per second."""
    return _ratio(tokens, seconds)


def loss_tokens_per_second(loss_tokens: float, wall_seconds: float) -> float | None:
    """Effective throughput: accepted loss tokens / end-to-end wall-clock seconds.

    Seed 000 ("Packing, padding and effective tokens"): effective_tokens_per_second =
    loss_tokens / wall_clock_seconds; seed 003 (ETTR section): effective throughput is the loss
    tokens of accepted optimizer steps divided by the end-to-end run time, so failures, replays
    and checkpoint stalls lower it. e.g. 1,000 loss tokens over a 4 s run = 250 tokens/s.
    """
    return _ratio(loss_tokens, wall_seconds)


def device_tokens_per_second(device_tokens: float, wall_seconds: float) -> float | None:
    """Device throughput: tokens fed to the devices (loss, context and padding alike) / the same
    end-to-end wall-clock seconds as `loss_tokens_per_second`, so the two compare directly
    (seed 000: "show device tokens/s and loss tokens/s side by side")."""
    return _ratio(device_tokens, wall_seconds)


def input_wait_share(data_wait_seconds: float, step_seconds: float) -> float | None:
    """Share of step time spent waiting for input: sum(data_wait) / sum(step time), unitless.

    Seed 004's "loader stall" column (3% -> 25% in its slow-run case) and seed 003's input-wait
    gate. Summed over rank-steps, so it is the average over ranks of each rank's wait share
    weighted by its step time. e.g. 0.3 s waiting in a 2.0 s step = 0.15.
    """
    return _ratio(data_wait_seconds, step_seconds)


def checkpoint_exposure(checkpoint_stall_seconds: float, productive_seconds: float) -> float | None:
    """Checkpoint stall seconds per productive second, unitless.

    The training-blocking part of checkpointing against the useful work it protects. Seed 004
    ("checkpoint frequency"): a 75 s synchronous save every 500 steps of 2.4 s (1,200 s of
    training) exposes 75 / 1,200 = 6.25% (seed 004 quotes the wall share 75 / 1,275 = 5.9%).
    """
    return _ratio(checkpoint_stall_seconds, productive_seconds)


def ettr(productive_seconds: float, allocated_seconds: float) -> float | None:
    """Effective Training Time Ratio = productive training time / allocated time, in [0, 1].

    Kokolis et al. 2024, "Revisiting Reliability in Large-Scale Machine Learning Research
    Clusters" (Meta, arXiv:2410.21680, HPCA 2025): the share of a job's wall-clock time spent
    making training progress; seed 003 writes it T_productive / T_allocated, where T_allocated
    also holds checkpoint exposure, replay, recovery, stalls and allocated-but-idle capacity.
    e.g. 540 s of accepted steps in a 600 s allocation = 0.9.
    """
    return _ratio(productive_seconds, allocated_seconds)


def palm_flops_per_token(
    n_parameters: int, n_layers: int, n_heads: int, head_dim: int, sequence_length: int
) -> int:
    """Training FLOPs per token (forward + backward) = 6N + 12·L·H·Q·T.

    PaLM (Chowdhery et al. 2022), appendix B, "Model FLOPs utilization": N parameters,
    L layers, H heads, Q head dimension, T sequence length. 6N: 2 FLOPs per multiply-add in the
    forward pass, twice that backward; 12·L·H·Q·T: the attention score and value matmuls.
    e.g. N=1e6, L=2, H=4, Q=16, T=128: 6e6 + 12*2*4*16*128 = 6,196,608 FLOPs per token.
    """
    return 6 * n_parameters + 12 * n_layers * n_heads * head_dim * sequence_length


def spec_flops_per_token(model: ModelSpec, sequence_length: int) -> int:
    """`palm_flops_per_token` for the reference GPT of a spec (delegates to the planner's
    `runwright.plan.model_flops_per_token`, the same formula with the spec's parameter count)."""
    return model_flops_per_token(model, sequence_length)


def mfu(
    tokens: float,
    flops_per_token: float,
    device_seconds: float,
    peak_flops_per_device: float,
) -> float | None:
    """Model FLOPs utilisation = achieved model FLOP/s / declared peak FLOP/s, unitless.

    PaLM appendix B: MFU = observed tokens/s x FLOPs per token / (devices x peak FLOP/s). With
    device-seconds = devices x seconds this is tokens x flops_per_token / (device_seconds x
    peak), which stays right when the world size changes between attempts. Peak is the
    datasheet number declared in the spec (`resources.peak_flops_per_device`); recomputation is
    not counted. e.g. 1e6 tokens x 6.2e6 FLOPs in 20 device-s at 1e12 FLOP/s = 0.31.
    """
    if peak_flops_per_device <= 0:
        return None
    return _ratio(tokens * flops_per_token, device_seconds * peak_flops_per_device)


def straggler_scores(step_seconds_by_rank: Mapping[int, float]) -> dict[int, float]:
    """Each rank's step time over the median step time across ranks, unitless.

    Seed 003 ("each rank's distribution matters more than the cluster mean: one straggler hides
    in a normal mean and sets the pace of every collective"). The median is robust to the
    straggler itself: ranks at 1.0, 1.0, 1.6 s score 1.0, 1.0, 1.6. A rank with no measured time
    is left out; with a zero median every score is 1.0 (nothing to compare against).
    """
    if not step_seconds_by_rank:
        return {}
    median = statistics.median(step_seconds_by_rank.values())
    if median <= 0:
        return dict.fromkeys(step_seconds_by_rank, 1.0)
    return {rank: seconds / median for rank, seconds in step_seconds_by_rank.items()}


def run_straggler_scores(per_step: list[Mapping[int, float]]) -> dict[int, float]:
    """A rank's run-level straggler score: the median over steps of its per-step score.

    The median over steps keeps one slow step (a checkpoint, a page fault) from marking a
    rank as a straggler; a rank that is slow in most steps keeps its score.
    """
    collected: dict[int, list[float]] = {}
    for step in per_step:
        for rank, score in straggler_scores(step).items():
            collected.setdefault(rank, []).append(score)
    return {rank: statistics.median(scores) for rank, scores in sorted(collected.items())}


def cost(device_seconds: float, device_hour_price: float) -> float:
    """Price of device time: device_seconds / 3600 x price per device-hour (spec
    `resources.device_hour_price`). e.g. 2 devices x 900 s at 2.0 per hour = 1.0."""
    return device_seconds / 3600.0 * device_hour_price
