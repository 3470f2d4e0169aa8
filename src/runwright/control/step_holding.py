"""Hold each step's per-rank STEP_HEALTHY messages until the step is complete, then store one row.

The ingest (control/ingest.py) hands every STEP_HEALTHY message with a step to a `StepHolder`.
A step is stored, as one folded row (observe/rank_steps.py), once the first of these holds:
- every rank of its generation has reported it (`complete`);
- a message of a newer generation was read, or the group ended (`settle_with_fence`): the old
  generation will report no more (`ended`);
- it has been held HOLD_SECONDS since its first report was read: a rank that lags further (a
  straggler, a rank that died mid-step) must not hold back the run's progress (`late`);
- more than MAX_HELD_REPORTS reports are held, its oldest steps first: a backlog read from the
  channel in turns of rank files (a controller re-reading a long run) cannot grow memory without
  a bound (`bound`).
The last three store a part: a row covering the ranks it has. A rank of that step read later goes
into another part.

Never counted twice, never lost. Holding is transactional: a batch's additions and flushes are
staged and become the holder's state only once the store took the batch, so a poll the store
broke off leaves the holder as it was and the channel cursor (which passes a batch only after
that) re-delivers the same messages. A controller that restarts has an empty holder and re-reads
the channel from its start; its parts may be cut differently. So the store decides what a part
may still cover: before a step's row is written, its id is looked up (one indexed read per batch
for all its steps); a step already stored in parts gets only the ranks no part holds, as the next
part. Ids: `<run>:steps:g<generation>:s<step>` for a step's first row, `...:p<n>` for its n-th.
"""

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from runwright.events import EventType
from runwright.observe.rank_steps import RANKS, RankReport, fold
from runwright.protocol import ChannelMessage
from runwright.store import EventRow, Store

HOLD_SECONDS = 10.0
"""How long a step waits for its last ranks after its first report was read. Ranks of one
generation finish a step within a collective of each other (milliseconds to a second even when
the channel's reader lags, since it reads every rank's file in turns), so ten seconds only cuts
a step whose rank stopped or lags by many steps."""
MAX_HELD_REPORTS = 65_536
"""Reports held at most: 64 steps of a 1,024-rank run, ~40-60 MB of decoded messages' figures.
A controller re-reading a long run meets each rank's file in 256 KiB turns (~800 steps of one
rank before the next rank's), so without this bound it would hold the whole backlog."""

Key = tuple[int, int]
"""(generation, step)."""


@dataclass
class HeldStep:
    """The reports of one step of one generation read so far."""

    generation: int
    step: int
    world_size: int | None
    first_read: float
    """time.monotonic() when its first report was read."""
    reports: dict[int, RankReport] = field(default_factory=dict)

    def complete(self) -> bool:
        return self.world_size is not None and len(self.reports) >= self.world_size


@dataclass
class Staged:
    """A batch's effect on the holder, applied by `StepHolder.commit` once the store took it."""

    held: dict[Key, HeldStep]
    flush: dict[Key, str]
    """Steps to store now -> why (complete, ended, late, bound)."""
    newest_generation: int


def holdable(message: ChannelMessage) -> bool:
    """A rank's report of a step, which is folded with its step's others."""
    return (
        message.type == EventType.STEP_HEALTHY
        and message.step is not None
        and message.checkpoint_id is None
    )


