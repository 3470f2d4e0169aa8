"""The recovery sequence, and its bookkeeping derived from the event log so that it survives a
controller restart: past failures, the recovery in progress, the diagnostic bundle, and the batch
ranges to skip."""

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.control.allocation import AllocationStep
from runwright.control.escalation import Escalation, escalation_reason
from runwright.control.executors.protocol import (
    EXIT_LOST,
    AllocationState,
    Executor,
    FailureEvidence,
    LostSupervisor,
)
from runwright.control.failures import Classification, classify
from runwright.control.hang_dumps import explain_hang
from runwright.control.membership import MembershipStep, changed_for
from runwright.control.policy import PastFailure, decide
from runwright.control.resume import RollbackPoint
from runwright.control.sdc import classify_sdc, detection, known_good_step, quarantined_hosts
from runwright.control.states import RunState
from runwright.control.watchdog import Verdict
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.spec import FailureClass, JobSpec
from runwright.store import EventRecord, RunRecord, Store

if TYPE_CHECKING:
    from runwright.control.journal import Journal
    from runwright.control.runlog import RunLogs
    from runwright.control.supervision import Supervision

# A broken group has nothing left to save: it gets this long to exit before SIGKILL.
FAILED_GROUP_GRACE_SECONDS = 2.0

RECENT_EVENTS = 200
"""The newest events a diagnostics bundle keeps."""
RECOVERY_INPUTS = (
    EventType.NAN_DETECTED,
    EventType.LOSS_SPIKE,
    EventType.STOP_ACKNOWLEDGED,
    EventType.STOP_GRACE_EXPIRED,
    EventType.RESTORED,
    EventType.FAILURE_CLASSIFIED,
    EventType.SDC_DETECTED,
)
"""The event types `RecoverySequence.recover` classifies and decides from."""


def past_failures(events: list[EventRecord]) -> list[PastFailure]:
    return [
        PastFailure(
            failure_class=FailureClass(e.attributes["failure_class"]),
            signature=str(e.attributes.get("signature", "")),
            restored_step=int(e.attributes.get("restored_step") or 0),
            last_step=int(e.attributes.get("last_step") or 0),
        )
        for e in events
        if e.type == EventType.FAILURE_CLASSIFIED
    ]


def restored_step_of(events: list[EventRecord], generation: int) -> int:
    """The step generation `generation` restored from (0 when it started fresh)."""
    steps = [
        int(e.step or 0)
        for e in events
        if e.type == EventType.RESTORED and e.generation == generation
    ]
    return max(steps, default=0)


def open_recovery(events: list[EventRecord]) -> EventRecord | None:
    """The newest RECOVERY_STARTED not yet followed by RECOVERY_SUCCEEDED."""
    pending = None
    for e in events:
        if e.type == EventType.RECOVERY_STARTED:
            pending = e
        elif e.type == EventType.RECOVERY_SUCCEEDED:
            pending = None
    return pending


def lost_hosts_of(events: list[EventRecord], generation: int) -> list[str]:
    """The nodes generation `generation`'s classified failure names lost (its evidence's)."""
    return [
        str(host)
        for e in events
        if e.type == EventType.FAILURE_CLASSIFIED and e.generation == generation
        for key in ("lost_hosts", "quarantined_hosts")  # a suspect node leaves as a lost one
        for host in e.attributes.get(key) or ()
    ]


def skip_ranges(events: list[EventRecord]) -> list[list[int]]:
    ranges = [
        e.attributes["skip_steps"]
        for e in events
        if e.type == EventType.RECOVERY_STARTED and e.attributes.get("skip_steps")
    ]
    return sorted({tuple(r) for r in ranges})  # type: ignore[return-value]


