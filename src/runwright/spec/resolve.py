"""ResolvedPlan: what the platform derives from the user's intent, each value with its reason.

The arithmetic is pure so the spec validator and `runwright spec explain` share it; a layout that
cannot be resolved raises ValueError naming the field and the nearest valid values.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import Field

from runwright.records import Record
from runwright.spec import limits

if TYPE_CHECKING:
    from runwright.spec.job import JobSpec

# Without a memory ledger, the derived micro-batch is the largest divisor of the per-rank batch up
# to this many sequences: enough to keep a CPU/GPU kernel busy without guessing at memory.
DEFAULT_MICRO_BATCH_CAP = 8


class Derived(Record):
    """One derived value and why it has that value."""

    value: int | float | None
    """The derived value."""
    reason: str
    """How it was derived, with the arithmetic."""


class ResolvedPlan(Record):
    """The layout and batch arithmetic a run actually uses."""

    world_size: Derived
    dp: Derived
    micro_batch_size: Derived
    grad_accumulation_steps: Derived
    global_batch_samples: Derived
    tokens_per_step: Derived
    total_steps: Derived
    checkpoint_every_steps: Derived
    notes: list[str] = Field(default_factory=list)
    """Warnings that do not stop the run (e.g. a checkpoint interval longer than the run)."""

    def values(self) -> dict[str, int | float | None]:
        return {
            name: getattr(self, name).value for name in type(self).model_fields if name != "notes"
        }


def nearest_multiples(value: int, unit: int, count: int = 2) -> list[int]:
    """The multiples of `unit` nearest to `value` (positive ones only)."""
    below = (value // unit) * unit
    candidates = {below - unit * i for i in range(count)} | {
        below + unit * (i + 1) for i in range(count)
    }
    return sorted(c for c in candidates if c > 0)[: 2 * count] or [unit]


def divisors(n: int) -> list[int]:
    """The divisors of n >= 1, ascending, in O(sqrt(n)) steps: each d <= sqrt(n) pairs with n / d
    (n <= limits.MAX_BATCH_SAMPLES = 2**24 takes at most 4,096 steps)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def nearest_divisors(n: int, target: int, count: int = 6) -> list[int]:
    """The `count` divisors of n closest to `target`, ascending: a hint that stays short."""
    return sorted(sorted(divisors(n), key=lambda d: (abs(d - target), d))[:count])


def resolve_dp(world_size: int, tp: int, pp: int, ep: int, dp: int | str) -> tuple[int, str]:
    model_parallel = tp * pp * ep
    if world_size % model_parallel:
        valid = [w for w in nearest_multiples(world_size, model_parallel)]
        raise ValueError(
            f"parallelism: tp x pp x ep = {tp} x {pp} x {ep} = {model_parallel} must divide the "
            f"world size resources.nodes x resources.devices_per_node = {world_size}; "
            f"nearest valid world sizes: {valid}"
        )
    derived = world_size // model_parallel
    if dp == "auto":
        return derived, (f"world size {world_size} / (tp {tp} x pp {pp} x ep {ep}) = {derived}")
    if dp != derived:
        raise ValueError(
            f"parallelism.dp={dp} contradicts the world size: {world_size} processes / "
            f"(tp x pp x ep = {model_parallel}) = {derived}; set dp: {derived} or dp: auto, or "
            f"change resources to {dp * model_parallel} processes"
        )
    return derived, f"declared, and consistent with world size {world_size} / {model_parallel}"


def resolve_batch(
    global_batch_samples: int, dp: int, micro_batch: int | None
) -> tuple[int, str, int, str]:
    """Micro-batch and accumulation so that micro x accumulation x dp == global batch."""
    if global_batch_samples % dp and micro_batch is None:
        raise ValueError(
            f"training.global_batch_samples={global_batch_samples} is not divisible by "
            f"dp={dp}; nearest valid values: {nearest_multiples(global_batch_samples, dp)}"
        )
    per_rank = global_batch_samples // dp
    if micro_batch is None:
        micro = next(d for d in range(DEFAULT_MICRO_BATCH_CAP, 0, -1) if per_rank % d == 0)
        micro_reason = (
            f"largest divisor of the per-rank batch {global_batch_samples}/{dp} = {per_rank} "
            f"that is <= {DEFAULT_MICRO_BATCH_CAP}"
        )
    else:
        step = micro_batch * dp
        if global_batch_samples % step:
            raise ValueError(
                f"training.global_batch_samples={global_batch_samples} is not divisible by "
                f"micro_batch_size x dp = {micro_batch} x {dp} = {step}; nearest valid "
                f"global batches: {nearest_multiples(global_batch_samples, step)}"
                + (
                    f"; or micro_batch_size in {nearest_divisors(per_rank, micro_batch)}"
                    if global_batch_samples % dp == 0
                    else ""
                )
            )
        micro = micro_batch
        micro_reason = "declared"
    accumulation = per_rank // micro
    accumulation_reason = (
        f"{global_batch_samples} samples / (micro {micro} x dp {dp}) = {accumulation}"
    )
    return micro, micro_reason, accumulation, accumulation_reason


