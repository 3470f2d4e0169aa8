"""A run's events folded onto one shared time axis: one point per optimizer step (all ranks
merged) plus markers for checkpoints, incidents, restores and interventions.

Seed 004 ("watch four signals while running"): loss, throughput, system and data must sit on one
time line so that a loader stall, a step-time drift and a checkpoint pause can be seen together.
This module is pure: it takes events (`records.Event`, such as the store's `EventRecord`) and
returns records; the report and the accounting read the same points, so their numbers agree.

Event contract read here (ARCHITECTURE.md "Event", issue 6): one `STEP_HEALTHY` per rank per
optimizer step (stored folded, one row per step: observe/rank_steps.py, unfolded here) with
attributes `rank`, `loss`, `grad_norm`, `lr`, `step_seconds`,
`device_tokens`, `padded_tokens`, `loss_tokens`, `samples`, the phase times
`*_seconds` of `PHASES`, and the loss breakdown `source_loss` / `length_loss` (name ->
[summed per-token loss, loss tokens], runtime/source_loss.py). Token counts are the rank's own;
`step_seconds` is the rank's whole step, phases included. Any attribute may be missing.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from runwright.events import EventType
from runwright.observe.rank_steps import per_rank
from runwright.observe.records import Event
from runwright.records import Record

# The per-step phases of the runtime's step timeline (issue 6), in the order they happen.
PHASES = (
    "data_wait_seconds",
    "h2d_seconds",
    "forward_seconds",
    "backward_seconds",
    "grad_sync_seconds",
    "optimizer_seconds",
    "checkpoint_stall_seconds",
    "logging_seconds",
)
TOKEN_KINDS = ("device", "padded", "loss")
# Event type -> marker kind drawn as a vertical line on every chart.
MARKER_KINDS = {
    EventType.CHECKPOINT_COMMITTED: "checkpoint",
    EventType.FAILURE_CLASSIFIED: "incident",
    EventType.NAN_DETECTED: "incident",
    EventType.RESTORED: "restore",
    EventType.BUDGET_WARNING: "intervention",
    EventType.STALE_WRITE_REJECTED: "intervention",
    EventType.MIXTURE_STAGE_STARTED: "stage",
}


class StepPoint(Record):
    """One optimizer step of one generation, every rank's report merged."""

    generation: int
    """Generation (attempt) that executed the step."""
    step: int
    """Global optimizer step number."""
    end_unix_s: float
    """When the last rank reported the step healthy."""
    step_seconds: float | None
    """Slowest rank's step time: a synchronous step waits for it."""
    rank_step_seconds: dict[int, float]
    """Each rank's own step time."""
    rank_busy_seconds: dict[int, float] = Field(default_factory=dict)
    """Each rank's step time less its time in gradient collectives (`grad_sync_seconds`), where
    a fast rank waits for a slow one: what the straggler alert compares across ranks."""
    loss: float | None
    """Mean loss over ranks, weighted by loss tokens when every rank reports them."""
    grad_norm: float | None
    """Largest gradient norm any rank reported."""
    lr: float | None
    """Learning rate (rank 0's, else any rank's)."""
    device_tokens: int
    """Tokens fed to the devices, summed over ranks."""
    padded_tokens: int
    """Padding tokens, summed over ranks."""
    loss_tokens: int
    """Tokens that carried loss, summed over ranks."""
    samples: int
    """Samples, summed over ranks."""
    rank_seconds: float
    """Sum of the ranks' step times (the input-wait share's denominator)."""
    phase_seconds: dict[str, float]
    """Each phase summed over ranks (divide by `ranks` for the mean)."""
    checkpoint_stall_seconds: float | None
    """Longest checkpoint stall any rank reported inside this step; None when no rank reported
    one (a script without the step loop: the commit's own stall stands in for it)."""
    ranks: int
    """Ranks that reported the step."""
    replay: bool = False
    """True when an earlier generation had already completed this step (re-executed after a
    restore)."""
    source_loss: dict[str, list[float]] = Field(default_factory=dict)
    """Mixture source -> [mean per-token loss, loss tokens] over every rank (issue 26)."""
    length_loss: dict[str, list[float]] = Field(default_factory=dict)
    """Document length bucket (`1-128`, ...) -> [mean per-token loss, loss tokens]."""

    @property
    def start_unix_s(self) -> float:
        return self.end_unix_s - (self.step_seconds or 0.0)

    @property
    def data_wait_seconds(self) -> float:
        return self.phase_seconds.get("data_wait_seconds", 0.0)


