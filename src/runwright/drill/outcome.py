"""What one fault's run came to, read from its event log alone (`measure`).

From the FAULT_INJECTED event the drill recorded, the controller's and the workers' events:
- detected: the injection to the first event that shows the platform noticed (the fault's
  `detected_by`: FAILURE_CLASSIFIED, an adoption, a rejected stale write);
- the class the controller gave it and the action taken (restart, requeue, fail, stop; adopt or
  reject for a fault handled while the group trained on);
- RPO: the steps lost (the failed generation's last healthy step less the step restored, as
  RECOVERY_SUCCEEDED says) and the seconds of training they took;
- RTO: the injection to the first healthy step past the restored one;
- the replay verdict of the generation that recovered (control/replay_check.py);
- expected against got, each difference in words.
"""

from collections.abc import Sequence

from runwright.drill.faults import Expected
from runwright.events import EventType
from runwright.govern.compare import Comparison
from runwright.govern.data_loss import quarantine_rows
from runwright.govern.incidents import replay_verdict
from runwright.observe.rank_steps import rank_view
from runwright.records import Record
from runwright.store import EventRecord, RunRecord

MARKED = {
    EventType.FAULT_INJECTED: "injected",
    EventType.FAILURE_CLASSIFIED: "classified",
    EventType.RECOVERY_STARTED: "recovery",
    EventType.RESTORE_FALLBACK: "fallback",
    EventType.RESTORED: "restored",
    EventType.CHECKPOINT_COMMITTED: "checkpoint",
    EventType.WORKER_GROUP_LAUNCHED: "launched",
    EventType.WORKER_GROUP_ADOPTED: "adopted",
    EventType.CONTROLLER_TAKEOVER: "takeover",
    EventType.STALE_WRITE_REJECTED: "rejected",
    EventType.CHECKPOINT_FAILED: "save_failed",
    EventType.DATA_SHARD_QUARANTINED: "quarantined",
    EventType.NAN_DETECTED: "nan",
    EventType.RECOVERY_VERIFIED: "replay",
    EventType.RECOVERY_DIVERGED: "replay",
    EventType.RECOVERY_UNVERIFIED: "replay",
    EventType.STATE_CHANGED: "state",
}
"""The events a fault's timeline shows, by kind."""


class Mark(Record):
    """One point of a fault's timeline."""

    seconds: float
    """Since the run was submitted."""
    kind: str
    """injected, detected, state, restored, first_step, checkpoint, ... (MARKED)."""
    label: str
    """What happened, in words."""


class StepPoint(Record):
    """Rank 0's report of one healthy step."""

    seconds: float
    """Since the run was submitted."""
    step: int
    generation: int


class FaultResult(Record):
    """One fault of a drill: what was done, what the platform made of it, what was expected."""

    fault: str
    mechanism: str
    """How it was injected, in words (the matrix's)."""
    run_id: str
    spec_change: str | None = None
    """How this fault's spec differs from the drill's (a knob in code.args, two nodes)."""
    injected_step: int | None
    """Rank 0's newest healthy step at the injection, or the step a knob fired at."""
    injected_unix_s: float | None
    injection: str | None
    """What the injector did (pids, files, offsets)."""
    detected_seconds: float | None
    """The injection to the first event of `detected_by`."""
    detected_by: str | None
    """That event's type."""
    failure_class: str | None
    failure_message: str | None = None
    action: str | None
    """restart, requeue, fail, stop, adopt or reject; None when nothing was done."""
    restored_step: int | None
    """The step the next generation restored."""
    fallback: str | None = None
    """A checkpoint the restore refused, and why (RESTORE_FALLBACK)."""
    lost_steps: int | None
    """RPO in steps: trained after the restored step and lost."""
    lost_seconds: float | None
    """RPO in seconds: the training time those steps took."""
    tokens_lost: int | None = None
    """Tokens of data the final lineage skipped in quarantined shards (govern/data_loss.py);
    None when no shard was quarantined."""
    data_lost: str | None = None
    """Each quarantined shard and what it cost: documents and tokens skipped."""
    rto_seconds: float | None
    """The injection to the first healthy step past the restored one."""
    final_state: str
    terminal_reason: str | None
    equivalence: str | None
    """compare_runs against the reference: bitwise-equal, different or incomplete; None when
    not compared (the run did not finish its training)."""
    first_difference: str | None = None
    bitwise: str
    """yes, no or not compared; `not expected (...)` where the policy calls for a difference."""
    replay_check: str | None = None
    """verified, diverged or unverified: the controller's own check of the replayed steps."""
    replay_detail: str | None = None
    expected: Expected
    ok: bool
    """Whether it ended as expected."""
    mismatches: tuple[str, ...] = ()
    """Each way it did not, in words."""
    cleanup: str | None = None
    """What the injector undid afterwards (SIGCONT, a reaped process)."""
    wall_seconds: float
    """The fault's run, submit to its end."""
    marks: tuple[Mark, ...] = ()
    steps: tuple[StepPoint, ...] = ()


