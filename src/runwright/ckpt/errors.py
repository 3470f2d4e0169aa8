"""Errors of the checkpoint package; each message says what to change.

Expected outcomes (a stale publish, a skipped save, a fallback during restore) are values, not
exceptions: see `PublishOutcome`, `SaveOutcome` and `RestoreResult`.
"""

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
    """An asynchronous save failed in the background; raised at the next Checkpointer call so a
    failure is never swallowed."""
