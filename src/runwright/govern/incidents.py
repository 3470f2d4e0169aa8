"""The recovery half of a run's evidence chain: every incident with its classification and
recovery, and every intervention (cancel, stale writes rejected, budget).

Seed 004 ("recovery must prove equivalence"): classify the failure, roll back to the newest
trusted checkpoint, and write the recovery into the evidence chain: what failed, when it was
noticed, what was restored, how many steps and tokens were lost and replayed, how long it took.
"""

from collections.abc import Sequence
from typing import Any

from runwright.events import EventType
from runwright.observe.accounting import RecoveryWindow
from runwright.observe.timeline import StepPoint, number
from runwright.records import Record
from runwright.store import EventRecord, RunRecord

INTERVENTION_TYPES = (EventType.STALE_WRITE_REJECTED, EventType.BUDGET_WARNING)
# Terminal reasons that mean someone or something outside the training stopped the run.
INTERVENING_REASONS = ("USER_CANCELLED", "PREEMPTED", "BUDGET_EXCEEDED")


class Incident(Record):
    """One failure and what the platform did about it."""

    generation: int
    """Generation that failed."""
    detected_unix_s: float
    """FAILURE_CLASSIFIED time."""
    failure_class: str | None
    """Class given by the controller."""
    rank: int | None
    """Rank blamed, if any."""
    message: str | None
    """Classifier's message."""
    error_lines: tuple[str, ...] = ()
    """The root-cause rank's last error-output lines, as the classifier kept them."""
    last_healthy_step: int | None
    """Highest healthy step before detection."""
    detection_seconds: float | None
    """Last healthy step's end to detection (how long the failure went unnoticed)."""
    recovery_started_unix_s: float | None = None
    """RECOVERY_STARTED time."""
    recovered: bool = False
    """A RECOVERY_SUCCEEDED followed."""
    restored_step: int | None = None
    """Step of the checkpoint restored."""
    restored_checkpoint_id: str | None = None
    """Checkpoint restored."""
    lost_steps: int | None = None
    """Steps executed after the restored checkpoint and lost."""
    replayed_tokens: int | None = None
    """Tokens re-executed to make up the lost steps."""
    recovery_seconds: float | None = None
    """As the controller measured it (RECOVERY_SUCCEEDED)."""
    time_to_healthy_seconds: float | None = None
    """Detection to the first healthy step after the restore, from the timeline."""
    replay_check: str | None = None
    """verified, diverged or unverified (RECOVERY_VERIFIED/DIVERGED/UNVERIFIED of the
    generation that recovered it); None when no verdict was recorded (a run not at
    `reproducibility.level: bitwise`, or one that ended before its next generation reported)."""
    replay_detail: str | None = None
    """The verdict in words: what was compared, where it diverged, or why nothing was."""
    guard_captures: tuple[str, ...] = ()
    """The failed generation's guard-trip captures (runtime/guard_capture.py), one per rank."""
    escalated: str | None = None
    """Why recovery paused the run for a person instead (ESCALATED), if it did."""
    restore_fallbacks: tuple[str, ...] = ()
    """Checkpoints the restore after it skipped, with why (a failed probe check among them)."""


class Intervention(Record):
    """Something that acted on the run from outside the training loop."""

    time_unix_s: float
    """When."""
    kind: str
    """cancel, pause, resume, stale_write_rejected, budget_warning, or the terminal reason."""
    generation: int
    """Generation at the time."""
    step: int | None
    """Step at the time."""
    detail: str
    """What happened, in words."""
    actor: str | None = None
    """Who did it: a principal through the server, `local:<user>` from a CLI; None when the
    platform itself acted or the log predates actors."""
    reason: str | None = None
    """The reason the person gave (operator actions, govern/operator_actions.py)."""
    effect: str | None = None
    """What the action did to the run, in words (operator actions)."""


def _int(value: Any) -> int | None:
    number_ = number({"v": value}, "v")
    return int(number_) if number_ is not None else None


