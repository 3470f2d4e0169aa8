"""Values the Checkpointer returns from a save and from a durability-lag query, and the
description of a failed storage write that a failed save carries."""

import errno as errnos
from enum import StrEnum

from pydantic import Field

from runwright.records import Record


class SaveStatus(StrEnum):
    """What a call to save did."""

    COMMITTED = "committed"
    """Written, verified, committed and published (sync saves)."""
    QUEUED = "queued"
    """Staged in host memory; persisting in the background (async saves)."""
    SKIPPED = "skipped"
    """Async backlog full and `when_full: skip`; recorded as CHECKPOINT_SKIPPED."""
    REJECTED_STALE = "rejected_stale"
    """Written and committed, but the fence refused the publish: this writer's generation is
    stale. Recorded as STALE_WRITE_REJECTED; the latest pointer did not move."""
    FAILED = "failed"
    """Storage refused the save (full volume, permissions) and `on_save_failure: skip`: recorded
    as CHECKPOINT_FAILED, its staging folder removed, the latest pointer unchanged; training
    goes on."""


_FULL_ERRNOS = frozenset({errnos.ENOSPC, errnos.EDQUOT})


def _mb(count: int) -> str:
    return f"{count / 1e6:.1f} MB"


class StorageFailure(Record):
    """Why a checkpoint write failed, in the figures an operator acts on."""

    action: str
    """What was being written, e.g. `save of step 5 (checkpoint g000002-...)`."""
    path: str
    """The file or folder the write failed on."""
    cause: str
    """The underlying error, e.g. `OSError: [Errno 28] No space left on device`."""
    errno: int | None = None
    """Its errno, when the cause is an OSError."""
    bytes_needed: int | None = None
    """Bytes the write needed (a save: the tensor bytes of the checkpoint across all ranks)."""
    bytes_free: int | None = None
    """Bytes this process may still write on the volume holding `path` (os.statvfs f_bavail x
    f_frsize), measured after the failed write was cleaned up; None on object stores."""
    remedy: str | None = None
    """What the writer adds to the advice: what it cleaned up, what may be deleted."""

    @property
    def volume_full(self) -> bool:
        """The volume (or the user's quota) had no room for the write."""
        if self.errno in _FULL_ERRNOS or "No space left" in self.cause:
            return True
        return (
            self.bytes_needed is not None
            and self.bytes_free is not None
            and self.bytes_free < self.bytes_needed
        )

    def message(self) -> str:
        text = f"{self.action} failed at {self.path}: {self.cause}."
        if self.volume_full:
            need = f"needs {_mb(self.bytes_needed)}" if self.bytes_needed is not None else ""
            free = f"{_mb(self.bytes_free)} free" if self.bytes_free is not None else ""
            figures = ", ".join(f for f in (need, free) if f)
            text += " The volume is full" + (f" ({figures})" if figures else "") + "."
            if self.bytes_needed is not None and self.bytes_free is not None:
                short = max(0, self.bytes_needed - self.bytes_free)
                text += f" Free at least {_mb(short)} on it"
            else:
                text += " Free space on it"
            text += " (older checkpoints, other files) or move the checkpoint root to a larger one."
        else:
            free = f" ({_mb(self.bytes_free)} free on that volume)" if self.bytes_free else ""
            text += f" Fix the cause{free}: permissions, the mount, storage reachability."
        return text + (f" {self.remedy}" if self.remedy else "")


class SaveResult(Record):
    """The outcome of one save call."""

    step: int
    """Step the save was asked for."""
    status: SaveStatus
    """What happened."""
    checkpoint_id: str | None = None
    """Allocated id (None when skipped)."""
    folder: str | None = None
    """Folder under the checkpoint root once committed."""
    total_bytes: int = 0
    """Bytes written (once committed)."""
    stall_seconds: float = 0.0
    """Time the training loop was blocked by this call."""
    timings_seconds: dict[str, float] = Field(default_factory=dict)
    """Per-step durations: stage, write, verify, persist."""
    reason: str | None = None
    """Why it was skipped or failed, if it was."""
    failure: StorageFailure | None = None
    """The storage failure, when the status is FAILED."""


class DurabilityLag(Record):
    """How far durable state trails staged state."""

    staged_step: int | None
    """Newest step staged by this process."""
    committed_step: int | None
    """Newest step committed and published."""
    lag_steps: int
    """staged_step - committed_step: steps that a crash now would lose beyond the last commit."""
    inflight: int
    """Snapshots staged and not yet committed."""
    oldest_uncommitted_seconds: float
    """Age of the oldest snapshot still persisting (0 when none)."""