def _after(events: Sequence[EventRecord], since: float, *types: EventType) -> list[EventRecord]:
    return [e for e in events if e.type in types and e.time_unix_s >= since]


def _rank0_steps(events: Sequence[EventRecord]) -> list[EventRecord]:
    return [
        e
        for e in map(lambda e: rank_view(e, 0), events)
        if e is not None and e.step is not None and not e.attributes.get("skipped")
    ]


def _label(event: EventRecord) -> str:
    a = event.attributes
    if event.type == EventType.STATE_CHANGED:
        return f"{a.get('from_state')} -> {a.get('to_state')}"
    if event.type == EventType.FAILURE_CLASSIFIED:
        return f"{a.get('failure_class')}: {a.get('message')}"
    if event.type == EventType.RECOVERY_STARTED:
        return f"{a.get('action')}: {a.get('reason')}"
    if event.type == EventType.RESTORED:
        return f"generation {event.generation} restored step {event.step}"
    if event.type == EventType.RESTORE_FALLBACK:
        return f"refused checkpoint {event.checkpoint_id} (step {event.step}): {a.get('reason')}"
    if event.type == EventType.FAULT_INJECTED:
        return str(a.get("detail") or a.get("fault"))
    if event.type == EventType.CHECKPOINT_FAILED:
        return f"save of step {event.step} failed: {a.get('error') or a.get('errno')}"
    if event.type == EventType.DATA_SHARD_QUARANTINED:
        return f"shard {a.get('shard')} quarantined ({a.get('reason')}) from step {event.step}"
    if event.type == EventType.STALE_WRITE_REJECTED:
        return f"{a.get('rejected_type')} of generation {a.get('writer_generation')} rejected"
    suffix = f" step {event.step}" if event.step is not None else ""
    return f"{event.type.lower().replace('_', ' ')}{suffix}"


def _action(
    run: RunRecord, events: Sequence[EventRecord], since: float, failed: bool
) -> str | None:
    started = _after(events, since, EventType.RECOVERY_STARTED)
    if started:
        requeued = any(
            e.attributes.get("from_state") == "RECOVERING"
            and e.attributes.get("to_state") == "QUEUED"
            for e in _after(events, started[0].time_unix_s, EventType.STATE_CHANGED)
        )
        return "requeue" if requeued else str(started[0].attributes.get("action"))
    if failed and run.state == "FAILED":
        return "fail"
    if failed and run.state == "CANCELLED":
        return "stop"
    # Handled inside the group, which trained on: a refused save skipped, a shard quarantined.
    if _after(events, since, EventType.CHECKPOINT_FAILED):
        return "skip"
    if _after(events, since, EventType.DATA_SHARD_QUARANTINED):
        return "quarantine"
    if _after(events, since, EventType.WORKER_GROUP_ADOPTED):
        return "adopt"
    if _after(events, since, EventType.STALE_WRITE_REJECTED):
        return "reject"
    return None