def incidents(
    events: Sequence[EventRecord],
    steps: Sequence[StepPoint],
    windows: Sequence[RecoveryWindow],
) -> list[Incident]:
    """One incident per failed generation (its first FAILURE_CLASSIFIED), with the recovery
    events that follow it up to the next failure."""
    to_healthy = {
        w.generation: w.healthy_unix_s - w.detected_unix_s
        for w in windows
        if w.healthy_unix_s is not None
    }
    failures = [e for e in events if e.type == EventType.FAILURE_CLASSIFIED]
    firsts: dict[int, EventRecord] = {}
    for event in failures:
        firsts.setdefault(event.generation, event)
    ordered = sorted(firsts.values(), key=lambda e: e.time_unix_s)
    found: list[Incident] = []
    for index, failure in enumerate(ordered):
        until = ordered[index + 1].time_unix_s if index + 1 < len(ordered) else float("inf")
        before = [p for p in steps if p.end_unix_s <= failure.time_unix_s]
        last = max(before, key=lambda p: p.end_unix_s) if before else None
        attrs = failure.attributes
        fields: dict[str, Any] = {
            "generation": failure.generation,
            "detected_unix_s": failure.time_unix_s,
            "failure_class": attrs.get("failure_class"),
            "rank": _int(attrs.get("rank")),
            "message": str(attrs["message"]) if attrs.get("message") else None,
            "error_lines": tuple(str(line) for line in attrs.get("error_lines") or ()),
            "last_healthy_step": max(p.step for p in before) if before else None,
            "detection_seconds": failure.time_unix_s - last.end_unix_s if last else None,
            "time_to_healthy_seconds": to_healthy.get(failure.generation),
            "guard_captures": tuple(
                str(e.attributes.get("path"))
                for e in events
                if e.type == EventType.GUARD_CAPTURED and e.generation == failure.generation
            ),
        }
        fallbacks: list[str] = []
        for event in events:
            if not failure.time_unix_s <= event.time_unix_s < until:
                continue
            a = event.attributes
            if event.type == EventType.RECOVERY_STARTED and "recovery_started_unix_s" not in fields:
                fields["recovery_started_unix_s"] = event.time_unix_s
            elif event.type == EventType.ESCALATED and event.generation == failure.generation:
                fields["escalated"] = str(a.get("reason"))
            elif event.type == EventType.RESTORE_FALLBACK:
                fallbacks.append(f"step {event.step}: {a.get('reason')}")
            elif event.type == EventType.RESTORED:
                fields["restored_step"] = event.step
                fields["restored_checkpoint_id"] = event.checkpoint_id
            elif event.type == EventType.RECOVERY_SUCCEEDED:
                fields["recovered"] = True
                fields["lost_steps"] = _int(a.get("lost_steps"))
                fields["replayed_tokens"] = _int(a.get("replayed_tokens"))
                fields["recovery_seconds"] = number(a, "recovery_seconds")
                restored = _int(a.get("restored_step"))
                if fields.get("restored_step") is None and restored is not None:
                    fields["restored_step"] = restored
        fields["restore_fallbacks"] = tuple(fallbacks)
        fields.update(replay_verdict(events, failure.generation))
        found.append(Incident(**fields))
    return found


REPLAY_VERDICTS = {
    EventType.RECOVERY_VERIFIED: "verified",
    EventType.RECOVERY_DIVERGED: "diverged",
    EventType.RECOVERY_UNVERIFIED: "unverified",
}


