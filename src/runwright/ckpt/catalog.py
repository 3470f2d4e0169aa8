"""Which checkpoints of a run are committed, read from storage only.

A checkpoint is committed iff `<step>-<id>/COMMITTED` parses, names the folder it is in, and holds
the sha256 of the manifest.json beside it; a folder with a `REJECTED` marker (its publish was
refused by the fence) is not. Directory listings alone never count (seed 003: the manifest, not
the listing, is the transaction boundary).
"""

import hashlib

from pydantic import ValidationError

from runwright.ckpt.errors import CheckpointRootError
from runwright.ckpt.fence import Fence
from runwright.ckpt.manifest import (
    COMMIT_FILE,
    MANIFEST_FILE,
    REJECTED_FILE,
    CheckpointManifest,
    CommitRecord,
)
from runwright.ckpt.storage import CheckpointStorage, parse_folder
from runwright.records import Record


class CommittedCheckpoint(Record):
    """One committed checkpoint as found on storage."""

    folder: str
    """Folder name under the checkpoint root."""
    path: str
    """Full path or URL of the folder."""
    record: CommitRecord
    """Its commit record."""
    manifest: CheckpointManifest
    """Its manifest (hash checked against the record)."""


class Uncommitted(Record):
    """A checkpoint folder that is not (or no longer) committed, and why."""

    folder: str
    """Folder name under the checkpoint root."""
    reason: str
    """Why it does not count, e.g. `no commit record`."""


def read_committed(storage: CheckpointStorage, folder: str) -> CommittedCheckpoint | str:
    """The committed checkpoint in `folder`, or the reason it is not one."""
    path = storage.path(folder)
    parsed = parse_folder(folder)
    if parsed is None:
        return "not a checkpoint folder name"
    if storage.exists(f"{path}/{REJECTED_FILE}"):
        return "publish rejected by the fence (stale generation)"
    if not storage.exists(f"{path}/{COMMIT_FILE}"):
        return "no commit record (interrupted before commit)"
    try:
        record = CommitRecord.model_validate_json(storage.read_bytes(f"{path}/{COMMIT_FILE}"))
        raw = storage.read_bytes(f"{path}/{MANIFEST_FILE}")
    except (ValidationError, OSError, ValueError) as exc:
        return f"unreadable commit record or manifest ({type(exc).__name__})"
    if record.folder != folder or record.checkpoint_id != parsed[1]:
        return f"commit record names {record.folder}, not this folder"
    if hashlib.sha256(raw).hexdigest() != record.manifest_sha256:
        return "manifest.json does not match the hash in the commit record"
    try:
        manifest = CheckpointManifest.model_validate_json(raw)
    except ValidationError as exc:
        return f"manifest.json does not parse ({exc.error_count()} errors)"
    return CommittedCheckpoint(folder=folder, path=path, record=record, manifest=manifest)


def scan(storage: CheckpointStorage) -> tuple[list[CommittedCheckpoint], list[Uncommitted]]:
    """All committed checkpoints (newest step first) and every other checkpoint folder; raises
    `CheckpointRootError` when the root cannot be listed."""
    committed: list[CommittedCheckpoint] = []
    other: list[Uncommitted] = []
    try:
        names = storage.list_names(storage.root)
    except OSError as exc:
        raise CheckpointRootError(
            f"cannot list the checkpoint root {storage.root}: {type(exc).__name__}: {exc}. "
            "Make it a folder this user can read (permissions, the mount, the URL)."
        ) from exc
    for name in names:
        if parse_folder(name) is None:
            continue
        found = read_committed(storage, name)
        if isinstance(found, str):
            other.append(Uncommitted(folder=name, reason=found))
        else:
            committed.append(found)
    committed.sort(key=lambda c: (c.record.step, c.record.generation), reverse=True)
    return committed, other


def restore_candidates(
    storage: CheckpointStorage, fence: Fence | None
) -> list[CommittedCheckpoint]:
    """Restore order: the fence's latest pointer first, then older committed checkpoints newest
    first. Committed folders newer than the pointer are left out: only a stale writer, whose
    publish the fence refused, can have produced them."""
    committed, _ = scan(storage)
    latest = fence.latest() if fence is not None else None
    if latest is None:
        return committed
    head = [c for c in committed if c.record.checkpoint_id == latest.checkpoint_id]
    older = [
        c
        for c in committed
        if c.record.step < latest.step and c.record.checkpoint_id != latest.checkpoint_id
    ]
    return head + older