def measure(
    *,
    fault: str,
    mechanism: str,
    expected: Expected,
    detected_by: Sequence[EventType],
    run: RunRecord,
    events: Sequence[EventRecord],
    comparison: Comparison | None,
    wall_seconds: float,
    spec_change: str | None = None,
    cleanup: str | None = None,
    injection_error: str | None = None,
) -> FaultResult:
    """The fault's result from its run's record and event log (and the comparison with the
    reference, when the run finished its training)."""
    start = events[0].time_unix_s if events else run.created_unix_s
    injected = next((e for e in events if e.type == EventType.FAULT_INJECTED), None)
    since = injected.time_unix_s if injected else float("inf")
    detection = next(iter(_after(events, since, *detected_by)), None)
    failure = next(iter(_after(events, since, EventType.FAILURE_CLASSIFIED)), None)
    failed_generation = failure.generation if failure else None
    action = _action(run, events, since, failure is not None)

    restored_step = lost_steps = lost_seconds = rto = None
    steps = _rank0_steps(events)
    first_past: EventRecord | None = None
    if failed_generation is not None:
        restores = [
            e for e in events if e.type == EventType.RESTORED and e.generation > failed_generation
        ]
        if restores:
            after = min(e.generation for e in restores)
            restored_step = max(int(e.step or 0) for e in restores if e.generation == after)
            first_past = next(
                (s for s in steps if s.generation >= after and (s.step or 0) > restored_step),
                None,
            )
        succeeded = _after(events, since, EventType.RECOVERY_SUCCEEDED)
        if succeeded and succeeded[0].attributes.get("lost_steps") is not None:
            lost_steps = int(succeeded[0].attributes["lost_steps"])
        if lost_steps is not None and restored_step is not None:
            lost_seconds = _lost_seconds(steps, failed_generation, restored_step, lost_steps)
        if first_past is not None and injected is not None:
            rto = first_past.time_unix_s - injected.time_unix_s
    elif injected is not None and run.state == "SUCCEEDED":
        lost_steps, lost_seconds = 0, 0.0  # handled while the group trained on: nothing lost

    lost = [r for r in quarantine_rows(list(events)) if r.in_final_lineage]
    fallbacks = _after(events, since, EventType.RESTORE_FALLBACK)
    fallback = _label(fallbacks[0]) if fallbacks else None
    verdict = replay_verdict(list(events), failed_generation) if failed_generation else {}

    marks = [
        Mark(seconds=e.time_unix_s - start, kind=MARKED[EventType(e.type)], label=_label(e))
        for e in events
        if e.type in MARKED and (e.type != EventType.RESTORED or e.generation > 1)
    ]
    if detection is not None:
        marks.append(
            Mark(seconds=detection.time_unix_s - start, kind="detected", label=_label(detection))
        )
    if first_past is not None:
        marks.append(
            Mark(
                seconds=first_past.time_unix_s - start,
                kind="first_step",
                label=f"first step past the restored one: {first_past.step}",
            )
        )
    got = {
        "equivalence": comparison.equivalence if comparison else None,
        "failure_class": failure.attributes.get("failure_class") if failure else None,
    }
    mismatches = _mismatches(
        expected, run, action, got, injected is not None, detection, fallback, verdict
    )
    if injection_error:
        mismatches.insert(0, injection_error)
    return FaultResult(
        fault=fault,
        mechanism=mechanism,
        run_id=run.run_id,
        spec_change=spec_change,
        injected_step=injected.step if injected else None,
        injected_unix_s=injected.time_unix_s if injected else None,
        injection=str(injected.attributes.get("detail")) if injected else None,
        detected_seconds=detection.time_unix_s - since if detection else None,
        detected_by=detection.type if detection else None,
        failure_class=got["failure_class"],
        failure_message=str(failure.attributes.get("message")) if failure else None,
        action=action,
        restored_step=restored_step,
        fallback=fallback,
        lost_steps=lost_steps,
        lost_seconds=lost_seconds,
        tokens_lost=sum(r.tokens_lost for r in lost) if lost else None,
        data_lost="; ".join(
            f"{r.shard} ({r.reason}, from step {r.step}): {r.documents_lost:,} documents, "
            f"{r.tokens_lost:,} tokens"
            for r in lost
        )
        or None,
        rto_seconds=rto,
        final_state=run.state,
        terminal_reason=run.terminal_reason,
        equivalence=got["equivalence"],
        first_difference=comparison.first_difference if comparison else None,
        bitwise=_bitwise(expected, got["equivalence"]),
        replay_check=verdict.get("replay_check"),
        replay_detail=verdict.get("replay_detail"),
        expected=expected,
        ok=not mismatches,
        mismatches=tuple(mismatches),
        cleanup=cleanup,
        wall_seconds=wall_seconds,
        marks=tuple(sorted(marks, key=lambda m: m.seconds)),
        steps=tuple(
            StepPoint(seconds=s.time_unix_s - start, step=int(s.step or 0), generation=s.generation)
            for s in steps
        ),
    )


def _bitwise(expected: Expected, equivalence: str | None) -> str:
    got = (
        "not compared" if equivalence is None else "yes" if equivalence == "bitwise-equal" else "no"
    )
    return got if expected.bitwise else f"not expected ({got})"


def _lost_seconds(
    steps: Sequence[EventRecord], failed: int, restored: int, lost: int
) -> float | None:
    """The training time of the lost steps: the failed generation's report of its last step less
    the report of the restored step it (or the generation it restored from) made."""
    if lost == 0:
        return 0.0
    ended = {s.step: s.time_unix_s for s in steps if s.generation == failed}
    earlier = {s.step: s.time_unix_s for s in steps if s.generation <= failed}
    last = restored + lost
    if last not in ended or restored not in earlier:
        return None
    return ended[last] - earlier[restored]


def _mismatches(
    expected: Expected,
    run: RunRecord,
    action: str | None,
    got: dict[str, str | None],
    injected: bool,
    detection: EventRecord | None,
    fallback: str | None,
    verdict: dict[str, str],
) -> list[str]:
    if not injected:
        return ["never injected: the run ended before the fault's step"]
    found = []
    if run.state != expected.state:
        found.append(f"ended {run.state} ({run.state_detail}), expected {expected.state}")
    elif expected.terminal_reason and run.terminal_reason != expected.terminal_reason:
        found.append(f"terminal reason {run.terminal_reason}, expected {expected.terminal_reason}")
    if detection is None:
        found.append("not detected: no event showed the platform noticed")
    if got["failure_class"] != expected.failure_class:
        found.append(f"classified {got['failure_class']}, expected {expected.failure_class}")
    if action != expected.action:
        found.append(f"action {action}, expected {expected.action}")
    if expected.bitwise and got["equivalence"] != "bitwise-equal":
        found.append(f"{got['equivalence'] or 'not compared'} to the reference, expected bitwise")
    if expected.fallback and fallback is None:
        found.append("no restore refused the corrupt checkpoint (no RESTORE_FALLBACK)")
    if verdict.get("replay_check") == "diverged":
        found.append(f"the replayed steps diverged: {verdict.get('replay_detail')}")
    return found
