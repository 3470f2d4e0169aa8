"""`Checkpointer`: the object a training script holds. Decides when to save, stages snapshots,
runs the commit protocol (commit.py) synchronously or in a bounded background backlog, applies
retention, collects residue, and restores.

Every rank constructs one and calls the same methods at the same step boundaries; decisions that
depend on a clock or on the backlog are agreed across ranks (max over ranks on a gloo group), so
ranks never disagree about whether a collective save happens.
"""

import hashlib
import queue
import secrets
import threading
import time
from typing import Any

import torch
import torch.distributed as dist

from runwright.ckpt import restore as restoring
from runwright.ckpt.catalog import scan
from runwright.ckpt.commit import CommitProbe, CommitStep, RunFacts, Snapshot, persist
from runwright.ckpt.errors import BackgroundSaveError
from runwright.ckpt.events import CheckpointEvent, CheckpointEventType, EventSink, LoggingSink
from runwright.ckpt.fence import Fence, LocalFence, PublishOutcome
from runwright.ckpt.gc import GcReport, collect_residue
from runwright.ckpt.interval import IntervalChoice, IntervalPolicy
from runwright.ckpt.manifest import HealthVerdict, checkpoint_id_for
from runwright.ckpt.records import DurabilityLag, SaveResult, SaveStatus
from runwright.ckpt.retention import RetentionEntry, delete_checkpoint, plan_retention
from runwright.ckpt.snapshot import SnapshotPool
from runwright.ckpt.state import TrainState, capture, data_cursor_of
from runwright.ckpt.storage import CheckpointStorage
from runwright.ckpt.verify import VerifyMode
from runwright.spec.policies import CheckpointSpec

