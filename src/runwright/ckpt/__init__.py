"""Checkpoints as a fenced distributed commit, on torch.distributed.checkpoint (DCP).

Usable inside any training script without the control plane: `Checkpointer` with a `LocalFence`
by default, or a fence the runtime provides. Never imports store/, control/, cli/ or server/.
"""

from runwright.ckpt.catalog import CommittedCheckpoint, restore_candidates, scan
from runwright.ckpt.checkpointer import Checkpointer
from runwright.ckpt.commit import CommitProbe, CommitStep
from runwright.ckpt.compat import CurrentRun, RestoreMode
from runwright.ckpt.errors import (
    BackgroundSaveError,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointIncompleteError,
    CheckpointRootError,
    CheckpointStorageError,
    IncompatibleCheckpointError,
    NoUsableCheckpointError,
)
from runwright.ckpt.events import (
    CheckpointEvent,
    EventSink,
    LoggingSink,
    MemorySink,
)
from runwright.ckpt.fence import Fence, LocalFence, PublishOutcome
from runwright.ckpt.gc import GcReport, Residue, collect_residue, find_residue
from runwright.ckpt.interval import IntervalChoice, IntervalPolicy
from runwright.ckpt.manifest import (
    CheckpointManifest,
    CommitRecord,
    FileEntry,
    HealthVerdict,
    LatestPointer,
    LogicalKey,
)
from runwright.ckpt.records import DurabilityLag, SaveResult, SaveStatus, StorageFailure
from runwright.ckpt.restore import Fallback, RestoreResult, SmokeCheck
from runwright.ckpt.start import start_generation
from runwright.ckpt.state import TrainState
from runwright.ckpt.verify import VerifyReport, verify_checkpoint

__all__ = [
    "BackgroundSaveError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointEvent",
    "CheckpointIncompleteError",
    "CheckpointManifest",
    "CheckpointRootError",
    "CheckpointStorageError",
    "Checkpointer",
    "CommitProbe",
    "CommitRecord",
    "CommitStep",
    "CommittedCheckpoint",
    "CurrentRun",
    "DurabilityLag",
    "EventSink",
    "Fallback",
    "Fence",
    "FileEntry",
    "GcReport",
    "HealthVerdict",
    "IncompatibleCheckpointError",
    "IntervalChoice",
    "IntervalPolicy",
    "LatestPointer",
    "LocalFence",
    "LoggingSink",
    "LogicalKey",
    "MemorySink",
    "NoUsableCheckpointError",
    "PublishOutcome",
    "Residue",
    "RestoreMode",
    "RestoreResult",
    "SaveResult",
    "SaveStatus",
    "SmokeCheck",
    "StorageFailure",
    "TrainState",
    "VerifyReport",
    "collect_residue",
    "find_residue",
    "restore_candidates",
    "scan",
    "start_generation",
    "verify_checkpoint",
]