def write_diagnostics(
    store: Store,
    run: RunRecord,
    evidence: FailureEvidence,
    failure: Classification,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Everything an operator needs to judge the failure without the processes: spec, rank
    manifest, last healthy step, error records, recent events and the log tails the executor
    kept (`FailureEvidence.log_tails`: for local torchrun, torchrun's and every rank's)."""
    bundle_file = run_paths(Path(run.root), run.run_id).diagnostics_bundle(run.generation)
    bundle_file.parent.mkdir(parents=True, exist_ok=True)
    recent = store.events(run.run_id, newest=RECENT_EVENTS)
    logs = dict(evidence.log_tails)
    errors: list[dict[str, Any]] = [r.model_dump() for r in evidence.error_records]
    latest = store.checkpoints.latest(run.run_id)  # the fence's pointer
    bundle = {
        "run_id": run.run_id,
        "generation": run.generation,
        "written_unix_s": time.time(),
        "classification": failure.model_dump(mode="json"),
        "last_healthy_step": run.last_step,
        "latest_checkpoint_id": latest.checkpoint_id if latest else None,
        "spec": run.spec,
        "rank_manifest": run.rank_manifest,
        "error_records": errors,
        "node_exits": [n.model_dump() for n in evidence.node_exits],
        "recent_events": [e.model_dump(mode="json") for e in recent],
        "log_tails": logs,
        **(extra or {}),  # e.g. the ranks' collective dumps of an attributed hang
    }
    bundle_file.write_text(json.dumps(bundle, indent=1, default=str))
    return bundle_file


class RecoverySequence:
    """detect and classify -> fence and stop the group -> diagnostics -> decide -> restart with
    bounded backoff from the newest committed checkpoint -> declare success only after verified
    progress past the restored step (ARCHITECTURE.md, "Recovery")."""

    def __init__(
        self,
        store: Store,
        journal: "Journal",
        executor_of: Callable[[RunRecord], Executor],
        logs: "RunLogs",
    ) -> None:
        self.store = store
        self.journal = journal
        self.executor_of = executor_of
        """The executor that drives a run (its pool's)."""
        self.logs = logs
        """The runs' event-log views: the checks made every pass read new events only."""
        self.allocations = AllocationStep(store, journal)
        self.membership = MembershipStep(store, journal)
        self.escalation = Escalation(store, journal, self.allocations)

    def recover(
        self,
        run: RunRecord,
        spec: JobSpec,
        sup: "Supervision",
        exit_code: int | None,
        verdict: Verdict | None,
    ) -> None:
        detected = time.time()
        # The types the classification and the decision read, by index: a run with a million
        # STEP_HEALTHY rows is not read whole at the moment it fails.
        events = self.store.events(run.run_id, types=RECOVERY_INPUTS)
        current = [e for e in events if e.generation == run.generation]
        bad_step = next(
            (
                e
                for e in current
                # A loss spike refused with training.loss_spike.action: rollback names its step
                # as a NaN does: the restart skips that step's batch.
                if e.type in (EventType.NAN_DETECTED, EventType.LOSS_SPIKE)
            ),
            None,
        )
        nan = (
            (int(bad_step.attributes.get("rank", 0)), int(bad_step.step or 0))
            if bad_step is not None
            else None
        )
        # Preempted: it stopped at a boundary for it, or was killed when it could not in time
        # (then it resumes from its last committed checkpoint, still requeued behind the run
        # that preempted it).
        stops = {
            e.type
            for e in current
            if e.type in (EventType.STOP_ACKNOWLEDGED, EventType.STOP_GRACE_EXPIRED)
            and e.attributes.get("reason") == "preemption"
        }
        lost: LostSupervisor | None = None
        executor = self.executor_of(run)
        hang: dict[str, Any] | None = None
        if exit_code is None and verdict is not None:
            # Before the group is stopped (a killed rank dumps nothing): which rank the others
            # wait for, from every rank's collective dump (control/hang_dumps.py).
            paths = run_paths(Path(run.root), run.run_id)
            verdict, hang = explain_hang(
                paths, run.generation, sup.rank_pids, spec.resources.world_size, verdict
            )
        if exit_code is None:
            # A live but broken group (hang, no progress): fence first, so no worker of this
            # generation can publish once we act on it, then stop it; it has nothing to save.
            self.store.revoke_generation(run.run_id, run.generation)
            exit_code = executor.stop(
                sup.group, FAILED_GROUP_GRACE_SECONDS, sorted(sup.worker_pids)
            )
        elif exit_code == EXIT_LOST:
            # The supervisor is gone: fence, then kill whatever of the group still runs without
            # it (executors/local_group.py's WorkerGroup.repair_lost says why it is not adopted).
            self.store.revoke_generation(run.run_id, run.generation)
            lost = executor.repair_lost(sup.group)
        evidence = executor.evidence(sup.group, lost)
        failure = classify(
            exit_code=exit_code,
            watchdog_class=verdict.failure_class if verdict else None,
            watchdog_detail=verdict.detail if verdict else "",
            watchdog_rank=verdict.rank if verdict else None,
            nan_rank_step=nan,
            spike=bad_step.attributes
            if bad_step is not None and bad_step.type == EventType.LOSS_SPIKE
            else None,
            preempted=bool(stops),
            preempted_killed=EventType.STOP_ACKNOWLEDGED not in stops,
            evidence=evidence,
            last_step=run.last_step,
            ranks_started=len(sup.started_ranks),
            world_size=spec.resources.world_size,
        )
        sdc = detection(current, run.generation)
        if sdc is not None:  # the group's own corruption verdict (control/sdc.py)
            failure = classify_sdc(sdc, failure, run.last_step)
        restored = restored_step_of(events, run.generation)
        self.journal.record(
            run,
            EventType.FAILURE_CLASSIFIED,
            failure_class=str(failure.failure_class),
            rank=failure.rank,
            message=failure.message,
            signature=failure.signature,
            evidence=failure.evidence,
            exit_code=exit_code,
            last_step=run.last_step,
            restored_step=restored,
            lost_hosts=list(evidence.lost_hosts) or None,
            quarantined_hosts=quarantined_hosts(sdc) if sdc is not None else None,
            error_lines=list(failure.error_lines) or None,
            attribution={k: v for k, v in hang.items() if k != "dumps"} if hang else None,
            **({"node": failure.node, "host": failure.host} if failure.node is not None else {}),
        )
        self.journal.move(
            run, RunState.RECOVERING, detail=f"{failure.failure_class}: {failure.message}"
        )
        sup.end_attempt(self.store, run.run_id, exit_code, str(failure.failure_class))
        bundle = write_diagnostics(
            self.store, run, evidence, failure, {"hang_attribution": hang} if hang else None
        )
        self.journal.record(run, EventType.DIAGNOSTICS_WRITTEN, path=str(bundle))
        history = past_failures(events)
        decision = decide(spec.recovery, failure, history, restored)
        run = self.store.get_run(run.run_id)
        why = escalation_reason(spec.recovery, failure, history, decision)
        if why is not None:  # recovery.on_exhausted: pause (control/escalation.py)
            self.escalation.escalate(run, spec, failure, why, executor)
            return
        if decision.action in ("fail", "stop"):
            target = RunState.CANCELLED if decision.action == "stop" else RunState.FAILED
            self.journal.finish(run, target, decision.terminal_reason, decision.reason)
            return
        # An elastic run may go on at another size (control/membership.py).
        self.membership.after_failure(run, spec, failure, evidence.lost_hosts, executor)
        self.journal.record(
            run,
            EventType.RECOVERY_STARTED,
            action=decision.action,
            reason=decision.reason,
            failure_class=str(failure.failure_class),
            last_step=run.last_step,
            detected_unix_s=detected,
            not_before_unix_s=time.time() + decision.backoff_seconds,
            skip_steps=list(decision.skip_steps) if decision.skip_steps else None,
            restore_at_most_step=known_good_step(sdc) if sdc is not None else None,
        )

    def roll_back(
        self,
        run: RunRecord,
        sup: "Supervision",
        exit_code: int | None,
        point: RollbackPoint,
    ) -> None:
        """An alert's rollback (control/alerts.py): the group stopped at a step boundary without
        saving; restart from `point` (the newest committed checkpoint before the alert's step),
        skipping the steps after it up to the stop (their batches are not trained on again), as
        `on_nan: rollback_skip` does. Not a failure: no class, no retry spent."""
        start, last, skip = point.start, point.last_step, point.skip()
        words = f"{point.why}; rolling back to step {start}" + (
            f", skipping steps {skip[0]}-{skip[1]}" if skip else ""
        )
        sup.end_attempt(self.store, run.run_id, exit_code, None)
        self.journal.move(run, RunState.RECOVERING, detail=words)
        run = self.store.get_run(run.run_id)
        now = time.time()
        self.journal.record(
            run,
            EventType.RECOVERY_STARTED,
            action="restart",
            reason=words,
            last_step=last,
            detected_unix_s=now,
            not_before_unix_s=now,
            skip_steps=skip,
            restore_at_most_step=start,
        )

    def restart_if_due(self, run: RunRecord) -> bool:
        """After the backoff: RECOVERING -> STARTING (new generation) in the allocation the run
        holds, or -> QUEUED to requeue: asked for (a preemption), or because the allocation is
        gone (a lost node, a time limit). Requeueing gives the old allocation back first; the
        next request avoids the nodes the run lost (allocation.py). Returns True when it moved
        the run."""
        pending = open_recovery(self.logs.of(run.run_id).events)
        if pending is None or pending.generation != run.generation:
            return False  # the decision is not recorded yet (a crash between the two): wait
        if time.time() < float(pending.attributes.get("not_before_unix_s") or 0):
            return False
        reason = str(pending.attributes.get("reason"))
        executor = self.executor_of(run)
        requeue = pending.attributes.get("action") == "requeue"
        allocation = run.allocation or {}
        lost = set(lost_hosts_of(self.logs.of(run.run_id).events, run.generation))
        resized = changed_for(self.logs.of(run.run_id).events, run.generation)
        if not requeue and resized is not None:
            # The executor grants the new size and the rank manifest is rebuilt for it.
            requeue = True
            reason = f"{reason}; elastic: {resized.attributes['reason']}: requeue"
        elif not requeue and lost & set(allocation.get("hosts") or ()):
            # The engine may not have ended the allocation yet, but a gang missing a node
            # cannot run this generation again: ask for a new one without it.
            requeue = True
            reason = f"{reason}; the allocation lost {', '.join(sorted(lost))}: requeue"
        elif not requeue and allocation.get("request") is not None:
            held = executor.allocation_status(
                Path(run.root), run.run_id, int(allocation["request"])
            )
            if held.state is not AllocationState.GRANTED:
                requeue = True
                reason = f"{reason}; the allocation is gone ({held.reason}): requeue"
        if not requeue:
            return self.journal.move(run, RunState.STARTING, detail=reason)
        if not self.allocations.release(run, executor, f"requeue: {reason}"):
            return False  # the engine cannot be reached now: try again next pass
        return self.journal.move(run, RunState.QUEUED, detail=reason)

    def note_progress(
        self, run: RunRecord, spec: JobSpec, generation: int, step: int, time_unix_s: float
    ) -> None:
        """RECOVERY_SUCCEEDED once the restarted generation completes a step past the one it
        restored, with lost steps, replayed tokens and recovery time."""
        events = self.logs.of(run.run_id).events
        pending = open_recovery(events)
        if pending is None or generation <= pending.generation:
            return
        restored = restored_step_of(events, generation)
        if step <= restored:
            return
        lost = max(0, int(pending.attributes.get("last_step") or 0) - restored)
        self.journal.record(
            self.store.get_run(run.run_id),
            EventType.RECOVERY_SUCCEEDED,
            op=str(pending.event_id),
            per_step=False,
            restored_step=restored,
            first_step=step,
            lost_steps=lost,
            replayed_tokens=lost * int(spec.plan.tokens_per_step.value or 0),
            recovery_seconds=round(time_unix_s - float(pending.attributes["detected_unix_s"]), 3),
            failure_class=pending.attributes.get("failure_class"),
        )
