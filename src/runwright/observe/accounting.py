"""Where a run's allocated time went: productive, checkpoint, replay, recovery and idle seconds,
as wall seconds, device-seconds and money.

Seed 004 ("cost governance down to the experiment") and seed 000 ("the cost report must separate
effective training, recovery recomputation and idle waiting"). Every allocated second lands in
exactly one category, so the five device-second figures add up to the allocation
(sum over attempts of world_size x (ended - started)).

How a second is classified, highest priority first:

    checkpoint   the checkpoint stall inside a step (the step's `checkpoint_stall_seconds`: with
                 the step loop, the save of the step before, which it reports before saving;
                 else the `stall_seconds` of a CHECKPOINT_COMMITTED at that step), or the stall
                 before a commit that matches no step
    productive   a healthy step executed for the first time: [end - step_seconds, end]
    replay       a healthy step an earlier generation had already completed (re-executed after a
                 restore; seed 000: "recomputed tokens")
    recovery     from failure detection (FAILURE_CLASSIFIED) to the start of the first healthy
                 step after the restore
    idle         everything else: launch and rendezvous before the first step, the time between
                 a crash and its detection, the tail after the last step

Gaps between attempts hold no devices: they count in wall seconds (as recovery or idle) but cost
no device-seconds.
"""

import itertools
from collections.abc import Iterable, Sequence

from runwright.events import EventType
from runwright.observe.figures import cost
from runwright.observe.rank_steps import per_rank
from runwright.observe.records import Attempt, Event
from runwright.observe.timeline import StepPoint, number
from runwright.records import Record

CATEGORIES = ("productive", "checkpoint", "replay", "recovery", "idle")
# Sweep priority: a second covered by several intervals takes the highest.
_PRIORITY = {"checkpoint": 4, "productive": 3, "replay": 2, "recovery": 1}


class Split(Record):
    """One quantity split over the five categories."""

    productive: float = 0.0
    """First executions of healthy steps, checkpoint stalls excluded."""
    checkpoint: float = 0.0
    """Checkpoint stalls that blocked training."""
    replay: float = 0.0
    """Steps re-executed after a restore."""
    recovery: float = 0.0
    """Failure detection to the first healthy step after the restore."""
    idle: float = 0.0
    """Allocated but none of the above."""

    @property
    def total(self) -> float:
        return sum(getattr(self, c) for c in CATEGORIES)


class AttemptSpan(Record):
    """One attempt's allocation as accounted."""

    generation: int
    """Generation of the attempt."""
    start_unix_s: float
    """Worker group start."""
    end_unix_s: float
    """Worker group end (the last event of the generation while it still runs)."""
    world_size: int
    """Devices held."""

    @property
    def device_seconds(self) -> float:
        return self.world_size * max(0.0, self.end_unix_s - self.start_unix_s)


class RecoveryWindow(Record):
    """Failure detection to the first healthy step after the restore."""

    generation: int
    """Generation that failed."""
    failure_class: str | None
    """Class the controller gave the failure."""
    detected_unix_s: float
    """FAILURE_CLASSIFIED time."""
    healthy_unix_s: float | None
    """Start of the first healthy step after the restore; None if the run never got there."""


class CostSplit(Record):
    """The cost split of the run report."""

    wall_seconds: Split
    """Wall-clock seconds from the first attempt's start to the last attempt's end."""
    device_seconds: Split
    """Device-seconds (world size x wall seconds inside attempts)."""
    cost: Split
    """device_seconds / 3600 x device_hour_price."""
    device_hour_price: float
    """Price of one device-hour from the spec."""
    attempts: list[AttemptSpan]
    """The allocations accounted."""
    recoveries: list[RecoveryWindow]
    """Recovery windows found."""

    @property
    def allocated_device_seconds(self) -> float:
        return sum(a.device_seconds for a in self.attempts)


