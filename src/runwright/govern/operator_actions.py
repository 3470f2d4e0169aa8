"""The report's lines for operator actions (control/operator.py): each request with its actor,
reason and effect: what the controller did once the group stopped, or why nothing was done."""

from collections.abc import Sequence

from runwright.events import EventType
from runwright.govern.incidents import Intervention
from runwright.store import EventRecord

NOT_APPLIED = "asked, not applied: the run ended (or stopped for another reason) first"


def operator_interventions(events: Sequence[EventRecord]) -> list[Intervention]:
    """One line per OPERATOR_ACTION_REQUESTED, at the time it was asked, with the effect its
    OPERATOR_ACTION_APPLIED recorded (or NOT_APPLIED; "pending" while the run may still take it)."""
    applied = {
        e.attributes.get("request"): e
        for e in events
        if e.type == EventType.OPERATOR_ACTION_APPLIED
    }
    finished = any(e.type == EventType.RUN_FINISHED for e in events)
    lines = []
    for e in events:
        if e.type != EventType.OPERATOR_ACTION_REQUESTED:
            continue
        a = e.attributes
        done = applied.get(e.event_id)
        if done is not None:
            effect = str(done.attributes.get("effect"))
        else:
            effect = (
                NOT_APPLIED if finished else "pending: applies at the group's next step boundary"
            )
        reason = str(a.get("detail") or "no reason given")
        target = ", ".join(
            f"{k} {a[k]}"
            for k in ("checkpoint_id", "step", "shard", "pool")
            if a.get(k) is not None
        )
        lines.append(
            Intervention(
                time_unix_s=e.time_unix_s,
                kind=str(a.get("action")),
                generation=e.generation,
                step=e.step,
                detail=f"{target + ': ' if target else ''}{reason} -> {effect}",
                actor=a.get("actor"),
                reason=reason,
                effect=effect,
            )
        )
    return lines
