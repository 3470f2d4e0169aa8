"""What a checkpointer does with a save that failed or overran (checkpointer.py's docstring).

A refused save is reported once (CHECKPOINT_FAILED, with the storage failure's path, cause and
errno) and then `policy.on_save_failure` decides: `stop` raises, `skip` goes on. An async save's
failure surfaces on the backlog's worker, so it is applied later, where the ranks meet
(`settle`). A persist past `policy.save_timeout_seconds` is reported once and then raised by
every later call (deadline.py): it is never skippable.
"""

from collections.abc import Callable
from typing import Any

from runwright.ckpt.backlog import Backlog
from runwright.ckpt.commit import Snapshot
from runwright.ckpt.deadline import timed_out
from runwright.ckpt.errors import BackgroundSaveError, CheckpointStorageError
from runwright.ckpt.ranks import Ranks
from runwright.ckpt.storage import CheckpointStorage
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec

Emit = Callable[[EventType, int | None, str | None, dict[str, Any]], None]
"""The checkpointer's event emitter: (type, step, checkpoint id, attributes)."""


class SaveFailures:
    """The failed and overdue saves of one checkpointer."""

    def __init__(
        self, policy: CheckpointSpec, storage: CheckpointStorage, ranks: Ranks, emit: Emit
    ) -> None:
        self.policy = policy
        self.storage = storage
        self.ranks = ranks
        self.emit = emit
        self.overdue: tuple[str, CheckpointStorageError] | None = None
        """(checkpoint id, its error) of a save that ran past save_timeout_seconds."""

    def is_overdue_error(self, exc: BaseException) -> bool:
        return self.overdue is not None and exc is self.overdue[1]

    def report(self, snap: Snapshot, exc: BaseException) -> None:
        """CHECKPOINT_FAILED, the alert: the error, and for a storage failure its path, cause,
        errno, bytes needed and free, and the policy that applies (`stop` for a timeout)."""
        overdue = self.overdue is not None and self.overdue[0] == snap.checkpoint_id
        if overdue and not self.is_overdue_error(exc):
            return  # the overdue persist ended at last: its timeout was the report
        attributes: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}"}
        if isinstance(exc, CheckpointStorageError):
            attributes |= exc.failure.model_dump(exclude={"remedy"})
            attributes["on_save_failure"] = "stop" if overdue else self.policy.on_save_failure
        attributes["mode"] = self.policy.mode
        self.emit(EventType.CHECKPOINT_FAILED, snap.step, snap.checkpoint_id, attributes)

    def overran(self, snap: Snapshot, seconds: float) -> CheckpointStorageError:
        """The error of a persist past save_timeout_seconds: reported once, raised from then on."""
        if self.overdue is None:
            path = self.storage.write_path(snap.step, snap.checkpoint_id)
            limit = self.policy.save_timeout_seconds
            error = timed_out(snap.step, snap.checkpoint_id, path, limit, seconds)
            self.overdue = (snap.checkpoint_id, error)
            self.report(snap, error)
        return self.overdue[1]

    def settle(self, backlog: Backlog, *, agree: bool) -> None:
        """Apply `on_save_failure` to a failed async save (its CHECKPOINT_FAILED is out already).

        `agree`: the ranks meet here but their workers may not all have finished the failed
        persist yet; if any rank has a failure, the others wait for their backlog (the persist
        was collective, so each gets its own copy), then all raise if any must. A persist past
        save_timeout_seconds on any rank raises its timeout on every rank: the persist is
        collective, so the others are in the same save (a few milliseconds less overdue)."""
        if self.overdue is not None:
            raise self.overdue[1]
        limit = self.policy.save_timeout_seconds
        error = backlog.take_error()
        late = backlog.overdue(limit)
        if agree and self.ranks.distributed:
            if not self.ranks.any(error is not None or late is not None):
                return  # one small all-reduce per save when nothing failed
            if self.ranks.any(late is not None):
                late = late or backlog.overdue(0.0)
                if late is not None:
                    raise self.overran(*late)
                raise BackgroundSaveError(
                    "an async checkpoint save ran past checkpoint.save_timeout_seconds on another "
                    "rank; that rank's error names the save. The last committed checkpoint is "
                    "unaffected."
                )
            if error is None:
                if late := backlog.wait_below(1, limit):
                    raise self.overran(*late)
                error = backlog.take_error()
            skip = (
                isinstance(error, CheckpointStorageError) and self.policy.on_save_failure == "skip"
            )
            if not self.ranks.any(error is not None and not skip):
                return
            if error is None or skip:
                raise BackgroundSaveError(
                    "an async checkpoint save failed on another rank; that rank's error names "
                    "the cause. The last committed checkpoint is unaffected."
                )
        elif late is not None:
            raise self.overran(*late)
        if error is None:
            return
        if isinstance(error, CheckpointStorageError):
            if self.policy.on_save_failure == "skip":
                return
            failure = error.failure
            raise CheckpointStorageError(
                failure.model_copy(update={"action": f"async {failure.action}"})
            ) from error
        raise BackgroundSaveError(
            f"an async checkpoint save failed in the background: {type(error).__name__}: "
            f"{error}. Fix the cause; the last committed checkpoint is unaffected."
        ) from error
