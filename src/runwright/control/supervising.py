"""How a controller supervises a run's worker group, from launch to exit.

A pass over a live run launches or adopts the current generation's group (launching.py), feeds
what its ranks report to the watchdog, the alerts and the replay check, moves the run between
RUNNING and CHECKPOINTING as saves start and end, and, once the group has exited, reads the
reason it stopped and hands it on: to the stops (stopping.py), a rollback or a recovery
(recovery.py), a pause (pause.py), or the run's success. A terminal run's group is wound down here
too: given its grace period, then killed, then its allocation released.

`GroupSupervising` is a base of the controller (controller.py): it keeps no state of its own
beyond what the controller holds, and knows nothing of submit, admission or placement.
"""

import functools
import time
from abc import ABC, abstractmethod
from pathlib import Path

from runwright.control.alerts import AlertEngine
from runwright.control.allocation import AllocationStep
from runwright.control.executors.protocol import Executor, GroupHandle
from runwright.control.ingest import Ingestor
from runwright.control.journal import Journal
from runwright.control.launching import GroupLauncher
from runwright.control.membership import RESIZE_REASON
from runwright.control.operator_step import OperatorStep
from runwright.control.pause import PAUSE_REASON, PauseStep
from runwright.control.recovery import RecoverySequence
from runwright.control.replay_check import ReplayVerifier
from runwright.control.resume import rollback_point
from runwright.control.runlog import RunLogs
from runwright.control.states import RunState, TerminalReason
from runwright.control.stopping import ENDINGS, GroupStops, note_loss
from runwright.control.supervision import Supervision
from runwright.control.watchdog import Watchdog
from runwright.control.withdrawal import WithdrawalWatch
from runwright.events import EventType
from runwright.protocol import ChannelMessage
from runwright.spec import JobSpec
from runwright.store import Outcome, RunRecord, Store

SAVE_ENDS = frozenset(
    {EventType.CHECKPOINT_COMMITTED, EventType.CHECKPOINT_FAILED, EventType.STALE_WRITE_REJECTED}
)
"""The events that end a staged save, whichever way it went."""


