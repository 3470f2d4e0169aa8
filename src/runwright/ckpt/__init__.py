"""Checkpoints as a fenced distributed commit, on torch.distributed.checkpoint (DCP).

Usable inside any training script without the control plane: `Checkpointer` with a `LocalFence`
by default, or a fence the runtime provides. Never imports store/, control/, cli/ or server/.

Every name below is imported on first use (PEP 562): the checkpoint engine needs torch, and
what only reads the fence or a manifest (the CLI, `runwright status`, the store) must not pay
for it (runwright/lazy.py).
"""

from runwright.lazy import lazy_exports

_HOME = {
    "BackgroundSaveError": "errors",
    "CheckpointCorruptError": "errors",
    "CheckpointError": "errors",
    "CheckpointEvent": "events",
    "CheckpointIncompleteError": "errors",
    "CheckpointManifest": "manifest",
    "CheckpointRootError": "errors",
    "CheckpointStorageError": "errors",
    "Checkpointer": "checkpointer",
    "CommitProbe": "commit",
    "CommitRecord": "manifest",
    "CommitStep": "commit",
    "CommittedCheckpoint": "catalog",
    "CurrentRun": "compat",
    "DurabilityLag": "records",
    "EventSink": "events",
    "Fallback": "restore",
    "Fence": "fence",
    "FileEntry": "manifest",
    "GcReport": "gc",
    "HealthVerdict": "manifest",
    "IncompatibleCheckpointError": "errors",
    "IntervalChoice": "interval",
    "IntervalPolicy": "interval",
    "LatestPointer": "manifest",
    "LocalFence": "fence",
    "LoggingSink": "events",
    "LogicalKey": "manifest",
    "MemorySink": "events",
    "ModelProbe": "probe",
    "NoUsableCheckpointError": "errors",
    "ProbeReading": "probe",
    "ProbeRecord": "manifest",
    "ProbeVerdict": "probe",
    "PublishOutcome": "fence",
    "Residue": "gc",
    "RestoreMode": "compat",
    "RestoreProbe": "probe",
    "RestoreResult": "restore",
    "SaveResult": "records",
    "SaveStatus": "records",
    "SmokeCheck": "restore",
    "StorageFailure": "records",
    "TrainState": "state",
    "VerifyReport": "verify",
    "collect_residue": "gc",
    "find_residue": "gc",
    "restore_candidates": "catalog",
    "scan": "catalog",
    "start_generation": "start",
    "verify_checkpoint": "verify",
}
"""public name -> the submodule of runwright.ckpt that defines it."""

__all__ = sorted(_HOME)


__getattr__, __dir__ = lazy_exports(__name__, _HOME)