class Marker(Record):
    """A moment drawn across every chart: a checkpoint commit, an incident, a restore."""

    kind: str
    """checkpoint, incident, restore, intervention or stage (a mixture stage began)."""
    time_unix_s: float
    """When it happened."""
    label: str
    """Short text shown beside the line."""
    generation: int
    """Generation it belongs to."""
    step: int | None = None
    """Step it refers to, when it has one."""


class Evaluation(Record):
    """One evaluation on the eval split (EVALUATED)."""

    time_unix_s: float
    generation: int
    step: int
    eval_loss: float
    checkpoint_id: str | None = None


class Timeline(Record):
    """A run on one time axis."""

    steps: list[StepPoint] = Field(default_factory=list)
    """Step points in time order."""
    markers: list[Marker] = Field(default_factory=list)
    """Markers in time order."""
    ranks: list[int] = Field(default_factory=list)
    """Every rank that reported a step."""
    evaluations: list[Evaluation] = Field(default_factory=list)
    """Eval-split losses in time order."""


def number(attributes: Mapping[str, Any], key: str) -> float | None:
    """An attribute as a float, or None when it is absent or not a finite number."""
    value = attributes.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _merge(generation: int, step: int, events: list[Event]) -> StepPoint:
    rank_seconds: dict[int, float] = {}
    rank_busy: dict[int, float] = {}
    phases: dict[str, float] = {}
    totals = dict.fromkeys(("device_tokens", "padded_tokens", "loss_tokens", "samples"), 0)
    losses: list[tuple[float, float | None]] = []
    grad_norms: list[float] = []
    lr: float | None = None
    stall: float | None = None
    breakdown: dict[str, dict[str, list[float]]] = {"source_loss": {}, "length_loss": {}}
    for index, event in enumerate(events):
        attrs = event.attributes
        rank = attrs.get("rank")
        rank = rank if isinstance(rank, int) else index
        seconds = number(attrs, "step_seconds")
        if seconds is not None:
            rank_seconds[rank] = max(seconds, rank_seconds.get(rank, 0.0))
            busy = max(seconds - (number(attrs, "grad_sync_seconds") or 0.0), 0.0)
            rank_busy[rank] = max(busy, rank_busy.get(rank, 0.0))
        for phase in PHASES:
            value = number(attrs, phase)
            if value is not None:
                phases[phase] = phases.get(phase, 0.0) + value
        for key in totals:
            value = number(attrs, key)
            totals[key] += int(value) if value is not None else 0
        loss = number(attrs, "loss")
        if loss is not None:
            losses.append((loss, number(attrs, "loss_tokens")))
        grad = number(attrs, "grad_norm")
        if grad is not None:
            grad_norms.append(grad)
        rank_lr = number(attrs, "lr")
        if rank_lr is not None and (lr is None or rank == 0):
            lr = rank_lr
        reported = number(attrs, "checkpoint_stall_seconds")
        if reported is not None:
            stall = max(stall or 0.0, reported)
        for key, totals_by_name in breakdown.items():
            add_breakdown(totals_by_name, attrs.get(key))
    return StepPoint(
        generation=generation,
        step=step,
        end_unix_s=max(e.time_unix_s for e in events),
        step_seconds=max(rank_seconds.values()) if rank_seconds else None,
        rank_step_seconds=rank_seconds,
        rank_busy_seconds=rank_busy,
        loss=_mean_loss(losses),
        grad_norm=max(grad_norms) if grad_norms else None,
        lr=lr,
        rank_seconds=sum(rank_seconds.values()),
        phase_seconds=phases,
        checkpoint_stall_seconds=stall,
        ranks=len(events),
        **totals,
        **{key: _means(by_name) for key, by_name in breakdown.items()},
    )


def add_breakdown(totals: dict[str, list[float]], reported: Any) -> None:
    """Add one rank's `{name: [loss sum, tokens]}` to `totals`; anything malformed is skipped."""
    if not isinstance(reported, Mapping):
        return
    for name, pair in reported.items():
        if not (isinstance(pair, list | tuple) and len(pair) == 2):
            continue
        loss_sum, tokens = number({"v": pair[0]}, "v"), number({"v": pair[1]}, "v")
        if loss_sum is None or tokens is None or tokens <= 0:
            continue
        entry = totals.setdefault(str(name), [0.0, 0.0])
        entry[0] += loss_sum
        entry[1] += tokens