_Job = tuple[Snapshot, float]


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
    ) -> None:
        self.policy = policy
        self.storage = CheckpointStorage(checkpoint_root)
        self.fence: Fence = fence if fence is not None else LocalFence(checkpoint_root)
        self.generation = self.fence.current_generation() if generation is None else generation
        self.events: EventSink = events if events is not None else LoggingSink()
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        # Two gloo groups: one for main-thread agreement, one owned by the persisting thread, so
        # background collectives never interleave with the trainer's or with each other.
        self._control_pg = dist.new_group(backend="gloo") if self.distributed else None
        self._persist_pg = dist.new_group(backend="gloo") if self.distributed else None
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
        self._nonce = self._broadcast(secrets.token_hex(8))
        self._allocated = 0
        latest = self.fence.latest()
        self._parent = latest.checkpoint_id if latest is not None else None
        self._committed_step = latest.step if latest is not None else None
        self._staged_step: int | None = None
        self.interval_policy = IntervalPolicy(
            policy.interval, assumed_stall_seconds=assumed_stall_seconds
        )
        self._pool = SnapshotPool(policy.max_inflight)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._inflight: dict[str, float] = {}
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._worker: threading.Thread | None = None
        self._gc_min_age_seconds = gc_min_age_seconds
        self._emit(CheckpointEventType.INTERVAL_CHOSEN, None, None, self.interval().model_dump())
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
        self._raise_background_error()
        if not self.policy.enabled:
            return None
        due = self.interval_policy.due(step) or (stopping and self.policy.save_on_stop)
        if self.policy.interval.policy != "steps":
            due = self._agree(due)
        return self.save(step, state, loss=loss, health=health) if due else None

    def save(
        self,
        step: int,
        state: TrainState,
        *,
        loss: float | None = None,
        health: HealthVerdict = HealthVerdict.UNKNOWN,
    ) -> SaveResult:
        """Save now. Sync mode returns once published; async mode once staged in host memory."""
        self._raise_background_error()
        started = time.perf_counter()
        if self.policy.mode == "sync":
            result = self._save_inline(step, state, loss, health, started)
        else:
            result = self._save_async(step, state, loss, health, started)
        self.interval_policy.mark_saved()
        if result.status != SaveStatus.SKIPPED:
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
        started = time.perf_counter()
        mode_verify: VerifyMode = verify or self.policy.verify_on_restore
        current = restoring.current_run(
            state,
            self.world_size,
            self.facts.parallel_layout,
            self.facts.tokenizer_hash,
            self.facts.data_manifest_id,
        )
        excluded: dict[str, restoring.Fallback] = {}
        emitted: set[str] = set()
        while True:
            chosen = None
            if self.rank == 0:
                try:
                    chosen = restoring.choose(
                        self.storage, self.fence, current, mode_verify, excluded
                    )
                except Exception as exc:
                    chosen = exc
            chosen = self._broadcast(chosen)
            if isinstance(chosen, Exception):
                raise chosen
            if chosen is None:
                return None
            if isinstance(chosen, list):
                raise restoring.no_usable(chosen)
            candidate, mode = chosen
            for fallback in excluded.values():
                if fallback.checkpoint_id not in emitted:
                    emitted.add(fallback.checkpoint_id)
                    self._emit_fallback(fallback)
            progress, rng_restored = restoring.load_into(
                state,
                self.storage,
                candidate.path,
                candidate.manifest,
                mode,
                self.rank,
                self._persist_pg,
            )
            manifest = candidate.manifest
            smoke = None
            if smoke_check is not None and manifest.loss_at_save is not None:
                smoke = restoring.smoke(
                    smoke_check, manifest.loss_at_save, smoke_relative_tolerance
                )
                if self._agree(not smoke.passed):
                    excluded_fallback = restoring.Fallback(
                        checkpoint_id=manifest.checkpoint_id,
                        step=manifest.step,
                        reason=f"smoke check: loss {smoke.observed_loss:.6g} after loading, "
                        f"{smoke.expected_loss:.6g} at save",
                    )
                    excluded[manifest.checkpoint_id] = excluded_fallback
                    continue
            break
        fallbacks = list(excluded.values())
        self._parent = manifest.checkpoint_id
        self._committed_step = manifest.step
        result = restoring.RestoreResult(
            checkpoint_id=manifest.checkpoint_id,
            step=int(progress["step"]),
            folder=candidate.folder,
            mode=mode,
            counters=dict(progress["counters"]),
            data_cursor=manifest.data_cursor,
            rng_restored=rng_restored,
            fallbacks=fallbacks,
            verify_mode=mode_verify,
            smoke=smoke,
            seconds=restoring.elapsed(started),
        )
        self._emit(
            CheckpointEventType.RESTORE_SUCCEEDED,
            manifest.step,
            manifest.checkpoint_id,
            {"mode": mode.value, "fallbacks": len(fallbacks), "seconds": result.seconds},
        )
        return result

    def wait(self) -> None:
        """Block until every queued async save is persisted; raise a background failure."""
        with self._cond:
            while self._inflight:
                self._cond.wait()
        self._raise_background_error()

    def durability_lag(self) -> DurabilityLag:
        """How far the newest durable checkpoint trails the newest staged one."""
        with self._cond:
            oldest = min(self._inflight.values(), default=None)
            inflight = len(self._inflight)
        staged, committed = self._staged_step, self._committed_step
        return DurabilityLag(
            staged_step=staged,
            committed_step=committed,
            lag_steps=(staged - (committed or 0)) if staged is not None else 0,
            inflight=inflight,
            oldest_uncommitted_seconds=0.0 if oldest is None else time.monotonic() - oldest,
        )

    def interval(self) -> IntervalChoice:
        """The interval in force and its inputs."""
        return self.interval_policy.choice()

    def collect_garbage(self, min_age_seconds: float | None = None) -> GcReport:
        """Remove staging residue of this run (rank 0 only; others get an empty report)."""
        if self.rank != 0:
            return GcReport()
        with self._cond:
            in_flight = frozenset(self._inflight)
        report = collect_residue(
            self.storage,
            current_generation=self.generation,
            min_age_seconds=self._gc_min_age_seconds
            if min_age_seconds is None
            else min_age_seconds,
            in_flight=in_flight,
            latest_step=latest.step if (latest := self.fence.latest()) is not None else None,
        )
        if report.removed:
            self._emit(CheckpointEventType.RESIDUE_COLLECTED, None, None, report.model_dump())
        return report

    def close(self) -> None:
        """Drain the backlog, stop the worker, raise any background failure."""
        try:
            self.wait()
        finally:
            if self._worker is not None:
                self._jobs.put(None)
                self._worker.join()
                self._worker = None

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
        self._emit(CheckpointEventType.CHECKPOINT_STAGED, step, snap.checkpoint_id, {})
        return self._persist(snap, started_perf=started)

    def _save_async(
        self,
        step: int,
        state: TrainState,
        loss: float | None,
        health: HealthVerdict,
        started: float,
    ) -> SaveResult:
        with self._cond:
            full = len(self._inflight) >= self.policy.max_inflight
        if self._agree(full):
            if self.policy.when_full == "skip":
                self._emit(
                    CheckpointEventType.CHECKPOINT_SKIPPED,
                    step,
                    None,
                    {"reason": f"async backlog full ({self.policy.max_inflight} in flight)"},
                )
                return SaveResult(step=step, status=SaveStatus.SKIPPED, reason="backlog full")
            if self.policy.when_full == "sync":
                self.wait()
                return self._save_inline(step, state, loss, health, started)
            with self._cond:
                while len(self._inflight) >= self.policy.max_inflight:
                    self._cond.wait()
            self._raise_background_error()
        self._reach(CommitStep.ALLOCATE)
        self._reach(CommitStep.STAGE)
        staged = self._pool.take(capture(state, step, self.rank))
        stall = time.perf_counter() - started
        snap = self._snapshot(step, staged, state, loss, health, stall)
        self._staged_step = step
        self._emit(CheckpointEventType.CHECKPOINT_STAGED, step, snap.checkpoint_id, {})
        with self._cond:
            self._inflight[snap.checkpoint_id] = time.monotonic()
        self._ensure_worker()
        self._jobs.put((snap, started))
        return SaveResult(
            checkpoint_id=snap.checkpoint_id,
            step=step,
            status=SaveStatus.QUEUED,
            stall_seconds=stall,
            timings_seconds={"stage": stall},
        )

    def _ensure_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="runwright-ckpt", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            snap, _ = job
            try:
                self._persist(snap, started_perf=None)
            except BaseException as exc:
                with self._cond:
                    self._error = exc
                self._emit(
                    CheckpointEventType.CHECKPOINT_FAILED,
                    snap.step,
                    snap.checkpoint_id,
                    {"error": f"{type(exc).__name__}: {exc}"},
                )
            finally:
                self._pool.give_back(snap.state_dict)
                with self._cond:
                    self._inflight.pop(snap.checkpoint_id, None)
                    self._cond.notify_all()

    def _persist(self, snap: Snapshot, started_perf: float | None) -> SaveResult:
        done = persist(
            snap,
            self.storage,
            self.fence,
            self.facts,
            process_group=self._persist_pg,
            probe=self._probe,
            thread_count=self._thread_count,
        )
        attributes = {"folder": done.folder, "bytes": done.total_bytes, **done.timings_seconds}
        if done.outcome == PublishOutcome.STALE_GENERATION:
            status = SaveStatus.REJECTED_STALE
            self._emit(
                CheckpointEventType.STALE_WRITE_REJECTED, snap.step, snap.checkpoint_id, attributes
            )
        else:
            status = SaveStatus.COMMITTED
            self._parent = snap.checkpoint_id
            self._committed_step = max(self._committed_step or 0, snap.step)
            self._emit(
                CheckpointEventType.CHECKPOINT_COMMITTED, snap.step, snap.checkpoint_id, attributes
            )
            if self.rank == 0:
                self._apply_retention()
        stall = time.perf_counter() - started_perf if started_perf is not None else 0.0
        return SaveResult(
            checkpoint_id=snap.checkpoint_id,
            step=snap.step,
            status=status,
            folder=done.folder,
            total_bytes=done.total_bytes,
            stall_seconds=stall or snap.timings_seconds.get("stage", 0.0),
            timings_seconds=done.timings_seconds,
        )

    def _apply_retention(self) -> None:
        committed, _ = scan(self.storage)
        latest = self.fence.latest()
        plan = plan_retention(
            [
                RetentionEntry(
                    checkpoint_id=c.record.checkpoint_id,
                    folder=c.folder,
                    step=c.record.step,
                    health=c.manifest.health,
                )
                for c in committed
            ],
            keep_last=self.policy.keep_last,
            keep_every_steps=self.policy.keep_every_steps,
            latest_checkpoint_id=latest.checkpoint_id if latest is not None else None,
        )
        for folder in plan.delete:
            freed = delete_checkpoint(self.storage, folder)
            self._emit(
                CheckpointEventType.CHECKPOINT_DELETED,
                None,
                None,
                {"folder": folder, "bytes": freed},
            )

    # helpers ---------------------------------------------------------------------------------
    def _reach(self, step: CommitStep) -> None:
        if self._probe is not None:
            self._probe.reached(step)

    def _raise_background_error(self) -> None:
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise BackgroundSaveError(
                f"an async checkpoint save failed in the background: {type(error).__name__}: "
                f"{error}. Fix the cause (disk space, permissions, storage reachability); the "
                "last committed checkpoint is unaffected."
            ) from error

    def _agree(self, flag: bool) -> bool:
        """True on every rank if `flag` is true on any rank."""
        if not self.distributed:
            return flag
        value = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self._control_pg)
        return bool(value.item())

    def _broadcast(self, value: Any) -> Any:
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self._control_pg)
        return box[0]

    def _emit_fallback(self, fallback: restoring.Fallback) -> None:
        self._emit(
            CheckpointEventType.RESTORE_FALLBACK,
            fallback.step,
            fallback.checkpoint_id,
            {"reason": fallback.reason},
        )

    def _emit(
        self,
        kind: CheckpointEventType,
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
