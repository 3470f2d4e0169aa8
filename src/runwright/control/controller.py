"""The controller: reconciles one run's desired state with what it observes.

Each pass reads the run record (the source of truth), ingests what the workers reported through
the file channel, looks at the worker group's process, and takes at most the next step of the
state machine. Every side effect carries an operation id (the event id `<run>:g<gen>:<op>`), so a
pass repeated after a controller restart is harmless.
"""

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from runwright.control.executor import LocalExecutor, WorkerGroup, run_dir
from runwright.control.states import TERMINAL, RunState, TerminalReason, advance
from runwright.errors import RunwrightError
from runwright.runtime.channel import HEARTBEAT, ChannelMessage, ChannelReader
from runwright.runtime.rank_manifest import build_rank_manifest
from runwright.spec import JobSpec, spec_from_mapping
from runwright.store import EventRecord, NewEvent, Outcome, RunRecord, Store

LOG_TAIL_BYTES = 4000


def new_run_id(spec: JobSpec) -> str:
    return f"{spec.name[:40]}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


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
        self._groups: dict[str, WorkerGroup] = {}
        self._readers: dict[str, ChannelReader] = {}
        self._seen_seq: dict[str, int] = {}
        self._last_step: dict[str, int] = {}

    # -- submit ---------------------------------------------------------------------------------

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

    # -- the loop -------------------------------------------------------------------------------

    def drive(self, run_id: str) -> RunRecord:
        """Reconcile until the run is terminal. Ctrl-C asks for a cancel."""
        try:
            while not self.reconcile(run_id):
                time.sleep(self.poll_seconds)
        except KeyboardInterrupt:
            self.cancel(run_id, "interrupted by the user (Ctrl-C)")
        self._emit(run_id)
        return self.store.get_run(run_id)

    def reconcile(self, run_id: str) -> bool:
        """One pass; returns True once the run is terminal."""
        run = self.store.get_run(run_id)
        state = RunState(run.state)
        if state in TERMINAL:
            return True
        spec = spec_from_mapping(run.spec, f"run {run_id}")
        if state is RunState.CREATED:
            self._move(run, RunState.QUEUED, "JOB_ACCEPTED")
        elif state is RunState.QUEUED:
            self._move(run, RunState.ALLOCATING)
        elif state is RunState.ALLOCATING:
            self._allocate(run, spec)
        elif state in (RunState.STARTING, RunState.RUNNING, RunState.CHECKPOINTING):
            self._supervise(run, spec)
        elif state is RunState.RECOVERING:
            raise RunwrightError(
                f"run {run_id} is RECOVERING; restarting worker groups needs the recovery "
                "controller"
            )
        self._emit(run_id)
        return RunState(self.store.get_run(run_id).state) in TERMINAL

    def cancel(self, run_id: str, why: str) -> RunRecord:
        """Record the intent first (bumping the generation fences the workers), then stop."""
        run = self.store.get_run(run_id)
        result = advance(
            self.store, run_id, RunState.CANCELLED, reason=TerminalReason.USER_CANCELLED, detail=why
        )
        if result.outcome is Outcome.APPLIED:
            self._record(
                run,
                "STATE_CHANGED",
                from_state=run.state,
                to_state="CANCELLED",
                reason="USER_CANCELLED",
                detail=why,
            )
        group = self._groups.pop(run_id, None)
        if group is not None:
            spec = spec_from_mapping(run.spec)
            code = group.stop(spec.recovery.stop_grace_seconds)
            self.store.end_attempt(
                run_id, group.generation, exit_code=code, detail={"stopped_by": "cancel"}
            )
        final = self.store.get_run(run_id)
        self._record(final, "RUN_FINISHED", state=final.state, reason=final.terminal_reason)
        return final

    # -- steps ----------------------------------------------------------------------------------

    def _allocate(self, run: RunRecord, spec: JobSpec) -> None:
        res = spec.resources
        hosts = self.executor.hosts(res.nodes)
        plan = spec.plan
        manifest = build_rank_manifest(
            nodes=res.nodes,
            devices_per_node=res.devices_per_node,
            dp=int(plan.dp.value or 1),
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
        started = advance(self.store, run.run_id, RunState.STARTING)
        if started.outcome is not Outcome.APPLIED or started.run is None:
            return
        self._record(run, "STATE_CHANGED", from_state=run.state, to_state="STARTING")
        generation = started.run.generation
        group = self.executor.launch(
            spec=spec,
            run_id=run.run_id,
            generation=generation,
            root=Path(run.root),
            workdir=Path(run.workdir),
            rank_manifest=manifest,
        )
        self._groups[run.run_id] = group
        self.store.start_attempt(run.run_id, generation, res.world_size)
        self._record(
            started.run,
            "WORKER_GROUP_LAUNCHED",
            pid=group.process.pid,
            world_size=res.world_size,
            log=str(group.log_path),
        )

    def _supervise(self, run: RunRecord, spec: JobSpec) -> None:
        group = self._groups.get(run.run_id)
        if group is None or group.generation != run.generation:
            raise RunwrightError(
                f"run {run.run_id} is {run.state} at generation {run.generation} but this "
                "controller holds no worker group for it; adopting live workers after a "
                "controller restart needs the recovery controller"
            )
        self._ingest(run)
        exit_code = group.poll()
        run = self.store.get_run(run.run_id)
        if run.state == RunState.STARTING and self._all_started(run, spec):
            self._move(run, RunState.RUNNING)
            run = self.store.get_run(run.run_id)
        if exit_code is None:
            return
        self._ingest(run)  # whatever the ranks wrote before exiting
        self._groups.pop(run.run_id, None)
        detail = {"exit_code": exit_code, "log_tail": _tail(group.log_path)}
        if exit_code == 0:
            if run.state == RunState.STARTING:
                self._move(run, RunState.RUNNING)
                run = self.store.get_run(run.run_id)
            self.store.end_attempt(run.run_id, group.generation, exit_code=0)
            self._move(run, RunState.SUCCEEDED, reason=TerminalReason.COMPLETED)
        else:
            self.store.end_attempt(run.run_id, group.generation, exit_code=exit_code, detail=detail)
            self._record(run, "WORKER_GROUP_EXITED", **detail)
            self._move(
                run,
                RunState.FAILED,
                reason=TerminalReason.FAILED_RECOVERABLE,
                detail=f"worker group exited with code {exit_code}",
            )
        final = self.store.get_run(run.run_id)
        self._record(
            final,
            "RUN_FINISHED",
            state=final.state,
            reason=final.terminal_reason,
            exit_code=exit_code,
            last_step=final.last_step,
        )

    def _all_started(self, run: RunRecord, spec: JobSpec) -> bool:
        started = self.store.events(run.run_id, types=["WORKER_STARTED"])
        ranks = {e.attributes.get("rank") for e in started if e.generation == run.generation}
        return len(ranks) >= spec.resources.world_size

    def _ingest(self, run: RunRecord) -> None:
        reader = self._readers.setdefault(
            run.run_id, ChannelReader(run_dir(Path(run.root), run.run_id) / "channel")
        )
        newest_beat: dict[int, float] = {}
        for message in reader.poll():
            if message.type == HEARTBEAT:
                newest_beat[message.generation] = max(
                    newest_beat.get(message.generation, 0.0), message.time_unix_s
                )
                continue
            self._ingest_event(run, message)
        for generation, beat in newest_beat.items():
            self.store.fenced_update(run.run_id, generation, last_heartbeat_unix_s=beat)

    def _ingest_event(self, run: RunRecord, message: ChannelMessage) -> None:
        event = NewEvent(
            event_id=f"{run.run_id}:{message.event_id}",
            run_id=run.run_id,
            generation=message.generation,
            type=message.type,
            step=message.step,
            world_size=message.world_size,
            checkpoint_id=message.checkpoint_id,
            time_unix_s=message.time_unix_s,
            attributes={**message.attributes, "rank": message.rank},
        )
        outcome = self.store.append_event(event, fenced=True)
        if (
            outcome is Outcome.APPLIED
            and message.type == "STEP_HEALTHY"
            and message.step is not None
            and message.step > self._last_step.get(run.run_id, -1)
        ):
            self._last_step[run.run_id] = message.step
            self.store.fenced_update(run.run_id, message.generation, last_step=message.step)

    # -- recording ------------------------------------------------------------------------------

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

    def _record(self, run: RunRecord, type_: str, **attributes: object) -> None:
        # The operation id: the same action in the same generation at the same step is one event.
        suffix = (
            f"{attributes.get('from_state', '')}>{attributes.get('to_state', '')}@{run.last_step}"
        )
        self.store.append_event(
            NewEvent(
                event_id=f"{run.run_id}:g{run.generation}:{type_}:{suffix}",
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


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-LOG_TAIL_BYTES:].decode("utf-8", errors="replace")