class GroupSupervising(ABC):
    """The controller's supervision of live and ending worker groups (module docstring)."""

    store: Store
    journal: Journal
    logs: RunLogs
    alerts: AlertEngine
    replays: ReplayVerifier
    recovery: RecoverySequence
    stops: GroupStops
    withdrawals: WithdrawalWatch
    pauses: PauseStep
    operator: OperatorStep
    launcher: GroupLauncher
    allocations: AllocationStep
    _sup: dict[str, Supervision]
    _ingest: dict[str, Ingestor]
    _hostname: str

    @abstractmethod
    def executor_of(self, run: RunRecord) -> Executor:
        """The executor that drives `run`."""

    # -- launch ---------------------------------------------------------------------------------

    def _launch(self, run: RunRecord, spec: JobSpec) -> Supervision | None:
        """Supervise the current generation's group, launched or adopted (launching.py); None
        while another controller's claimed launch is expected."""
        group = self.launcher.launch(run, spec)
        if group is None:
            return None
        sup = self._supervision(run, spec, group, start_step=run.last_step or 0)
        self._sup[run.run_id] = sup
        # Re-read the channel from the start so the new supervision sees every message of its
        # generation (ingestion is idempotent).
        self._ingest.pop(run.run_id, None)
        return sup

    def _supervision(
        self, run: RunRecord, spec: JobSpec, group: GroupHandle, start_step: int = 0
    ) -> Supervision:
        return Supervision(
            group=group,
            watchdog=Watchdog(
                spec.recovery,
                spec.resources.world_size,
                start_step=start_step,
                save_timeout_seconds=spec.checkpoint.save_timeout_seconds,
                total_steps=int(spec.plan.total_steps.value),
            ),
            unread=functools.partial(self._unread, run.run_id, group.generation),
        )

    # -- reports and the live group -----------------------------------------------------------

    def _unread(self, run_id: str, generation: int, rank: int) -> bool:
        """Whether the rank's channel file holds messages this controller has not read yet."""
        ingestor = self._ingest.get(run_id)
        if ingestor is None:
            return False
        return ingestor.reader.holds_unread(ingestor.paths.channel_file(generation, rank))

    def _ingest_and_watch(self, run: RunRecord, spec: JobSpec, until: float | None = None) -> None:
        """Ingest what the run's workers reported (past `until`, a monotonic time, the rest waits
        for the next pass; None reads it all) and feed the watchdog."""
        ingestor = self._ingest.setdefault(run.run_id, Ingestor(self.store, run))
        sup = self._sup.get(run.run_id)
        newest: list[ChannelMessage] = []
        losses = self.stops.history(run.run_id, spec)
        bitwise = spec.reproducibility.level == "bitwise"

        def observe(message: ChannelMessage, outcome: Outcome | None) -> None:
            if losses is not None:
                note_loss(losses, message)
            self.alerts.observe(run, spec, message)
            if bitwise and outcome in (Outcome.APPLIED, Outcome.ALREADY_APPLIED):
                self.replays.observe(run, spec.resources.world_size, message)
            if sup is None or message.generation < sup.group.generation:
                return
            sup.watchdog.beat(message.rank)
            if message.type == EventType.STEP_HEALTHY and message.step is not None:
                sup.stepped = True
                sup.watchdog.step(message.rank, message.step, message.time_unix_s)
                if not newest or message.step > (newest[0].step or 0):
                    newest[:] = [message]
            elif message.type == EventType.CHECKPOINT_STAGED and message.checkpoint_id:
                sup.saves_in_flight.add(message.checkpoint_id)
                sup.watchdog.saves_changed(True)
            elif message.type in SAVE_ENDS and message.checkpoint_id:
                sup.saves_in_flight.discard(message.checkpoint_id)
                sup.watchdog.saves_changed(bool(sup.saves_in_flight))
            elif message.type == EventType.STOP_ACKNOWLEDGED:
                # On a busy machine the launcher may take longer than a heartbeat timeout to
                # collect a group that stopped on request (a preempted run was recovered as hung).
                sup.watchdog.finishing(message.rank)
            elif message.type == EventType.WORKER_STARTED:
                sup.started_ranks.add(message.rank)
                # A pid names a process on the rank's own host only (a Slurm node elsewhere).
                here = message.attributes.get("host", self._hostname) == self._hostname
                if isinstance(message.attributes.get("pid"), int) and here:
                    sup.worker_pids.add(message.attributes["pid"])
                    sup.rank_pids[message.rank] = message.attributes["pid"]

        ingestor.poll(observe, until=until)
        # Whether the reader is at every file's end: a directory scan, done once if asked twice.
        read_all = functools.cache(lambda: ingestor.reader.unread_bytes() == 0)
        self.alerts.caught_up(run, read_all)
        if self.replays.pending(run) and read_all():
            # A verdict needs every report of the earlier generations (control/replay_check.py).
            self.replays.check(run)
        if newest:
            m = newest[0]
            self.recovery.note_progress(run, spec, m.generation, m.step or 0, m.time_unix_s)

    def _supervise(self, run: RunRecord, spec: JobSpec) -> None:
        sup = self._sup.get(run.run_id)
        if sup is None or sup.group.generation != run.generation:
            launched = self._launch(run, spec)
            if launched is None:
                return  # another controller's launch is expected: looked for again next pass
            sup = launched
            self._ingest_and_watch(run, spec)
        if run.state == RunState.STARTING and len(sup.started_ranks) >= spec.resources.world_size:
            self.launcher.record_placements(run, spec)
            self.journal.move(run, RunState.RUNNING)
            run = self.store.get_run(run.run_id)
        exit_code = self.executor_of(run).poll(sup.group)
        if exit_code is None:
            run = self._track_saves(run, sup)
            self._watch_live_group(run, spec, sup)
            return
        self._ingest_and_watch(run, spec)  # whatever the ranks wrote before exiting
        self._ingest[run.run_id].settle_with_fence()
        sup.saves_in_flight.clear()  # the group is gone: no save of it is in flight any more
        sup.watchdog.saves_changed(False)
        run = self._track_saves(self.store.get_run(run.run_id), sup)
        ack = self.logs.of(run.run_id).stop_acks.get(run.generation)
        reason = ack.attributes.get("reason") if ack else sup.stop_reason
        if reason in ENDINGS:
            sup.end_attempt(self.store, run.run_id, exit_code, None)
            self._sup.pop(run.run_id, None)
            self.stops.end(run, reason)
        elif (asked := self.operator.asked(run, reason)) is not None and not (
            ack is None and exit_code == 0
        ):
            # An operator's action (control/operator.py); a group that exits 0 without
            # acknowledging finished its last step first, and the run succeeds as usual.
            if self.operator.stopped(run, sup, exit_code, asked):
                self._sup.pop(run.run_id, None)
        elif reason == "rollback":
            point = rollback_point(self.store, run)
            if not point.removed:
                self.recovery.roll_back(run, sup, exit_code, point)
                self._sup.pop(run.run_id, None)
            elif self.pauses.paused(  # its last healthy point is gone: a person decides
                run, sup, exit_code, ack is not None, point.refusal(spec.checkpoint.keep_last)
            ):
                self._sup.pop(run.run_id, None)
        elif reason == RESIZE_REASON and not (ack is None and exit_code == 0):
            self.recovery.membership.regrow(run, spec, sup, exit_code)
            self._sup.pop(run.run_id, None)
        elif reason == PAUSE_REASON and not (ack is None and exit_code == 0):
            # (A group that exits 0 without acknowledging finished its last step first.)
            if self.pauses.paused(run, sup, exit_code, ack is not None):
                self._sup.pop(run.run_id, None)
        elif exit_code == 0 and reason != "preemption":
            sup.end_attempt(self.store, run.run_id, exit_code, None)
            self._sup.pop(run.run_id, None)
            if run.state == RunState.STARTING:
                self.journal.move(run, RunState.RUNNING)
                run = self.store.get_run(run.run_id)
            self.journal.finish(
                run,
                RunState.SUCCEEDED,
                TerminalReason.COMPLETED,
                f"the worker group finished at step {run.last_step}",
            )
        else:
            self.recovery.recover(run, spec, sup, exit_code, None)
            self._sup.pop(run.run_id, None)

    def _track_saves(self, run: RunRecord, sup: Supervision) -> RunRecord:
        """RUNNING <-> CHECKPOINTING as the group's saves start and end (ARCHITECTURE.md): a
        user sees that steps paused for a save, and nothing preempts a run mid-save. A save that
        staged and committed between two passes is never seen in flight, and needs no state."""
        if run.state == RunState.RUNNING and sup.saves_in_flight:
            target = RunState.CHECKPOINTING
        elif run.state == RunState.CHECKPOINTING and not sup.saves_in_flight:
            target = RunState.RUNNING
        else:
            return run
        self.journal.move(run, target)
        return self.store.get_run(run.run_id)

    def _watch_live_group(self, run: RunRecord, spec: JobSpec, sup: Supervision) -> None:
        self.stops.asked_elsewhere(run, spec, sup)
        if sup.stop_deadline is not None:
            if self.stops.grace_over(run, spec, sup):
                self.executor_of(run).stop(sup.group, 0.0, sorted(sup.worker_pids))
            return
        verdict = sup.watch()
        if verdict is not None:
            self.recovery.recover(run, spec, sup, None, verdict)
            self._sup.pop(run.run_id, None)
            return
        self.stops.check(run, spec, sup)
        self.recovery.membership.maybe_grow(run, spec, sup, self.executor_of(run))
        for firing in self.alerts.check(run, spec):
            if firing.action in ("stop", "rollback", PAUSE_REASON):
                self.stops.on_alert(run, spec, sup, firing.action)
        if self.withdrawals.check(run, spec):  # a dataset withdrawn, spec says stop
            self.stops.on_alert(run, spec, sup, "stop")
        if spec.recovery.warm_standby and sup.stepped and not sup.standby_asked:
            # Once the group trains: the standby's start competes with nothing of the launch.
            sup.standby_asked = True
            self.launcher.prepare_standby(run, spec)

    # -- ending ---------------------------------------------------------------------------------

    def _wind_down(self, run: RunRecord, spec: JobSpec) -> bool:
        """A terminal run (e.g. cancelled from another process) whose group may still be saving:
        give it the grace period, then kill it, then give its allocation back (a cancel while
        the request is still queued releases it at once). True once nothing of the run is
        left."""
        executor = self.executor_of(run)
        sup = self._sup.get(run.run_id)
        if sup is None:
            gens = executor.launched_generations(Path(run.root), run.run_id)
            group = executor.adopt(Path(run.root), run.run_id, gens[-1]) if gens else None
            if group is None or executor.poll(group) is not None:
                if not self.allocations.release(run, executor, f"the run is {run.state}"):
                    return False
                self.journal.finished(run)
                return True
            sup = self._sup[run.run_id] = self._supervision(run, spec, group)
        if sup.stop_deadline is None:
            sup.stop_by(spec.recovery.stop_grace_seconds)
        code = executor.poll(sup.group)
        if code is None and time.monotonic() > (sup.stop_deadline or 0):
            self.stops.grace_expired(run, spec, sup.group.generation, sup.stop_reason or "cancel")
            pids = sup.worker_pids | self._rank_pids(run.run_id, sup.group.generation)
            code = executor.stop(sup.group, 0.0, sorted(pids))
        if code is None:
            return False
        self._ingest_and_watch(run, spec)
        sup.end_attempt(self.store, run.run_id, code, None)
        self._sup.pop(run.run_id, None)
        if not self.allocations.release(run, executor, f"the run is {run.state}"):
            return False
        self.journal.finished(run, exit_code=code)
        return True

    def _rank_pids(self, run_id: str, generation: int) -> set[int]:
        return set(self.logs.of(run_id).rank_pids.get(generation, set()))