def attempt_spans(attempts: Sequence[Attempt], events: Sequence[Event]) -> list[AttemptSpan]:
    """Allocations from the attempts; a running attempt ends at its generation's last event.
    Without attempt records (a run driven outside the controller), one span from the first to
    the last event, as wide as the ranks that reported."""
    last_by_generation: dict[int, float] = {}
    for event in events:
        last = last_by_generation.get(event.generation, event.time_unix_s)
        last_by_generation[event.generation] = max(last, event.time_unix_s)
    if attempts:
        return [
            AttemptSpan(
                generation=a.generation,
                start_unix_s=a.started_unix_s,
                end_unix_s=a.ended_unix_s
                if a.ended_unix_s is not None
                else max(a.started_unix_s, last_by_generation.get(a.generation, 0.0)),
                world_size=a.world_size,
            )
            for a in attempts
        ]
    if not events:
        return []
    ranks = {e.attributes.get("rank") for e in per_rank(events) if e.type == EventType.STEP_HEALTHY}
    launched = [e.world_size or 0 for e in events if e.world_size]
    return [
        AttemptSpan(
            generation=events[0].generation,
            start_unix_s=min(e.time_unix_s for e in events),
            end_unix_s=max(e.time_unix_s for e in events),
            world_size=max([len(ranks - {None}), *launched, 1]),
        )
    ]


def recovery_windows(events: Sequence[Event], steps: Sequence[StepPoint]) -> list[RecoveryWindow]:
    """One window per failed generation: from its first FAILURE_CLASSIFIED to the start of the
    first healthy step after it in a later generation (or, for an in-place rollback, after a
    RESTORED of the same generation)."""
    windows: list[RecoveryWindow] = []
    seen: set[int] = set()
    for event in events:
        if event.type != EventType.FAILURE_CLASSIFIED or event.generation in seen:
            continue
        seen.add(event.generation)
        restored_here = [
            e.time_unix_s
            for e in events
            if e.type == EventType.RESTORED
            and e.generation == event.generation
            and e.time_unix_s >= event.time_unix_s
        ]
        healthy = [
            p.start_unix_s
            for p in steps
            if p.end_unix_s > event.time_unix_s
            and (
                p.generation > event.generation
                or (restored_here and p.start_unix_s >= min(restored_here))
            )
        ]
        failure = event.attributes.get("failure_class")
        windows.append(
            RecoveryWindow(
                generation=event.generation,
                failure_class=str(failure) if failure is not None else None,
                detected_unix_s=event.time_unix_s,
                healthy_unix_s=max(min(healthy), event.time_unix_s) if healthy else None,
            )
        )
    return windows


def _step_intervals(
    steps: Sequence[StepPoint], pending: dict[tuple[int, int], float]
) -> list[tuple[float, float, str]]:
    """Labelled intervals of the steps; removes from `pending` the commits a step absorbed."""
    intervals: list[tuple[float, float, str]] = []
    previous_end: dict[int, float] = {}
    for point in steps:
        # A step without a reported time spans back to the previous step of its generation.
        seconds = point.step_seconds
        if seconds is None:
            seconds = point.end_unix_s - previous_end.get(point.generation, point.end_unix_s)
        previous_end[point.generation] = point.end_unix_s
        start = point.end_unix_s - seconds
        committed = pending.pop((point.generation, point.step), 0.0)
        if point.checkpoint_stall_seconds is not None:
            # The step loop measured it. It reports a step before saving it, so the stall it
            # reports is the save of the step before: that commit is absorbed here, not again.
            stall = min(point.checkpoint_stall_seconds, seconds)
            if stall > 0:
                pending.pop((point.generation, point.step - 1), None)
            elif committed:
                pending[(point.generation, point.step)] = committed  # the next step carries it
        else:
            stall = min(committed, seconds)
        work_end = point.end_unix_s - stall
        intervals.append((start, work_end, "replay" if point.replay else "productive"))
        if stall > 0:
            intervals.append((work_end, point.end_unix_s, "checkpoint"))
    return intervals


