"""A save's steps past staging, as the checkpointer runs them (checkpointer.py).

The commit protocol (commit.py) with its outcome reported by rank 0 the moment the publish is
decided, before any rank could be lost, and retention once a save committed. Both report through
the checkpointer's emitter (save_failures.Emit).
"""

from collections.abc import Callable

from runwright.ckpt.commit import CommitProbe, PersistResult, RunFacts, Snapshot, persist
from runwright.ckpt.fence import Fence, PublishOutcome
from runwright.ckpt.ranks import Ranks
from runwright.ckpt.retention import NotDeleted, apply_retention
from runwright.ckpt.save_failures import Emit
from runwright.ckpt.storage import CheckpointStorage
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec


def persist_reported(
    snap: Snapshot,
    storage: CheckpointStorage,
    fence: Fence,
    facts: RunFacts,
    ranks: Ranks,
    *,
    probe: CommitProbe | None,
    thread_count: int,
    stall_now: Callable[[], float],
    emit: Emit,
) -> PersistResult:
    """Persist and publish `snap`; CHECKPOINT_COMMITTED (or STALE_WRITE_REJECTED) with the
    timings, folder, bytes and the step's stall so far (`stall_now()`)."""

    def report(decided: PersistResult) -> None:
        attributes = {
            **decided.timings_seconds,
            "folder": decided.folder,
            "bytes": decided.total_bytes,
            "manifest_sha256": decided.manifest_sha256,
            "stall_seconds": stall_now(),
            "persist_seconds": decided.timings_seconds["persist"],
        }
        stale = decided.outcome == PublishOutcome.STALE_GENERATION
        kind = EventType.STALE_WRITE_REJECTED if stale else EventType.CHECKPOINT_COMMITTED
        emit(kind, snap.step, snap.checkpoint_id, attributes)

    return persist(
        snap,
        storage,
        fence,
        facts,
        process_group=ranks.persist_group,
        probe=probe,
        thread_count=thread_count,
        on_outcome=report,
    )


def retain(
    storage: CheckpointStorage,
    fence: Fence,
    policy: CheckpointSpec,
    emit: Emit,
    known_good_step: int | None = None,
) -> None:
    """Apply the retention policy (rank 0): CHECKPOINT_DELETED for each checkpoint deleted,
    RETENTION_FAILED for each one storage refused to delete (it is left for the next pass)."""
    for done in apply_retention(
        storage,
        fence,
        keep_last=policy.keep_last,
        keep_every_steps=policy.keep_every_steps,
        known_good_step=known_good_step,
    ):
        refused = isinstance(done, NotDeleted)
        kind = EventType.RETENTION_FAILED if refused else EventType.CHECKPOINT_DELETED
        emit(kind, None, None, done.model_dump())