def _means(totals: dict[str, list[float]]) -> dict[str, list[float]]:
    # Summed over ranks, then divided: each rank's figure is its own labels' sum, so the mean is
    # token-weighted across ranks exactly as the step's loss is (a tp group's ranks each report
    # the same labels: both sums double, the mean does not move).
    return {name: [s / t, int(t)] for name, (s, t) in sorted(totals.items())}


def _mean_loss(losses: list[tuple[float, float | None]]) -> float | None:
    # Weighted by loss tokens: the global loss of a data-parallel step is the token-weighted mean
    # of the ranks' losses (each rank averages over its own loss tokens).
    if not losses:
        return None
    weights = [w for _, w in losses]
    if all(w is not None and w > 0 for w in weights):
        total = sum(w for w in weights if w is not None)
        return sum(loss * (w or 0.0) for loss, w in losses) / total
    return sum(loss for loss, _ in losses) / len(losses)


def step_points(events: Iterable[Event]) -> list[StepPoint]:
    """Merge every rank's STEP_HEALTHY of a step into one point; mark replayed steps.

    A step is a replay when a point of an earlier generation already completed it: the run
    restored an older checkpoint and executes it again (seed 000: "lost steps, recomputed
    tokens"). Each step number counts once as progress, at its first execution.
    """
    grouped: dict[tuple[int, int], list[Event]] = {}
    for event in per_rank(events):
        if event.type == EventType.STEP_HEALTHY and event.step is not None:
            grouped.setdefault((event.generation, event.step), []).append(event)
    points = sorted(
        (_merge(gen, step, group) for (gen, step), group in grouped.items()),
        key=lambda p: (p.end_unix_s, p.generation, p.step),
    )
    done_before: dict[int, int] = {}  # generation -> highest step completed before it started
    highest = -1
    marked: list[StepPoint] = []
    for point in points:
        floor = done_before.setdefault(point.generation, highest)
        marked.append(point.model_copy(update={"replay": point.step <= floor}))
        highest = max(highest, point.step)
    return marked


def markers(events: Iterable[Event]) -> list[Marker]:
    """Vertical lines of the charts; one per committed checkpoint even if every rank reports
    it."""
    seen: set[str] = set()
    found: list[Marker] = []
    for event in events:
        kind = MARKER_KINDS.get(event.type)
        if kind is None:
            continue
        if event.type == EventType.CHECKPOINT_COMMITTED:
            key = event.checkpoint_id or f"step-{event.step}-g{event.generation}"
            if key in seen:
                continue
            seen.add(key)
        found.append(
            Marker(
                kind=kind,
                time_unix_s=event.time_unix_s,
                label=_label(event),
                generation=event.generation,
                step=event.step,
            )
        )
    return sorted(found, key=lambda m: m.time_unix_s)


def _label(event: Event) -> str:
    attrs = event.attributes
    if event.type == EventType.CHECKPOINT_COMMITTED:
        return f"ckpt @{event.step}"
    if event.type == EventType.FAILURE_CLASSIFIED:
        return f"{attrs.get('failure_class', 'failure')} (rank {attrs.get('rank', '?')})"
    if event.type == EventType.RESTORED:
        return f"restored @{event.step}"
    if event.type == EventType.MIXTURE_STAGE_STARTED:
        return f"stage {attrs.get('stage', '?')} @{event.step}"
    return event.type.lower().replace("_", " ")


def build_timeline(events: Iterable[Event]) -> Timeline:
    events = list(events)
    points = step_points(events)
    ranks = sorted({rank for p in points for rank in p.rank_step_seconds})
    evaluations = [
        Evaluation(
            time_unix_s=e.time_unix_s,
            generation=e.generation,
            step=int(e.step or 0),
            eval_loss=loss,
            checkpoint_id=e.checkpoint_id,
        )
        for e in events
        if e.type == EventType.EVALUATED and (loss := number(e.attributes, "eval_loss")) is not None
    ]
    return Timeline(steps=points, markers=markers(events), ranks=ranks, evaluations=evaluations)
