"""Which checkpoints of a run are committed, read from storage only.

A checkpoint is committed iff `<step>-<id>/COMMITTED` parses, names the folder it is in, holds
the sha256 of the manifest.json beside it, and the folder name, the record and the manifest agree
on id, step and generation; a folder with a `REJECTED` marker (its publish was refused by the
fence) is not. A committed folder with a `SUSPECT` marker (saved after the last passing
silent-data-corruption check, before a failed one: ckpt/suspect.py) is listed with its reason and
never restored; so is one with an `ABANDONED` marker (newer than the checkpoint an operator
rolled the run back to: ckpt/abandon.py). Records are read within `RECORD_MAX_BYTES` and only
from regular files. Directory listings alone never count (seed 003: the manifest, not the
listing, is the transaction boundary).
"""

import hashlib

from pydantic import ValidationError

from runwright.ckpt.errors import CheckpointRootError
from runwright.ckpt.fence import Fence
from runwright.ckpt.manifest import (
    ABANDONED_FILE,
    COMMIT_FILE,
    MANIFEST_FILE,
    RECORD_MAX_BYTES,
    REJECTED_FILE,
    SUSPECT_FILE,
    CheckpointManifest,
    CommitRecord,
    generation_of,
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
    suspect: str | None = None
    """Why a failed corruption check made it suspect (its SUSPECT marker); None: not suspect."""
    abandoned: str | None = None
    """Why an operator's rollback to an older checkpoint abandoned it (its ABANDONED marker);
    None: not abandoned."""


class Uncommitted(Record):
    """A checkpoint folder that is not (or no longer) committed, and why."""

    folder: str
    """Folder name under the checkpoint root."""
    reason: str
    """Why it does not count, e.g. `no commit record`."""
    damaged: bool = False
    """True when the folder carries a commit record that does not hold (unreadable, naming
    another folder, disagreeing with its manifest) or was renamed: the commit protocol writes
    each record whole and never renames a committed folder, so no crash leaves this, and
    `runwright ckpt verify` fails on it. False for what an interrupted or refused save leaves."""


def _damaged(folder: str, reason: str) -> Uncommitted:
    return Uncommitted(folder=folder, reason=reason, damaged=True)


def _disagreements(
    folder: str, parsed: tuple[int, str], record: CommitRecord, manifest: CheckpointManifest
) -> list[str]:
    """Where the folder name, the commit record and the manifest disagree on id, step or
    generation (all three are written from one snapshot)."""
    step, checkpoint_id = parsed
    found = []
    for field, named, recorded, listed in (
        ("checkpoint_id", checkpoint_id, record.checkpoint_id, manifest.checkpoint_id),
        ("step", step, record.step, manifest.step),
        ("generation", generation_of(checkpoint_id), record.generation, manifest.generation),
    ):
        if not named == recorded == listed:
            found.append(
                f"{field}: folder name says {named}, {COMMIT_FILE} {recorded}, "
                f"{MANIFEST_FILE} {listed}"
            )
    return found


def read_committed(storage: CheckpointStorage, folder: str) -> CommittedCheckpoint | Uncommitted:
    """The committed checkpoint in `folder`, or why it is not one."""
    path = storage.path(folder)
    parsed = parse_folder(folder)
    if parsed is None:
        return Uncommitted(folder=folder, reason="not a checkpoint folder name")
    if storage.exists(f"{path}/{REJECTED_FILE}"):
        return Uncommitted(folder=folder, reason="publish rejected by the fence (stale generation)")
    if storage.kind(f"{path}/{COMMIT_FILE}") is None:
        return Uncommitted(folder=folder, reason="no commit record (interrupted before commit)")
    try:
        raw_record = storage.read_record(f"{path}/{COMMIT_FILE}", RECORD_MAX_BYTES)
        record = CommitRecord.model_validate_json(raw_record)
    except (ValidationError, OSError, ValueError) as exc:
        return _damaged(folder, f"{COMMIT_FILE} is unreadable or not a commit record: {_why(exc)}")
    if record.folder != folder:
        return _damaged(folder, f"{COMMIT_FILE} names folder {record.folder}, not this one")
    try:
        raw = storage.read_record(f"{path}/{MANIFEST_FILE}", RECORD_MAX_BYTES)
    except OSError as exc:
        return _damaged(folder, f"{MANIFEST_FILE} is unreadable: {_why(exc)}")
    if hashlib.sha256(raw).hexdigest() != record.manifest_sha256:
        return _damaged(folder, f"{MANIFEST_FILE} does not match the sha256 in {COMMIT_FILE}")
    try:
        manifest = CheckpointManifest.model_validate_json(raw)
    except ValidationError as exc:
        return _damaged(folder, f"{MANIFEST_FILE} does not parse: {_why(exc)}")
    disagreements = _disagreements(folder, parsed, record, manifest)
    if disagreements:
        return _damaged(folder, "; ".join(disagreements))
    suspect = None
    if storage.exists(f"{path}/{SUSPECT_FILE}"):
        suspect = (
            storage.read_record(f"{path}/{SUSPECT_FILE}", RECORD_MAX_BYTES)
            .decode(errors="replace")
            .strip()
            or "marked suspect"
        )
    return CommittedCheckpoint(
        folder=folder,
        path=path,
        record=record,
        manifest=manifest,
        suspect=suspect,
        abandoned=_marker(storage, f"{path}/{ABANDONED_FILE}", "abandoned by a rollback"),
    )


def _marker(storage: CheckpointStorage, path: str, default: str) -> str | None:
    """The reason a marker file beside a checkpoint holds, or None without the file."""
    if not storage.exists(path):
        return None
    text = storage.read_record(path, RECORD_MAX_BYTES).decode(errors="replace").strip()
    return text or default


def _why(exc: Exception) -> str:
    """One line for a failed read or parse: a validation error's first field and message."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        return f"{exc.error_count()} errors, first {where}: {first['msg']}"
    return f"{type(exc).__name__}: {exc}"


def scan(storage: CheckpointStorage) -> tuple[list[CommittedCheckpoint], list[Uncommitted]]:
    """All committed checkpoints (newest step first) and every other checkpoint folder, including
    a folder under another name that holds a commit record (a renamed checkpoint); raises
    `CheckpointRootError` when the root cannot be listed."""
    committed: list[CommittedCheckpoint] = []
    other: list[Uncommitted] = []
    try:
        names = storage.entries(storage.root)
    except OSError as exc:
        raise CheckpointRootError(
            f"cannot list the checkpoint root {storage.root}: {type(exc).__name__}: {exc}. "
            "Make it a folder this user can read (permissions, the mount, the URL)."
        ) from exc
    for name, kind in names:
        if parse_folder(name) is None:
            if kind == "folder" and storage.kind(storage.path(name, COMMIT_FILE)) is not None:
                other.append(
                    _damaged(
                        name,
                        f"holds a {COMMIT_FILE} record but is not named <step>-<checkpoint id> "
                        "(renamed?); give it back its name or move it out of the root",
                    )
                )
            continue
        if kind != "folder":
            continue
        found = read_committed(storage, name)
        if isinstance(found, Uncommitted):
            other.append(found)
        else:
            committed.append(found)
    committed.sort(key=lambda c: (c.record.step, c.record.generation), reverse=True)
    return committed, other


def restore_candidates(
    storage: CheckpointStorage, fence: Fence | None
) -> list[CommittedCheckpoint]:
    """Restore order: the fence's latest pointer first, then older committed checkpoints newest
    first. Committed folders newer than the pointer are left out: only a stale writer, whose
    publish the fence refused, can have produced them. Suspect ones are left out too: they may
    hold a corrupted state (ckpt/suspect.py); and abandoned ones: an operator rolled the run
    back past them (ckpt/abandon.py)."""
    committed = [c for c in scan(storage)[0] if c.suspect is None and c.abandoned is None]
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
