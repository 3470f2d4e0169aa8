"""Errors of the checkpoint package; each message says what to change.

Expected outcomes (a stale publish, a skipped save, a fallback during restore) are values, not
exceptions: see `PublishOutcome`, `SaveOutcome` and `RestoreResult`.
"""

from runwright.ckpt.records import StorageFailure
from runwright.errors import RunwrightError


class CheckpointError(RunwrightError):
    """A checkpoint could not be written, read or published."""


class CheckpointIncompleteError(CheckpointError):
    """Step 4 of the commit protocol failed: an expected shard or logical key is missing, or a
    shard's size differs from what its writer recorded. Nothing was published."""


class CheckpointCorruptError(CheckpointError):
    """A committed checkpoint failed verification (missing file, wrong size, wrong checksum)."""


class IncompatibleCheckpointError(CheckpointError):
    """The newest committed checkpoint cannot be restored into the current run; the message
    names every mismatch (tokenizer, data manifest, model schema)."""


class NoUsableCheckpointError(CheckpointError):
    """Committed checkpoints exist but none verified; the message lists each one and why."""


class BackgroundSaveError(CheckpointError):
    """An asynchronous save failed in the background for a reason other than storage (storage
    failures are `CheckpointStorageError`); raised at the next Checkpointer call so a failure is
    never swallowed."""


class CheckpointStorageError(CheckpointError):
    """A checkpoint write failed on storage: a full volume, a permission, an unreachable store.

    `failure` holds the figures (path, cause, errno, bytes needed and free); the message names
    the path, the cause and what to free or fix. The control plane classifies this name (and
    `No space left`) as a `storage` failure. Raised by a save under `on_save_failure: stop`, by
    the fence's pointer and generation writes, and by a start that cannot advance the generation.
    """

    def __init__(self, failure: StorageFailure) -> None:
        super().__init__(failure)
        self.failure = failure

    def __str__(self) -> str:
        return self.failure.message()


class CheckpointRootError(CheckpointError):
    """A checkpoint root cannot be opened: its latest pointer or generation file is unreadable or
    corrupt, or the folder cannot be listed. Restore cannot get past it; the message names the
    path and the fix."""
