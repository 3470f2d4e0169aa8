"""The controller: reconciles each run's desired state with what it observes.

A pass reads the run record (the source of truth), ingests what the workers reported, looks at
the worker group, and takes at most the next step of the state machine. Side effects carry an
operation id (`<run>:g<gen>:<op>` event ids, one launch per generation marked by its pid file),
so a pass repeated by a restarted controller is harmless: it adopts a live group of the current
generation and kills any group of an older one.
"""

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runwright.control import recovery as rec
from runwright.control.budget import check as check_budget
from runwright.control.budget import usage_of
from runwright.control.executor import (
    LocalExecutor,
    WorkerGroup,
    adopt,
    launched_generations,
    run_dir,
)
from runwright.control.failures import Classification, classify
from runwright.control.fencing import raise_fence
from runwright.control.ingest import Ingestor
from runwright.control.policy import decide
from runwright.control.processes import is_alive
from runwright.control.states import TERMINAL, RunState, TerminalReason, advance
from runwright.control.watchdog import Watchdog
from runwright.runtime.channel import HEARTBEAT, ChannelMessage
from runwright.runtime.context import ENV_SKIP_STEPS
from runwright.runtime.rank_manifest import RankEntry, build_rank_manifest
from runwright.runtime.stop import write_stop_request
from runwright.spec import JobSpec, spec_from_mapping
from runwright.store import EventRecord, Outcome, RunRecord, Store
from runwright.store.records import NewEvent

# A failed group has nothing left to save: it gets this long to exit before SIGKILL.
FAILED_GROUP_GRACE_SECONDS = 2.0
ACTIVE = (RunState.STARTING, RunState.RUNNING, RunState.CHECKPOINTING)


def new_run_id(spec: JobSpec) -> str:
    return f"{spec.name[:40]}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


@dataclass
class Supervision:
    """What this controller holds for a run's current generation."""

    group: WorkerGroup
    watchdog: Watchdog
    worker_pids: set[int] = field(default_factory=set)
    started_ranks: set[int] = field(default_factory=set)
    stop_reason: str | None = None
    stop_deadline: float | None = None


