"""A run's comparable performance figures (seed 000, 8.8: what a training performance report must
hold): every throughput, step-time and MFU figure says which phases and which window of steps it
includes, the report lists the software versions, the device type and each rank's peak memory,
and `report_sha256` fingerprints the report so the run's record can name the one it was given.

The window. Figures are measured over the run's *first executions* of healthy steps (a step
replayed after a restore is a retry: left out), less the first `warmup_steps` of every generation
(compilation, allocator and kernel warm-up, the data pipeline filling: they do not recur). Inside
a step, the checkpoint stall is subtracted (a save is not throughput) and the data wait is kept
(a slow data path is the run's real speed). Evaluations happen between steps and are not in any
step's time. So a figure from two runs is comparable when their `includes` and windows agree,
whatever happened around the steps.
"""

import math
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from runwright.events import EventType
from runwright.observe import figures
from runwright.observe.records import Event
from runwright.observe.timeline import StepPoint
from runwright.records import Record
from runwright.spec import canonical_json, sha256_hex
from runwright.store import Store

WARMUP_STEPS = 2
"""Steps at the start of every generation left out of the window: the first step pays for lazy
initialisation (allocator, autograd graph, gloo buffers), the second still fills the prefetch
queue; from the third the step time is steady on the reference trainer."""

INCLUDES = ("forward", "backward", "gradient sync", "optimizer", "data wait", "logging")
"""Phases inside every figure's window."""
EXCLUDES = (
    "compile and warm-up (the first WARMUP_STEPS steps of every generation)",
    "checkpoint stalls (subtracted from their step)",
    "evaluation (between steps)",
    "retries (steps replayed after a restore)",
    "launch, rendezvous and recovery (between steps)",
)
"""What no figure includes, in words."""


class Window(Record):
    """The steps a figure is measured over."""

    first_step: int | None
    last_step: int | None
    steps: int
    """Step executions in the window."""
    seconds: float
    """Their time, checkpoint stalls subtracted (the slowest rank's step, as the step lasts)."""
    warmup_steps: int = WARMUP_STEPS
    """Steps left out at the start of every generation."""
    includes: tuple[str, ...] = INCLUDES
    excludes: tuple[str, ...] = EXCLUDES


class RankMemory(Record):
    """One rank's peak memory (RANK_PEAK_MEMORY of the run's last generation that sent it)."""

    rank: int
    generation: int
    peak_host_bytes: int | None
    """Maximum resident set size of the rank's process."""
    peak_device_bytes: int | None
    """The accelerator allocator's peak; None on CPU."""


class PerformanceFigures(Record):
    """Throughput and step-time figures over one window."""

    window: Window
    loss_tokens_per_second: float | None
    """Loss tokens of the window / its seconds."""
    device_tokens_per_second: float | None
    """Device tokens of the window / its seconds."""
    step_seconds_p50: float | None
    step_seconds_p90: float | None
    step_seconds_p99: float | None
    """Percentiles of the window's step times (nearest rank)."""
    data_wait_seconds_mean: float | None
    """Mean over the window's rank-steps of the time waiting for the next batch."""
    comm_seconds_mean: float | None
    """Mean over the window's rank-steps of the gradient collectives' time."""
    mfu: float | None
    """Device tokens x FLOPs per token / (window seconds x world size x declared peak FLOP/s)."""
    mfu_reason: str | None = None
    """Why `mfu` is None."""


class PerformanceReport(Record):
    """The performance section of a run's report."""

    figures: PerformanceFigures
    device_type: str
    world_size: int
    versions: dict[str, str] = Field(default_factory=dict)
    """Software the ranks ran (python, torch, runwright; cuda, nccl, driver when present), as
    the ranks reported them at close; else the versions WORKER_STARTED carried."""
    peak_memory: list[RankMemory] = Field(default_factory=list)
    """Per rank."""


def window_steps(steps: Sequence[StepPoint], warmup_steps: int = WARMUP_STEPS) -> list[StepPoint]:
    """First executions after each generation's first `warmup_steps` reported steps."""
    seen: dict[int, int] = {}
    kept = []
    for point in sorted(steps, key=lambda p: (p.generation, p.step)):
        seen[point.generation] = seen.get(point.generation, 0) + 1
        if not point.replay and seen[point.generation] > warmup_steps:
            kept.append(point)
    return kept


def busy_seconds(point: StepPoint) -> float:
    """The step's time less its checkpoint stall."""
    return max(0.0, (point.step_seconds or 0.0) - (point.checkpoint_stall_seconds or 0.0))


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _per_rank_step_mean(points: Sequence[StepPoint], phase: str) -> float | None:
    rank_steps = sum(p.ranks for p in points)
    if not rank_steps:
        return None
    return sum(p.phase_seconds.get(phase, 0.0) for p in points) / rank_steps