def replay_verdict(events: Sequence[EventRecord], failed_generation: int) -> dict[str, Any]:
    """The verdict on the first generation after `failed_generation` (control/replay_check.py)."""
    verdicts = [
        e
        for e in events
        if e.type in REPLAY_VERDICTS
        and (_int(e.attributes.get("verified_generation")) or 0) > failed_generation
    ]
    if not verdicts:
        return {}
    event = min(verdicts, key=lambda e: _int(e.attributes.get("verified_generation")) or 0)
    a = event.attributes
    if event.type == EventType.RECOVERY_DIVERGED:
        detail = (
            f"step {a.get('step')} rank {a.get('rank')}: loss {a.get('loss')!r} where generation "
            f"{a.get('earlier_generation')} reported {a.get('earlier_loss')!r}"
        )
    elif event.type == EventType.RECOVERY_UNVERIFIED:
        detail = str(a.get("reason") or "")
    elif a.get("nothing_replayed"):
        detail = "nothing replayed: the failed generation had not passed the restored step"
    else:
        detail = (
            f"{a.get('replayed_steps')} replayed step(s) reproduced bit for bit "
            f"({a.get('compared')} rank reports compared"
            + (f", {a['unchecked']} unchecked" if a.get("unchecked") else "")
            + ("" if a.get("complete", True) else "; the generation ended mid-replay")
            + ")"
        )
    return {"replay_check": REPLAY_VERDICTS[EventType(event.type)], "replay_detail": detail}


def interventions(run: RunRecord, events: Sequence[EventRecord]) -> list[Intervention]:
    """Cancels, pauses and resumes, rejected stale writes, budget warnings, the loss-spike guard's
    skips, pauses and rollbacks, and a terminal reason that came from outside the training
    (cancel, preemption, budget)."""
    found: list[Intervention] = []
    pause_asked_by: dict[int, str] = {}
    """generation -> who asked it to pause (the controller's move to PAUSED names no actor)."""
    for event in events:
        a = event.attributes
        actor = a.get("actor")
        if event.type == EventType.STOP_REQUESTED and a.get("reason") == "pause" and actor:
            pause_asked_by[event.generation] = actor
            continue
        if event.type == EventType.STATE_CHANGED and a.get("to_state") == "CANCELLED":
            detail = f"cancelled ({a.get('reason', 'no reason')})"
            if a.get("detail"):
                detail += f": {a['detail']}"
            kind = "cancel"
        elif event.type == EventType.STATE_CHANGED and a.get("to_state") == "PAUSED":
            detail, kind = a.get("detail") or "paused", "pause"
            actor = actor or pause_asked_by.get(event.generation)
        elif event.type == EventType.STATE_CHANGED and a.get("from_state") == "PAUSED":
            detail, kind = a.get("detail") or "resumed", "resume"
        elif event.type == EventType.STALE_WRITE_REJECTED:
            detail = (
                f"{a.get('rejected_type', 'write')} from generation "
                f"{a.get('writer_generation', '?')} rejected (run at generation "
                f"{a.get('run_generation', event.generation)})"
            )
            kind = "stale_write_rejected"
        elif event.type == EventType.BUDGET_WARNING:
            detail = ", ".join(f"{k}={v}" for k, v in sorted(a.items())) or "budget warning"
            kind = "budget_warning"
        elif event.type in (EventType.LOSS_SPIKE_SKIPPED, EventType.LOSS_SPIKE):
            # The loss-spike guard (training.loss_spike): the step's update was dropped, or the
            # step failed so recovery rolls back past its batch (the incident that follows).
            kind = f"loss_spike_{a.get('action', 'rollback')}"
            loss, mean = number(a, "loss") or float("nan"), number(a, "mean") or float("nan")
            detail = (
                f"loss {loss:.4g} > {a.get('threshold_ratio')} x the mean {mean:.4g} of the "
                f"last {a.get('window_steps')} steps: "
                + ("rolled back past the step" if kind.endswith("rollback") else "update dropped")
            )
        else:
            continue
        found.append(
            Intervention(
                time_unix_s=event.time_unix_s,
                kind=kind,
                generation=event.generation,
                step=event.step,
                detail=detail,
                actor=actor,
            )
        )
    from runwright.govern.operator_actions import operator_interventions

    found.extend(operator_interventions(events))
    reason = run.terminal_reason
    if reason in INTERVENING_REASONS and not any(
        i.kind in ("cancel", "stop_with_save") for i in found
    ):
        found.append(
            Intervention(
                time_unix_s=run.updated_unix_s,
                kind=str(reason).lower(),
                generation=run.generation,
                step=run.last_step,
                detail=run.state_detail or f"run ended {reason}",
            )
        )
    return sorted(found, key=lambda i: i.time_unix_s)