def resolve_plan(spec: JobSpec) -> ResolvedPlan:
    res, par, train, data = spec.resources, spec.parallelism, spec.training, spec.data
    seq = data.sequence_length
    world = res.world_size
    dp, dp_reason = resolve_dp(world, par.tp, par.pp, par.ep, par.dp)
    if train.global_batch_tokens is not None:
        if train.global_batch_tokens % seq:
            raise ValueError(
                f"training.global_batch_tokens={train.global_batch_tokens} is not a multiple of "
                f"data.sequence_length={seq}; nearest valid values: "
                f"{nearest_multiples(train.global_batch_tokens, seq)}"
            )
        gbs = train.global_batch_tokens // seq
        if gbs > limits.MAX_BATCH_SAMPLES:
            raise ValueError(
                f"training.global_batch_tokens={train.global_batch_tokens} / "
                f"data.sequence_length={seq} = {gbs} samples per step, more than the "
                f"{limits.MAX_BATCH_SAMPLES} a step may hold; lower global_batch_tokens"
            )
        gbs_reason = f"{train.global_batch_tokens} tokens / sequence length {seq} = {gbs}"
    else:
        gbs = train.global_batch_samples or 0
        gbs_reason = "declared"
    micro, micro_reason, accum, accum_reason = resolve_batch(gbs, dp, train.micro_batch_size)
    tokens_per_step = gbs * seq
    if train.steps is not None:
        steps, steps_reason = train.steps, "declared"
    else:
        budget = train.token_budget or 0
        steps = -(-budget // tokens_per_step)
        if steps > limits.MAX_STEPS:
            raise ValueError(
                f"training.token_budget={budget} / {tokens_per_step} tokens per step = {steps} "
                f"steps, more than {limits.MAX_STEPS}; lower token_budget or raise the batch"
            )
        steps_reason = f"ceil(token budget {budget} / {tokens_per_step} tokens per step)"
    notes: list[str] = []
    interval = spec.checkpoint.interval
    if not spec.checkpoint.enabled:
        every, every_reason = None, "checkpointing disabled"
    elif interval.policy == "steps":
        every, every_reason = interval.every_steps, "declared (policy: steps)"
        if every and every > steps:
            notes.append(
                f"checkpoint.interval.every_steps={every} exceeds the run's {steps} steps: "
                "only the stop-step checkpoint (if any) will be written"
            )
    else:
        every = None
        every_reason = f"policy: {interval.policy}; decided at run time from measured step time"
    if train.schedule.warmup_steps >= steps:
        notes.append(
            f"training.schedule.warmup_steps={train.schedule.warmup_steps} >= {steps} steps: "
            "the run never reaches its peak learning rate"
        )
    return ResolvedPlan(
        world_size=Derived(
            value=world,
            reason=f"resources.nodes {res.nodes} x devices_per_node {res.devices_per_node}",
        ),
        dp=Derived(value=dp, reason=dp_reason),
        micro_batch_size=Derived(value=micro, reason=micro_reason),
        grad_accumulation_steps=Derived(value=accum, reason=accum_reason),
        global_batch_samples=Derived(value=gbs, reason=gbs_reason),
        tokens_per_step=Derived(
            value=tokens_per_step,
            reason=f"{gbs} samples x {seq} tokens = {tokens_per_step:,} tokens per step",
        ),
        total_steps=Derived(value=steps, reason=steps_reason),
        checkpoint_every_steps=Derived(value=every, reason=every_reason),
        notes=notes,
    )