class StepHolder:
    """One run's steps whose ranks have not all reported yet."""

    def __init__(
        self, hold_seconds: float = HOLD_SECONDS, max_reports: int = MAX_HELD_REPORTS
    ) -> None:
        self.hold_seconds = hold_seconds
        self.max_reports = max_reports
        self.held: dict[Key, HeldStep] = {}
        self.newest_generation = 0
        """The newest generation whose reports were read."""

    def stage(
        self,
        messages: Iterable[ChannelMessage],
        now: float | None = None,
        ended: bool = False,
    ) -> Staged:
        """Add `messages` (holdable ones) to a copy of the held steps and say which to store
        now; `ended`: the group is gone, store everything held."""
        now = time.monotonic() if now is None else now
        held = dict(self.held)
        copied: set[Key] = set()
        newest = self.newest_generation
        for m in messages:
            generation, step, rank = m.generation, m.step, m.rank
            assert step is not None
            key = (generation, step)
            entry = held.get(key)
            if entry is None:
                entry = held[key] = HeldStep(generation, step, m.world_size, now)
                copied.add(key)
            elif key not in copied:  # copy on write: the holder's own entry stays as it was
                entry = held[key] = HeldStep(
                    entry.generation,
                    entry.step,
                    entry.world_size,
                    entry.first_read,
                    dict(entry.reports),
                )
                copied.add(key)
            if generation > newest:
                newest = generation
            # One report per rank and step: a second copy is the same message read again.
            if rank not in entry.reports:
                entry.reports[rank] = RankReport(rank, m.event_id, m.time_unix_s, m.attributes)
        flush: dict[Key, str] = {}
        for key, entry in held.items():
            if ended or entry.generation < newest:
                flush[key] = "ended"
            elif entry.complete():
                flush[key] = "complete"
            elif entry.world_size is None or now - entry.first_read >= self.hold_seconds:
                flush[key] = "late"
        kept = sorted(key for key in held if key not in flush)
        count = sum(len(held[key].reports) for key in kept)
        for key in kept:  # the oldest steps first
            if count <= self.max_reports:
                break
            flush[key] = "bound"
            count -= len(held[key].reports)
        return Staged(held, flush, newest)

    def commit(self, staged: Staged) -> None:
        self.held = {k: v for k, v in staged.held.items() if k not in staged.flush}
        self.newest_generation = staged.newest_generation

    def due(self, now: float | None = None) -> bool:
        """Whether a held step has waited HOLD_SECONDS (a poll with nothing new stores it)."""
        now = time.monotonic() if now is None else now
        return any(now - e.first_read >= self.hold_seconds for e in self.held.values())


_ID_CHUNK = 500
"""Ids per look-up: under SQLite's smallest host-parameter limit (999 before 3.32)."""
_PART_LOOKUP = 64
"""Part ids looked up per read (a step rarely has more than two parts)."""


def step_id(run_id: str, generation: int, step: int, part: int = 1) -> str:
    base = f"{run_id}:steps:g{generation}:s{step}"
    return base if part == 1 else f"{base}:p{part}"


def step_rows(store: Store, run_id: str, steps: list[HeldStep]) -> dict[Key, EventRow | None]:
    """The row to store for each of `steps`: the step whole, or the next part of a step the
    store holds parts of (the ranks none of them covers); None when they cover every rank."""
    firsts = [step_id(run_id, s.generation, s.step) for s in steps]
    stored: set[str] = set()
    for start in range(0, len(firsts), _ID_CHUNK):
        chunk = firsts[start : start + _ID_CHUNK]
        stored.update(e.event_id for e in store.events(run_id, ids=chunk))
    rows: dict[Key, EventRow | None] = {}
    for entry, first in zip(steps, firsts, strict=True):
        reports = entry.reports
        part = 1
        if first in stored:
            covered, part = _stored_parts(store, run_id, entry)
            reports = {r: v for r, v in reports.items() if r not in covered}
        key = (entry.generation, entry.step)
        if not reports:
            rows[key] = None
            continue
        rows[key] = EventRow(
            event_id=step_id(run_id, entry.generation, entry.step, part),
            run_id=run_id,
            generation=entry.generation,
            type=EventType.STEP_HEALTHY,
            step=entry.step,
            world_size=entry.world_size,
            checkpoint_id=None,
            time_unix_s=max(r.time_unix_s for r in reports.values()),
            attributes=fold(entry.generation, entry.step, reports.values()),
        )
    return rows


def _stored_parts(store: Store, run_id: str, entry: HeldStep) -> tuple[set[int], int]:
    """The ranks the stored parts of a step cover, and the number of its next part. Parts are
    numbered without gaps (each is written as the next after a look-up), so the first id not
    found ends them."""
    covered: set[int] = set()
    part = 1
    while True:
        ids = [step_id(run_id, entry.generation, entry.step, part + i) for i in range(_PART_LOOKUP)]
        found = {e.event_id: e for e in store.events(run_id, ids=ids)}
        for event_id in ids:
            event = found.get(event_id)
            if event is None:
                return covered, part
            covered.update(event.attributes.get(RANKS) or [])
            part += 1