def commit_stalls(events: Iterable[Event]) -> dict[tuple[int, int], tuple[float, float]]:
    """(generation, step) -> (stall seconds, commit time) of each committed checkpoint; the
    longest stall when several ranks report the same commit. `stall_seconds` per the event
    contract, else the checkpointer's `stage` timing (the blocking snapshot copy)."""
    found: dict[tuple[int, int], tuple[float, float]] = {}
    for event in events:
        if event.type != EventType.CHECKPOINT_COMMITTED or event.step is None:
            continue
        attrs = event.attributes
        stall = number(attrs, "stall_seconds")
        stall = stall if stall is not None else number(attrs, "stage") or 0.0
        key = (event.generation, event.step)
        old = found.get(key, (0.0, event.time_unix_s))
        found[key] = (max(old[0], stall), max(old[1], event.time_unix_s))
    return found


def account(
    events: Sequence[Event],
    attempts: Sequence[Attempt],
    steps: Sequence[StepPoint],
    device_hour_price: float = 0.0,
) -> CostSplit:
    """Split the run's allocation into the five categories (see the module docstring)."""
    spans = attempt_spans(attempts, events)
    recoveries = recovery_windows(events, steps)
    stalls = commit_stalls(events)
    pending = {key: stall for key, (stall, _) in stalls.items()}
    intervals = _step_intervals(steps, pending)
    # Commits that matched no step: the stall ends at the commit.
    for key, stall in pending.items():
        if stall > 0:
            end = stalls[key][1]
            intervals.append((end - stall, end, "checkpoint"))
    if spans:
        window_end = max(s.end_unix_s for s in spans)
        for w in recoveries:
            end = w.healthy_unix_s if w.healthy_unix_s is not None else window_end
            intervals.append((w.detected_unix_s, end, "recovery"))
    wall, device = _sweep(spans, intervals)
    return CostSplit(
        wall_seconds=Split(**wall),
        device_seconds=Split(**device),
        cost=Split(**{c: cost(device[c], device_hour_price) for c in CATEGORIES}),
        device_hour_price=device_hour_price,
        attempts=spans,
        recoveries=recoveries,
    )


def _sweep(
    spans: Sequence[AttemptSpan], intervals: Sequence[tuple[float, float, str]]
) -> tuple[dict[str, float], dict[str, float]]:
    """Measure each category over the run's window: cut the window at every interval and span
    boundary, give each piece the highest-priority label covering it (idle if none) and the
    devices of the spans covering it."""
    wall = dict.fromkeys(CATEGORIES, 0.0)
    device = dict.fromkeys(CATEGORIES, 0.0)
    if not spans:
        return wall, device
    lo = min(s.start_unix_s for s in spans)
    hi = max(s.end_unix_s for s in spans)
    clipped = [(max(a, lo), min(b, hi), label) for a, b, label in intervals]
    clipped = [(a, b, label) for a, b, label in clipped if b > a]
    cuts = sorted(
        {lo, hi}
        | {s.start_unix_s for s in spans}
        | {s.end_unix_s for s in spans}
        | {t for a, b, _ in clipped for t in (a, b)}
    )
    # Sweep: +1/-1 per label and +devices/-devices per span at each cut.
    opens: dict[float, list[tuple[str, int]]] = {}
    for a, b, label in clipped:
        opens.setdefault(a, []).append((label, 1))
        opens.setdefault(b, []).append((label, -1))
    for s in spans:
        opens.setdefault(s.start_unix_s, []).append(("devices", s.world_size))
        opens.setdefault(s.end_unix_s, []).append(("devices", -s.world_size))
    active = dict.fromkeys([*_PRIORITY, "devices"], 0)
    for left, right in itertools.pairwise(cuts):
        for label, delta in opens.get(left, []):
            active[label] += delta
        covering = [label for label in _PRIORITY if active[label] > 0]
        label = max(covering, key=_PRIORITY.__getitem__) if covering else "idle"
        length = right - left
        wall[label] += length
        device[label] += length * max(active["devices"], 0)
    return wall, device