class Controller:
    """Drives runs on one executor; the store is the only state that outlives it."""

    def __init__(
        self,
        store: Store,
        root: Path,
        executor: LocalExecutor | None = None,
        poll_seconds: float = 0.2,
        on_event: Callable[[EventRecord], None] | None = None,
    ) -> None:
        self.store = store
        self.root = root
        self.executor = executor or LocalExecutor()
        self.poll_seconds = poll_seconds
        self.on_event = on_event
        self._sup: dict[str, Supervision] = {}
        self._ingest: dict[str, Ingestor] = {}
        self._seen_seq: dict[str, int] = {}
        self._orphans_checked: set[str] = set()

    # -- entry points ---------------------------------------------------------------------------

    def submit(
        self, spec: JobSpec, workdir: Path, idempotency_key: str | None = None
    ) -> tuple[RunRecord, bool]:
        """Record a run; the same idempotency key returns the existing run and starts nothing."""
        run, created = self.store.create_run(
            run_id=new_run_id(spec),
            name=spec.name,
            spec=spec.model_dump(mode="json"),
            spec_hash=spec.spec_hash,
            plan=spec.plan.model_dump(mode="json"),
            workdir=str(workdir),
            root=str(self.root),
            state=RunState.CREATED,
            idempotency_key=idempotency_key,
        )
        if created:
            self._record(
                run, "JOB_SUBMITTED", spec_hash=spec.spec_hash, idempotency_key=idempotency_key
            )
        return run, created

    def drive(self, run_id: str) -> RunRecord:
        """Reconcile until the run is terminal and its workers are gone. Ctrl-C cancels."""
        run_id = self.store.get_run(run_id).run_id
        try:
            while not self.reconcile(run_id):
                time.sleep(self.poll_seconds)
        except KeyboardInterrupt:
            from runwright.control.cancel import request_cancel

            request_cancel(self.store, run_id, "interrupted by the user (Ctrl-C)")
            while not self.reconcile(run_id):
                time.sleep(self.poll_seconds)
        self._emit(run_id)
        return self.store.get_run(run_id)

    def drive_all(self, *, until_idle: bool = True) -> list[str]:
        """Pick up every unfinished run in the store where its records say it is, and reconcile
        them all until none is left (or forever, as a daemon). Stopping this controller leaves the
        workers running; the next controller adopts them."""
        active: set[str] = set()
        finished: list[str] = []
        while True:
            unfinished = [s for s in RunState if s not in TERMINAL]
            active |= {r.run_id for r in self.store.list_runs(limit=100_000, states=unfinished)}
            for run_id in sorted(active):
                if self.reconcile(run_id):
                    active.discard(run_id)
                    finished.append(run_id)
            if not active and until_idle:
                return finished
            time.sleep(self.poll_seconds)

    def reconcile(self, run_id: str) -> bool:
        """One pass; True once the run is terminal and no worker of it is left."""
        run = self.store.get_run(run_id)
        spec = spec_from_mapping(run.spec, f"run {run_id}")
        if run_id not in self._orphans_checked:
            self._kill_orphans(run)
            self._orphans_checked.add(run_id)
        self._ingest_and_watch(run, spec)
        run = self.store.get_run(run_id)
        state = RunState(run.state)
        if state in TERMINAL:
            done = self._wind_down(run, spec)
        else:
            {
                RunState.CREATED: lambda: self._move(run, RunState.QUEUED, "JOB_ACCEPTED"),
                RunState.QUEUED: lambda: self._move(run, RunState.ALLOCATING),
                RunState.ALLOCATING: lambda: self._allocate(run, spec),
                RunState.RECOVERING: lambda: self._restart(run, spec),
            }.get(state, lambda: self._supervise(run, spec))()
            done = False
        self._emit(run_id)
        return done

    # -- placement and launch -------------------------------------------------------------------

    def _allocate(self, run: RunRecord, spec: JobSpec) -> None:
        res = spec.resources
        hosts = self.executor.hosts(res.nodes)
        manifest = build_rank_manifest(
            nodes=res.nodes,
            devices_per_node=res.devices_per_node,
            dp=int(spec.plan.dp.value or 1),
            tp=spec.parallelism.tp,
            pp=spec.parallelism.pp,
            device_type=res.device_type,
            hosts=hosts,
        )
        allocation = {
            "executor": self.executor.name,
            "hosts": hosts,
            "world_size": res.world_size,
            "device_type": res.device_type,
        }
        self.store.update_run(
            run.run_id, allocation=allocation, rank_manifest=[e.model_dump() for e in manifest]
        )
        self._record(run, "ALLOCATION_READY", **allocation)
        self._move(run, RunState.STARTING)

    def _launch(self, run: RunRecord, spec: JobSpec) -> Supervision:
        """Start the current generation's group (once: its pid file marks the launch)."""
        existing = adopt(Path(run.root), run.run_id, run.generation)
        if existing is not None:
            group = existing
            self._record(run, "WORKER_GROUP_ADOPTED", pid=group.pid)
        else:
            raise_fence(Path(run.root), run.run_id, run.generation)
            events = self.store.events(run.run_id)
            manifest = [RankEntry.model_validate(e) for e in run.rank_manifest or []]
            group = self.executor.launch(
                spec=spec,
                run_id=run.run_id,
                generation=run.generation,
                root=Path(run.root),
                workdir=Path(run.workdir),
                rank_manifest=manifest,
                extra_env={ENV_SKIP_STEPS: _json(rec.skip_ranges(events))},
            )
            self.store.start_attempt(run.run_id, run.generation, spec.resources.world_size)
            self._record(
                run,
                "WORKER_GROUP_LAUNCHED",
                pid=group.pid,
                world_size=spec.resources.world_size,
                log=str(group.log_path),
            )
        sup = Supervision(
            group=group,
            watchdog=Watchdog(
                spec.recovery, spec.resources.world_size, start_step=run.last_step or 0
            ),
        )
        self._sup[run.run_id] = sup
        # Re-read the channel from the start so the new supervision sees every message of its
        # generation (ingestion is idempotent).
        self._ingest.pop(run.run_id, None)
        return sup

    def _kill_orphans(self, run: RunRecord) -> None:
        """No two worker groups of one run ever run: kill every older generation's group."""
        # The newest launched group is the current one (or, for a just-cancelled run, the one
        # finishing its stop-step save); supervise() and _wind_down() look after it.
        for generation in launched_generations(Path(run.root), run.run_id)[:-1]:
            group = adopt(Path(run.root), run.run_id, generation)
            if group is not None and is_alive(group.pid):
                group.stop(0.0, self._rank_pids(run.run_id, generation))
                self._record(run, "ORPHAN_KILLED", orphan_generation=generation, pid=group.pid)

    # -- supervision ----------------------------------------------------------------------------

    def _ingest_and_watch(self, run: RunRecord, spec: JobSpec) -> None:
        ingestor = self._ingest.setdefault(run.run_id, Ingestor(self.store, run))
        sup = self._sup.get(run.run_id)
        steps: list[ChannelMessage] = []

        def observe(message: ChannelMessage, outcome: Outcome | None) -> None:
            if sup is None or message.generation < sup.group.generation:
                return
            if message.type == HEARTBEAT:
                sup.watchdog.beat(message.rank)
            elif message.type == "STEP_HEALTHY" and message.step is not None:
                sup.watchdog.step(message.rank, message.step)
                steps.append(message)
            elif message.type == "WORKER_STARTED":
                sup.watchdog.beat(message.rank)
                sup.started_ranks.add(message.rank)
                if isinstance(message.attributes.get("pid"), int):
                    sup.worker_pids.add(message.attributes["pid"])
            else:
                sup.watchdog.beat(message.rank)

        ingestor.poll(observe)
        if steps:
            self._maybe_recovered(run, spec, max(steps, key=lambda m: m.step or 0))

    def _supervise(self, run: RunRecord, spec: JobSpec) -> None:
        sup = self._sup.get(run.run_id)
        if sup is None or sup.group.generation != run.generation:
            sup = self._launch(run, spec)
            self._ingest_and_watch(run, spec)
        if run.state == RunState.STARTING and len(sup.started_ranks) >= spec.resources.world_size:
            self._move(run, RunState.RUNNING)
            run = self.store.get_run(run.run_id)
        exit_code = sup.group.poll()
        if exit_code is None:
            self._watch_live_group(run, spec, sup)
            return
        self._ingest_and_watch(run, spec)  # whatever the ranks wrote before exiting
        run = self.store.get_run(run.run_id)
        acks = [
            e
            for e in self.store.events(run.run_id, types=["STOP_ACKNOWLEDGED"])
            if e.generation == run.generation
        ]
        reason = acks[0].attributes.get("reason") if acks else sup.stop_reason
        if reason == "budget":
            self._end_attempt(run, sup, exit_code, None)
            self._finish(
                run,
                RunState.CANCELLED,
                TerminalReason.BUDGET_EXCEEDED,
                "budget exhausted; stopped at a step boundary",
            )
        elif exit_code == 0 and reason != "preemption":
            self._end_attempt(run, sup, exit_code, None)
            if run.state == RunState.STARTING:
                self._move(run, RunState.RUNNING)
                run = self.store.get_run(run.run_id)
            self._finish(
                run,
                RunState.SUCCEEDED,
                TerminalReason.COMPLETED,
                f"the worker group finished at step {run.last_step}",
            )
        else:
            self._recover(run, spec, sup, exit_code, None)

    def _watch_live_group(self, run: RunRecord, spec: JobSpec, sup: Supervision) -> None:
        if sup.stop_deadline is not None:
            if time.monotonic() > sup.stop_deadline:
                sup.group.stop(0.0, sorted(sup.worker_pids))
            return
        verdict = sup.watchdog.check()
        if verdict is not None:
            self._recover(run, spec, sup, None, verdict)
            return
        budget = check_budget(spec, usage_of(spec, run, self.store.attempts(run.run_id)))
        for kind in budget.warnings:
            self._record(
                run,
                "BUDGET_WARNING",
                kind=kind,
                op=kind,
                per_step=False,
                **budget.usage.model_dump(),
            )
        if budget.exceeded:
            self._record(
                run,
                "BUDGET_EXCEEDED",
                detail=budget.exceeded,
                per_step=False,
                **budget.usage.model_dump(),
            )
            self._request_stop(run, spec, sup, "budget")

    def _request_stop(self, run: RunRecord, spec: JobSpec, sup: Supervision, reason: str) -> None:
        write_stop_request(
            run_dir(Path(run.root), run.run_id),
            run.generation,
            reason,
            save=spec.checkpoint.save_on_stop and spec.checkpoint.enabled,
        )
        sup.stop_reason = reason
        sup.stop_deadline = time.monotonic() + spec.recovery.stop_grace_seconds
        sup.watchdog.paused = True

    def _maybe_recovered(self, run: RunRecord, spec: JobSpec, message: ChannelMessage) -> None:
        events = self.store.events(run.run_id)
        pending = rec.open_recovery(events)
        if pending is None or message.generation <= pending.generation:
            return
        restored = rec.restored_step_of(events, message.generation)
        if message.step is None or message.step <= restored:
            return
        lost = max(0, int(pending.attributes.get("last_step") or 0) - restored)
        detected = float(pending.attributes["detected_unix_s"])
        self._record(
            self.store.get_run(run.run_id),
            "RECOVERY_SUCCEEDED",
            op=str(pending.event_id),
            per_step=False,
            restored_step=restored,
            first_step=message.step,
            lost_steps=lost,
            replayed_tokens=lost * int(spec.plan.tokens_per_step.value or 0),
            recovery_seconds=round(message.time_unix_s - detected, 3),
            failure_class=pending.attributes.get("failure_class"),
        )

    # -- failure and recovery -------------------------------------------------------------------

    def _recover(
        self,
        run: RunRecord,
        spec: JobSpec,
        sup: Supervision,
        exit_code: int | None,
        verdict: object | None,
    ) -> None:
        """classify -> fence and stop the group -> diagnostics -> decide -> restart or end."""
        events = self.store.events(run.run_id)
        gen_events = [e for e in events if e.generation == run.generation]
        nan = next(
            (
                (int(e.attributes.get("rank", 0)), int(e.step or 0))
                for e in gen_events
                if e.type == "NAN_DETECTED"
            ),
            None,
        )
        preempted = any(
            e.type == "STOP_ACKNOWLEDGED" and e.attributes.get("reason") == "preemption"
            for e in gen_events
        )
        if verdict is not None or exit_code is None:
            # Fence first: no worker of this generation may publish once we act on it.
            raise_fence(Path(run.root), run.run_id, run.generation + 1)
            exit_code = sup.group.stop(FAILED_GROUP_GRACE_SECONDS, sorted(sup.worker_pids))
        failure = classify(
            exit_code=exit_code,
            watchdog_class=getattr(verdict, "failure_class", None),
            watchdog_detail=getattr(verdict, "detail", ""),
            watchdog_rank=getattr(verdict, "rank", None),
            nan_rank_step=nan,
            preempted=preempted,
            log_dir=sup.group.log_dir,
            torchrun_log=rec.tail(sup.group.log_path, 20_000),
            last_step=run.last_step,
            ranks_started=len(sup.started_ranks),
            world_size=spec.resources.world_size,
        )
        restored = rec.restored_step_of(events, run.generation)
        self._record(
            run,
            "FAILURE_CLASSIFIED",
            failure_class=str(failure.failure_class),
            rank=failure.rank,
            message=failure.message,
            signature=failure.signature,
            evidence=failure.evidence,
            exit_code=exit_code,
            last_step=run.last_step,
            restored_step=restored,
        )
        self._move(run, RunState.RECOVERING, detail=f"{failure.failure_class}: {failure.message}")
        raise_fence(Path(run.root), run.run_id, run.generation + 1)
        self._end_attempt(run, sup, exit_code, str(failure.failure_class))
        bundle = rec.write_diagnostics(self.store, run, sup.group, failure)
        self._record(run, "DIAGNOSTICS_WRITTEN", path=str(bundle))
        self._decide(run, spec, failure, rec.past_failures(events), restored)

    def _decide(
        self, run: RunRecord, spec: JobSpec, failure: Classification, history: list, restored: int
    ) -> None:
        decision = decide(spec.recovery, failure, history, restored)
        run = self.store.get_run(run.run_id)
        if decision.action in ("fail", "stop"):
            target = RunState.CANCELLED if decision.action == "stop" else RunState.FAILED
            self._finish(run, target, decision.terminal_reason, decision.reason)
            return
        self._record(
            run,
            "RECOVERY_STARTED",
            action=decision.action,
            reason=decision.reason,
            failure_class=str(failure.failure_class),
            last_step=run.last_step,
            detected_unix_s=time.time(),
            not_before_unix_s=time.time() + decision.backoff_seconds,
            skip_steps=list(decision.skip_steps) if decision.skip_steps else None,
        )

    def _restart(self, run: RunRecord, spec: JobSpec) -> None:
        pending = rec.open_recovery(self.store.events(run.run_id))
        if pending is None or pending.generation != run.generation:
            return  # the decision is not recorded yet (a crash between the two): wait
        if time.time() < float(pending.attributes.get("not_before_unix_s") or 0):
            return
        self._sup.pop(run.run_id, None)
        if pending.attributes.get("action") == "requeue":
            self._move(run, RunState.QUEUED, detail=str(pending.attributes.get("reason")))
        else:
            self._move(run, RunState.STARTING, detail=str(pending.attributes.get("reason")))

    # -- ending ---------------------------------------------------------------------------------

    def _wind_down(self, run: RunRecord, spec: JobSpec) -> bool:
        """A terminal run (e.g. cancelled from another process) whose group may still be saving:
        give it the grace period, then kill it. True once nothing of the run is left."""
        sup = self._sup.get(run.run_id)
        if sup is None:
            group = adopt(Path(run.root), run.run_id, _last_launched(run))
            if group is None or group.poll() is not None:
                self._record(
                    run,
                    "RUN_FINISHED",
                    per_step=False,
                    state=run.state,
                    reason=run.terminal_reason,
                    last_step=run.last_step,
                )
                return True
            sup = Supervision(
                group=group, watchdog=Watchdog(spec.recovery, spec.resources.world_size)
            )
            self._sup[run.run_id] = sup
        if sup.stop_deadline is None:
            sup.stop_deadline = time.monotonic() + spec.recovery.stop_grace_seconds
        code = sup.group.poll()
        if code is None and time.monotonic() > sup.stop_deadline:
            code = sup.group.stop(
                0.0, sorted(sup.worker_pids | self._rank_pids(run.run_id, sup.group.generation))
            )
        if code is None:
            return False
        self._ingest_and_watch(run, spec)
        self._end_attempt(run, sup, code, None)
        self._sup.pop(run.run_id, None)
        final = self.store.get_run(run.run_id)
        self._record(
            final,
            "RUN_FINISHED",
            per_step=False,
            state=final.state,
            reason=final.terminal_reason,
            last_step=final.last_step,
            exit_code=code,
        )
        return True

    def _finish(
        self, run: RunRecord, target: RunState, reason: TerminalReason | None, detail: str | None
    ) -> None:
        self._move(run, target, reason=reason, detail=detail)
        final = self.store.get_run(run.run_id)
        raise_fence(Path(run.root), run.run_id, final.generation)
        self._sup.pop(run.run_id, None)
        self._record(
            final,
            "RUN_FINISHED",
            per_step=False,
            state=final.state,
            reason=final.terminal_reason,
            last_step=final.last_step,
            detail=detail,
        )

    def _end_attempt(
        self, run: RunRecord, sup: Supervision, code: int | None, failure_class: str | None
    ) -> None:
        self.store.end_attempt(
            run.run_id,
            sup.group.generation,
            exit_code=code,
            failure_class=failure_class,
            detail={"log": str(sup.group.log_path)},
        )

    # -- recording ------------------------------------------------------------------------------

    def _rank_pids(self, run_id: str, generation: int) -> set[int]:
        return {
            int(e.attributes["pid"])
            for e in self.store.events(run_id, types=["WORKER_STARTED"])
            if e.generation == generation and "pid" in e.attributes
        }

    def _move(
        self,
        run: RunRecord,
        target: RunState,
        event_type: str | None = None,
        reason: TerminalReason | None = None,
        detail: str | None = None,
    ) -> None:
        result = advance(self.store, run.run_id, target, reason=reason, detail=detail)
        if result.outcome is Outcome.APPLIED and result.run is not None:
            self._record(
                result.run,
                "STATE_CHANGED",
                from_state=run.state,
                to_state=str(target),
                reason=str(reason) if reason else None,
                detail=detail,
            )
            if event_type:
                self._record(result.run, event_type)

    def _record(
        self, run: RunRecord, type_: str, op: str = "", per_step: bool = True, **attributes: object
    ) -> None:
        # The operation id: the same action in the same generation (at the same step, unless
        # per_step is off) is one event, however often a (restarted) controller repeats it.
        key = op or f"{attributes.get('from_state', '')}>{attributes.get('to_state', '')}"
        at = f"@{run.last_step}" if per_step else ""
        self.store.append_event(
            NewEvent(
                event_id=f"{run.run_id}:g{run.generation}:{type_}:{key}{at}",
                run_id=run.run_id,
                generation=run.generation,
                type=type_,
                step=run.last_step,
                time_unix_s=time.time(),
                attributes={k: v for k, v in attributes.items() if v is not None},
            ),
            fenced=False,
        )

    def _emit(self, run_id: str) -> None:
        if self.on_event is None:
            return
        for event in self.store.events(run_id, after_seq=self._seen_seq.get(run_id, 0)):
            self._seen_seq[run_id] = event.seq
            self.on_event(event)


def _last_launched(run: RunRecord) -> int:
    gens = launched_generations(Path(run.root), run.run_id)
    return gens[-1] if gens else run.generation


def _json(value: object) -> str:
    import json

    return json.dumps(value)
