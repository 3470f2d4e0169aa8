"""Values the Checkpointer returns from a save and from a durability-lag query."""

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


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


class SaveResult(BaseModel):
    """The outcome of one save call."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

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
    """Why it was skipped, if it was."""


class DurabilityLag(BaseModel):
    """How far durable state trails staged state."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

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
