"""`Checkpointer`: the object a training script holds. Decides when to save, stages snapshots,
runs the commit protocol (commit.py) inline or through the async backlog (backlog.py), applies
retention, collects residue, and restores.

Every rank constructs one and calls the same methods at the same step boundaries; decisions that
depend on a clock or on the backlog are agreed across ranks (max over ranks on a gloo group), so
ranks never disagree about whether a collective save happens.

A save that storage refuses (a full volume, permissions) is a `CheckpointStorageError`, identical
on every rank (commit.py), and `policy.on_save_failure` decides what follows: `stop` raises it,
`skip` records CHECKPOINT_FAILED and returns a FAILED result. An async save's failure is applied
at the next save call, after the ranks agree that one happened (a rank whose worker has not yet
seen it waits for its own copy), or at `wait()`/`close()`, once every backlog is drained; a
single process also applies it at every `maybe_save`. A persist that runs past
`policy.save_timeout_seconds` is not skippable: it raises whatever the policy says, and so does
every later call (deadline.py).
"""

import hashlib
import secrets
import time
from typing import Any

from runwright.ckpt import restore as restoring
from runwright.ckpt.backlog import Backlog
from runwright.ckpt.commit import (
    CommitProbe,
    CommitStep,
    RunFacts,
    Snapshot,
)
from runwright.ckpt.deadline import call_within
from runwright.ckpt.errors import CheckpointError, CheckpointStorageError
from runwright.ckpt.events import CheckpointEvent, EventSink, LoggingSink
from runwright.ckpt.fence import Fence, PublishOutcome, open_fence
from runwright.ckpt.gc import GcReport, collect_residue
from runwright.ckpt.interval import IntervalChoice, IntervalPolicy
from runwright.ckpt.manifest import HealthVerdict, ProbeRecord, checkpoint_id_for
from runwright.ckpt.probe import DEFAULT_TOLERANCE, RestoreProbe, validated_figures
from runwright.ckpt.ranks import Ranks
from runwright.ckpt.records import DurabilityLag, SaveResult, SaveStatus
from runwright.ckpt.save_failures import SaveFailures
from runwright.ckpt.save_steps import persist_reported, retain
from runwright.ckpt.snapshot import SnapshotPool
from runwright.ckpt.state import TrainState, capture, data_cursor_of
from runwright.ckpt.storage import CheckpointStorage
from runwright.ckpt.suspect import mark_suspect
from runwright.ckpt.verify import VerifyMode
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec


class Checkpointer:
    """Fenced, verified checkpoints of one run (see docs/ckpt.md for a walk-through)."""

    def __init__(
        self,
        checkpoint_root: str,
        *,
        policy: CheckpointSpec,
        fence: Fence | None = None,
        generation: int | None = None,
        events: EventSink | None = None,
        spec_hash: str | None = None,
        data_manifest_id: str | None = None,
        tokenizer_hash: str | None = None,
        parallel_layout: dict[str, int] | None = None,
        thread_count: int = 1,
        probe: CommitProbe | None = None,
        assumed_stall_seconds: float = 10.0,
        gc_min_age_seconds: float = 3600.0,
        resume_from: str | None = None,
        restore_at_most_step: int | None = None,
        restore_probe: RestoreProbe | None = None,
        restore_probe_tolerance: float = DEFAULT_TOLERANCE,
    ) -> None:
        """`resume_from`: another run's checkpoint root to restore from while this one holds no
        committed checkpoint (`checkpoint.resume_from`); it is only read.
        `restore_at_most_step`: restore no checkpoint newer than this step (the controller's
        rollback to before a bad step).
        `restore_probe`: measured at every save into the manifest and again after every load,
        before the first step; a restore whose reading differs by more than
        `restore_probe_tolerance` falls back to the next older checkpoint (probe.py)."""
        self.policy = policy
        self.resume_from = resume_from
        self.restore_at_most_step = restore_at_most_step
        self.restore_probe = restore_probe
        self.restore_probe_tolerance = restore_probe_tolerance
        self._reading: ProbeRecord | None = None
        self.storage = CheckpointStorage(checkpoint_root)
        self.fence: Fence = fence if fence is not None else open_fence(checkpoint_root)
        self.generation = self.fence.current_generation() if generation is None else generation
        self.events: EventSink = events if events is not None else LoggingSink()
        self.last_state: TrainState | None = None
        """The state last saved or restored: what the run holds (its close digests it)."""
        self.known_good_step: int | None = None
        """The step of the last passing corruption check (runtime/integrity.py): retention keeps
        the newest checkpoint at or before it, the rollback target should a later check fail."""
        self._ranks = Ranks()
        self.distributed = self._ranks.distributed
        self.rank = self._ranks.rank
        self.world_size = self._ranks.world_size
        self.facts = RunFacts(
            world_size=self.world_size,
            rank=self.rank,
            parallel_layout=dict(parallel_layout or {"dp": self.world_size}),
            spec_hash=spec_hash,
            data_manifest_id=data_manifest_id,
            tokenizer_hash=tokenizer_hash,
        )
        self._thread_count = thread_count
        self._probe = probe
        self._nonce = self._ranks.from_rank0(secrets.token_hex(8))
        self._allocated = 0
        latest = self.fence.latest()
        self._parent = latest.checkpoint_id if latest is not None else None
        self._committed_step = latest.step if latest is not None else None
        self._staged_step: int | None = None
        self.interval_policy = IntervalPolicy(
            policy.interval, assumed_stall_seconds=assumed_stall_seconds
        )
        self._pool = SnapshotPool(policy.max_inflight)
        self._failures = SaveFailures(policy, self.storage, self._ranks, self._emit)
        self._backlog = Backlog(
            persist=lambda snap: self._persist(snap, started_perf=None),
            on_failure=self._failures.report,
            release=lambda snap: self._pool.give_back(snap.state_dict),
        )
        self._gc_min_age_seconds = gc_min_age_seconds
        self._emit(EventType.INTERVAL_CHOSEN, None, None, self.interval().model_dump())
        if self.rank == 0:
            self.collect_garbage()

    # public API ------------------------------------------------------------------------------
    def maybe_save(
        self,
        step: int,
        state: TrainState,
        *,
        loss: float | None = None,
        health: HealthVerdict = HealthVerdict.UNKNOWN,
        stopping: bool = False,
    ) -> SaveResult | None:
        """Save if the interval policy says one is due (or `stopping` and save_on_stop)."""
        if not self.distributed:
            # one process needs no agreement, so a background failure surfaces at once; ranks
            # settle it in save(), where they all meet
            self._failures.settle(self._backlog, agree=False)
        if not self.policy.enabled:
            return None
        due = self.interval_policy.due(step) or (stopping and self.policy.save_on_stop)
        if self.policy.interval.policy != "steps":
            due = self._ranks.any(due)
        return self.save(step, state, loss=loss, health=health) if due else None

    def save(
        self,
        step: int,
        state: TrainState,
        *,
        loss: float | None = None,
        health: HealthVerdict = HealthVerdict.UNKNOWN,
    ) -> SaveResult:
        """Save now. Sync mode returns once published; async mode once staged in host memory.
        A save storage refuses raises `CheckpointStorageError` (`on_save_failure: stop`) or
        returns a FAILED result (`skip`); so does an earlier async save's failure."""
        self._failures.settle(self._backlog, agree=True)
        self.last_state = state
        started = time.perf_counter()
        # The probe reads the state this save captures (every rank, at this boundary).
        probe = self.restore_probe
        self._reading = probe.measure().record() if probe is not None else None
        if self.policy.mode == "sync":
            result = self._save_inline(step, state, loss, health, started)
        else:
            result = self._save_async(step, state, loss, health, started)
        # a failed save counts as the interval's attempt: retrying at every step would rewrite
        # the same doomed bytes until the volume has room again
        self.interval_policy.mark_saved()
        if result.status not in (SaveStatus.SKIPPED, SaveStatus.FAILED):
            self.interval_policy.observe_stall(result.stall_seconds)
        return result

    def restore(
        self,
        state: TrainState,
        *,
        smoke_check: Any = None,
        smoke_relative_tolerance: float = 1e-3,
        verify: VerifyMode | None = None,
    ) -> restoring.RestoreResult | None:
        """Load the newest committed checkpoint that verifies into `state`; None if the run has
        none. `smoke_check()` -> loss runs one forward step after loading."""
        self.wait()
        current = restoring.current_run(
            state,
            self.world_size,
            self.facts.parallel_layout,
            self.facts.tokenizer_hash,
            self.facts.data_manifest_id,
        )
        self.last_state = state

        def newest(
            root: CheckpointStorage, fence: Fence, **at_most: Any
        ) -> restoring.RestoreResult | None:
            return restoring.restore_newest(
                state,
                root,
                fence,
                current,
                self._ranks,
                verify=verify or self.policy.verify_on_restore,
                smoke_check=smoke_check,
                smoke_relative_tolerance=smoke_relative_tolerance,
                probe=self.restore_probe,
                probe_tolerance=self.restore_probe_tolerance,
                on_fallback=self._emit_fallback,
                **at_most,
            )

        result = newest(self.storage, self.fence, at_most_step=self.restore_at_most_step)
        resumed_from = None
        if result is None and self.resume_from is not None:
            # Nothing of our own yet: start where the other run got to. Its root is only read
            # (its fence's pointer, its manifests and shards); our saves go to our own root.
            result = newest(CheckpointStorage(self.resume_from), open_fence(self.resume_from))
            if result is None:
                raise CheckpointError(
                    f"checkpoint.resume_from: {self.resume_from} holds no committed checkpoint; "
                    "name a run that saved one, or leave resume_from out to start fresh"
                )
            resumed_from = self.resume_from
        if result is None:
            # A fresh start is a restore too: recovery and the report read the step each
            # generation starts from, and 0 is an answer.
            self._emit(EventType.RESTORED, 0, None, {"mode": None, "fresh": True})
            return None
        self._parent = result.checkpoint_id
        self._committed_step = result.step
        if result.probe is not None:
            self._emit(EventType.RESTORE_VALIDATED, result.step, result.checkpoint_id,
                       validated_figures(result.probe))  # fmt: skip
        self._emit(
            EventType.RESTORED,
            result.step,
            result.checkpoint_id,
            {
                "mode": result.mode.value,
                "fallbacks": len(result.fallbacks),
                "seconds": result.seconds,
                **({"resumed_from": resumed_from} if resumed_from else {}),
            },
        )
        return result

    def wait(self) -> None:
        """Block until every queued async save is persisted; apply `on_save_failure` to a
        background failure (other background failures raise `BackgroundSaveError`), or raise
        the timeout of a persist that runs past `save_timeout_seconds`."""
        if self._failures.overdue is None and (
            late := self._backlog.wait_below(1, self.policy.save_timeout_seconds)
        ):
            raise self._failures.overran(*late)
        self._failures.settle(self._backlog, agree=False)

    def mark_suspect(self, after_step: int, reason: str) -> list[str]:
        """After a failed corruption check: let queued saves finish, then (rank 0) mark every
        committed checkpoint newer than `after_step` (the last passing check) suspect
        (ckpt/suspect.py); returns the folders marked."""
        self.wait()
        if self.rank != 0:
            return []
        return mark_suspect(self.storage, after_step, reason)

    def durability_lag(self) -> DurabilityLag:
        """How far the newest durable checkpoint trails the newest staged one."""
        staged, committed = self._staged_step, self._committed_step
        return DurabilityLag(
            staged_step=staged,
            committed_step=committed,
            lag_steps=(staged - (committed or 0)) if staged is not None else 0,
            inflight=len(self._backlog),
            oldest_uncommitted_seconds=self._backlog.oldest_age_seconds(),
        )

    def interval(self) -> IntervalChoice:
        """The interval in force and its inputs."""
        return self.interval_policy.choice()

    def collect_garbage(self, min_age_seconds: float | None = None) -> GcReport:
        """Remove staging residue of this run (rank 0 only; others get an empty report)."""
        if self.rank != 0:
            return GcReport()
        report = collect_residue(
            self.storage,
            current_generation=self.generation,
            min_age_seconds=self._gc_min_age_seconds
            if min_age_seconds is None
            else min_age_seconds,
            in_flight=self._backlog.in_flight(),
            latest_step=latest.step if (latest := self.fence.latest()) is not None else None,
        )
        if report.removed:
            self._emit(EventType.RESIDUE_COLLECTED, None, None, report.model_dump())
        return report

    def close(self) -> None:
        """Drain the backlog, stop the worker, raise any background failure."""
        try:
            self.wait()
        finally:
            self._backlog.close(join=self._failures.overdue is None)

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # saving ----------------------------------------------------------------------------------
    def _snapshot(
        self,
        step: int,
        sd: dict[str, Any],
        state: TrainState,
        loss: float | None,
        health: HealthVerdict,
        stage_seconds: float,
    ) -> Snapshot:
        self._allocated += 1
        token = hashlib.sha256(f"{self._nonce}:{step}:{self._allocated}".encode()).hexdigest()
        checkpoint_id = checkpoint_id_for(self.generation, token)
        return Snapshot(
            checkpoint_id=checkpoint_id,
            step=step,
            generation=self.generation,
            state_dict=sd,
            staged_unix_seconds=time.time(),
            parent_checkpoint_id=self._parent,
            data_cursor=data_cursor_of(sd, self.rank) if self.rank == 0 else None,
            counters=dict(state.counters),
            loss=loss,
            health=health,
            probe=self._reading,
            timings_seconds={"stage": stage_seconds},
        )

    def _save_inline(
        self,
        step: int,
        state: TrainState,
        loss: float | None,
        health: HealthVerdict,
        started: float,
    ) -> SaveResult:
        self._reach(CommitStep.ALLOCATE)
        self._reach(CommitStep.STAGE)
        snap = self._snapshot(step, capture(state, step, self.rank), state, loss, health, 0.0)
        self._staged_step = step
        self._emit(EventType.CHECKPOINT_STAGED, step, snap.checkpoint_id, {})
        try:
            return call_within(
                lambda: self._persist(snap, started_perf=started),
                self.policy.save_timeout_seconds,
                lambda seconds: self._failures.overran(snap, seconds),
            )
        except CheckpointStorageError as exc:
            if self._failures.is_overdue_error(exc):
                raise
            # identical on every rank (commit.py), so every rank takes the same branch here
            self._failures.report(snap, exc)
            if self.policy.on_save_failure == "stop":
                raise
            return SaveResult(
                checkpoint_id=snap.checkpoint_id,
                step=step,
                status=SaveStatus.FAILED,
                stall_seconds=time.perf_counter() - started,
                reason=str(exc),
                failure=exc.failure,
            )

    def _save_async(
        self,
        step: int,
        state: TrainState,
        loss: float | None,
        health: HealthVerdict,
        started: float,
    ) -> SaveResult:
        full = len(self._backlog) >= self.policy.max_inflight
        if self._ranks.any(full):
            if self.policy.when_full == "skip":
                self._emit(
                    EventType.CHECKPOINT_SKIPPED,
                    step,
                    None,
                    {"reason": f"async backlog full ({self.policy.max_inflight} in flight)"},
                )
                return SaveResult(step=step, status=SaveStatus.SKIPPED, reason="backlog full")
            if self.policy.when_full == "sync":
                self.wait()
                return self._save_inline(step, state, loss, health, started)
            late = self._backlog.wait_below(
                self.policy.max_inflight, self.policy.save_timeout_seconds
            )
            if late is not None:
                raise self._failures.overran(*late)
            # the oldest persist finished on every rank (persists are collective and in order),
            # so every rank sees the same outcome without agreeing
            self._failures.settle(self._backlog, agree=False)
        self._reach(CommitStep.ALLOCATE)
        self._reach(CommitStep.STAGE)
        staged = self._pool.take(capture(state, step, self.rank))
        stall = time.perf_counter() - started
        snap = self._snapshot(step, staged, state, loss, health, stall)
        self._staged_step = step
        self._emit(EventType.CHECKPOINT_STAGED, step, snap.checkpoint_id, {})
        self._backlog.submit(snap)
        return SaveResult(
            checkpoint_id=snap.checkpoint_id,
            step=step,
            status=SaveStatus.QUEUED,
            stall_seconds=stall,
            timings_seconds={"stage": stall},
        )

    def _persist(self, snap: Snapshot, started_perf: float | None) -> SaveResult:
        """Run the commit protocol; `started_perf` is when an inline save's call began (None on
        the backlog's worker, where the step was blocked only while staging)."""
        stage_seconds = snap.timings_seconds.get("stage", 0.0)

        def stall_now() -> float:
            return time.perf_counter() - started_perf if started_perf is not None else stage_seconds

        done = persist_reported(
            snap,
            self.storage,
            self.fence,
            self.facts,
            self._ranks,
            probe=self._probe,
            thread_count=self._thread_count,
            stall_now=stall_now,
            emit=self._emit,
        )
        if done.outcome == PublishOutcome.STALE_GENERATION:
            status = SaveStatus.REJECTED_STALE
        else:
            status = SaveStatus.COMMITTED
            self._parent = snap.checkpoint_id
            self._committed_step = max(self._committed_step or 0, snap.step)
            if self.rank == 0:
                retain(self.storage, self.fence, self.policy, self._emit, self.known_good_step)
        # an inline save also blocked the step while retention deleted older checkpoints
        stall = stall_now()
        return SaveResult(
            checkpoint_id=snap.checkpoint_id,
            step=snap.step,
            status=status,
            folder=done.folder,
            total_bytes=done.total_bytes,
            stall_seconds=stall,
            timings_seconds=done.timings_seconds,
        )

    # helpers ---------------------------------------------------------------------------------
    def _reach(self, step: CommitStep) -> None:
        if self._probe is not None:
            self._probe.reached(step)

    def _emit_fallback(self, fallback: restoring.Fallback) -> None:
        self._emit(
            EventType.RESTORE_FALLBACK,
            fallback.step,
            fallback.checkpoint_id,
            {"reason": fallback.reason},
        )

    def _emit(
        self,
        kind: EventType,
        step: int | None,
        checkpoint_id: str | None,
        attributes: dict[str, Any],
    ) -> None:
        if self.rank != 0:
            return
        self.events.emit(
            CheckpointEvent(
                type=kind,
                generation=self.generation,
                step=step,
                checkpoint_id=checkpoint_id,
                attributes=attributes,
            )
        )