def measure(
    steps: Sequence[StepPoint],
    world_size: int,
    flops_per_token: int | None,
    peak_flops_per_device: float | None,
    warmup_steps: int = WARMUP_STEPS,
) -> PerformanceFigures:
    points = window_steps(steps, warmup_steps)
    seconds = sum(busy_seconds(p) for p in points)
    device = sum(p.device_tokens for p in points)
    times = [busy_seconds(p) for p in points]
    mfu, reason = None, None
    if flops_per_token is None:
        reason = "FLOPs per token unknown"
    elif not peak_flops_per_device:
        reason = "resources.peak_flops_per_device is not declared in the spec"
    else:
        mfu = figures.mfu(device, flops_per_token, seconds * world_size, peak_flops_per_device)
        reason = None if mfu is not None else "no steps in the window"
    return PerformanceFigures(
        window=Window(
            first_step=min((p.step for p in points), default=None),
            last_step=max((p.step for p in points), default=None),
            steps=len(points),
            seconds=seconds,
            warmup_steps=warmup_steps,
        ),
        loss_tokens_per_second=figures.tokens_per_second(
            sum(p.loss_tokens for p in points), seconds
        ),
        device_tokens_per_second=figures.tokens_per_second(device, seconds),
        step_seconds_p50=percentile(times, 50),
        step_seconds_p90=percentile(times, 90),
        step_seconds_p99=percentile(times, 99),
        data_wait_seconds_mean=_per_rank_step_mean(points, "data_wait_seconds"),
        comm_seconds_mean=_per_rank_step_mean(points, "grad_sync_seconds"),
        mfu=mfu,
        mfu_reason=reason,
    )


def peak_memory(events: Sequence[Event]) -> list[RankMemory]:
    """Each rank's newest RANK_PEAK_MEMORY."""
    newest: dict[int, RankMemory] = {}
    for e in events:
        if e.type != EventType.RANK_PEAK_MEMORY:
            continue
        rank = int(e.attributes.get("rank") or 0)
        if rank in newest and newest[rank].generation > e.generation:
            continue
        newest[rank] = RankMemory(
            rank=rank,
            generation=e.generation,
            peak_host_bytes=e.attributes.get("peak_host_bytes"),
            peak_device_bytes=e.attributes.get("peak_device_bytes"),
        )
    return [newest[r] for r in sorted(newest)]


def versions(events: Sequence[Event]) -> dict[str, str]:
    """The software the ranks reported: RANK_PEAK_MEMORY's versions, else WORKER_STARTED's."""
    for e in reversed(events):
        found = e.attributes.get("versions")
        if e.type == EventType.RANK_PEAK_MEMORY and isinstance(found, dict):
            return {str(k): str(v) for k, v in found.items()}
    for e in reversed(events):
        if e.type == EventType.WORKER_STARTED:
            a = e.attributes
            pairs = (("python", a.get("python_version")), ("torch", a.get("torch_version")))
            return {k: str(v) for k, v in pairs if v}
    return {}


def performance_report(
    spec: dict[str, Any],
    events: Sequence[Event],
    steps: Sequence[StepPoint],
    world_size: int,
    flops_per_token: int | None,
) -> PerformanceReport:
    resources = spec.get("resources") or {}
    peak = resources.get("peak_flops_per_device")
    return PerformanceReport(
        figures=measure(steps, world_size, flops_per_token, float(peak) if peak else None),
        device_type=str(resources.get("device_type") or "cpu"),
        world_size=world_size,
        versions=versions(events),
        peak_memory=peak_memory(events),
    )


def report_sha256(report: dict[str, Any]) -> str:
    """sha256 of a report's canonical JSON, its generation time left out (the same evidence
    written twice hashes the same)."""
    return sha256_hex(canonical_json({k: v for k, v in report.items() if k != "generated_unix_s"}))


def record_report_hash(store: Store, run_id: str, generation: int, digest: str) -> None:
    """Keep a served report's hash in the run's record (its `report_sha256` and a REPORT_HASHED
    event); the same report served again is the same event, so nothing is appended twice."""
    store.record_report_hash(run_id, generation, digest)


def performance_html(performance: PerformanceReport | None) -> list[str]:
    """report.html's performance section: the figures with their window, versions, memory."""
    from html import escape

    from runwright.govern.page import table

    if performance is None:
        return []
    f, w = performance.figures, performance.figures.window
    rows = [
        ("loss tokens/s", f.loss_tokens_per_second),
        ("device tokens/s", f.device_tokens_per_second),
        ("step seconds p50 / p90 / p99",
         " / ".join("-" if v is None else f"{v:.4g}"
                    for v in (f.step_seconds_p50, f.step_seconds_p90, f.step_seconds_p99))),
        ("data wait seconds per rank-step", f.data_wait_seconds_mean),
        ("gradient sync seconds per rank-step", f.comm_seconds_mean),
        ("MFU", f.mfu if f.mfu is not None else f.mfu_reason),
    ]  # fmt: skip
    window = (
        f"steps {w.first_step}-{w.last_step} ({w.steps} executions, {w.seconds:.3g} s); includes "
        f"{', '.join(w.includes)}; excludes {'; '.join(w.excludes)}"
    )
    versions = ", ".join(f"{k} {v}" for k, v in sorted(performance.versions.items())) or "-"
    return [
        "<h2>Performance</h2>",
        f'<p class="sub">{escape(window)}</p>',
        table(["figure", "value"], rows),
        f'<p class="sub">{escape(performance.device_type)} x {performance.world_size}; '
        f"{escape(versions)}</p>",
        table(
            ["rank", "generation", "peak host bytes", "peak device bytes"],
            [
                (m.rank, m.generation, m.peak_host_bytes, m.peak_device_bytes)
                for m in performance.peak_memory
            ],
        ),
    ]
