"""Contaminated step ranges (issue 25; seeds 000 and 004: a stretch of a run can be marked
contaminated, with a reason, and is then left out of comparisons and stop criteria).

A mark is an event in the run's log (STEPS_CONTAMINATED: first_step, last_step, reason, by):
append-only like every correction, so the run's evidence keeps what was trained and what was
later judged unusable. Marks do not touch checkpoints or the data cursor; what the steps
consumed stays consumed. Readers (the stop criteria, `runwright compare`, an experiment's
comparison) drop the marked steps' losses.
"""

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from runwright.errors import RunwrightError
from runwright.events import EventType, NewEvent
from runwright.observe.records import Event
from runwright.records import Record
from runwright.store import Store

V = TypeVar("V")


class ContaminatedRange(Record):
    """Steps first_step..last_step (both included) of a run, marked unusable."""

    first_step: int
    last_step: int
    reason: str
    by: str | None = None
    """Who marked it."""
    marked_unix_s: float

    def holds(self, step: int) -> bool:
        return self.first_step <= step <= self.last_step


def contaminated_ranges(events: Iterable[Event]) -> list[ContaminatedRange]:
    """Every mark in a run's log, in the order they were made."""
    return [
        ContaminatedRange(
            first_step=int(e.attributes["first_step"]),
            last_step=int(e.attributes["last_step"]),
            reason=str(e.attributes.get("reason") or ""),
            by=e.attributes.get("by"),
            marked_unix_s=e.time_unix_s,
        )
        for e in events
        if e.type == EventType.STEPS_CONTAMINATED
    ]


def without_contaminated(
    values: Mapping[int, V], ranges: Sequence[ContaminatedRange]
) -> dict[int, V]:
    """`values` (step -> anything) less the marked steps."""
    if not ranges:
        return dict(values)
    return {s: v for s, v in values.items() if not any(r.holds(s) for r in ranges)}


def mark_contaminated(
    store: Store, run_id: str, first_step: int, last_step: int, reason: str, by: str | None
) -> ContaminatedRange:
    """Record a mark on a run (any state: a finished run's steps can be judged later)."""
    if not reason.strip():
        raise RunwrightError("--reason is required: say why the steps are contaminated")
    if first_step < 1 or last_step < first_step:
        raise RunwrightError(
            f"steps {first_step}-{last_step}: give FIRST-LAST with 1 <= FIRST <= LAST "
            "(steps are numbered from 1)"
        )
    run = store.get_run(run_id)
    now = time.time()
    store.append_event(
        NewEvent(
            event_id=f"{run.run_id}:contaminated:{uuid.uuid4().hex[:12]}",
            run_id=run.run_id,
            generation=run.generation,
            type=EventType.STEPS_CONTAMINATED,
            step=last_step,
            time_unix_s=now,
            attributes={
                "first_step": first_step,
                "last_step": last_step,
                "reason": reason,
                "by": by,
            },
        ),
        fenced=False,
    )
    return ContaminatedRange(
        first_step=first_step, last_step=last_step, reason=reason, by=by, marked_unix_s=now
    )
