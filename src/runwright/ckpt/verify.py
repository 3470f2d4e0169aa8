"""Checking a checkpoint against what its writers measured.

Two uses: step 4 of the commit protocol (`check_staged`: every shard DCP referenced exists with the
size its writer recorded, every logical key any rank asked to save is in DCP's metadata) and
verification of a committed checkpoint (`verify_checkpoint`: every file's size and checksum against
the manifest, fully or on a sample). A checksum detects storage or transfer corruption; it cannot
prove the tensors were right before they were hashed (seed 003, step 4), which is what the
restore smoke check is for.
"""

import json
import random
from collections.abc import Callable
from typing import Literal

from pydantic import Field
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    TensorStorageMetadata,
)

from runwright.ckpt.checksum import DEFAULT_CHECKSUM, checksum_bytes, new_hasher
from runwright.ckpt.errors import CheckpointIncompleteError
from runwright.ckpt.manifest import CheckpointManifest, FileEntry, LogicalKey, ShardRange
from runwright.ckpt.storage import CheckpointStorage
from runwright.ckpt.writer import sidecar_name
from runwright.records import Record

VerifyMode = Literal["full", "sampled", "none"]
_READ_CHUNK_BYTES = 8 << 20
_SAMPLED_FRACTION = 0.25
_SMALL_FILE_BYTES = 1 << 20


class VerifyProblem(Record):
    """One thing wrong with one file."""

    file: str
    """File name relative to the checkpoint folder."""
    reason: str
    """What is wrong, e.g. `checksum mismatch (expected 3f2a..., found 9b1c...)`."""


class VerifyReport(Record):
    """The outcome of verifying one checkpoint."""

    checkpoint_id: str
    """The checkpoint verified."""
    mode: VerifyMode
    """full: every checksum; sampled: every size, a seeded quarter of the checksums; none."""
    files_checked: int = 0
    """Files whose checksum was recomputed."""
    bytes_read: int = 0
    """Bytes read to recompute checksums."""
    problems: list[VerifyProblem] = Field(default_factory=list)
    """Everything found wrong; empty when the checkpoint verified."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            return f"{self.checkpoint_id}: ok ({self.mode}, {self.files_checked} files hashed)"
        lines = "; ".join(f"{p.file}: {p.reason}" for p in self.problems)
        return f"{self.checkpoint_id}: {lines}"


def file_checksum(storage: CheckpointStorage, path: str, algorithm: str) -> tuple[str, int]:
    """(hex digest, bytes read) of one file, streamed in 8 MiB reads."""
    digest = new_hasher(algorithm)
    total = 0
    with storage.open_read(path) as handle:
        while chunk := handle.read(_READ_CHUNK_BYTES):
            digest.update(chunk)
            total += len(chunk)
    return digest.hexdigest(), total


def verify_checkpoint(
    storage: CheckpointStorage,
    folder_path: str,
    manifest: CheckpointManifest,
    mode: VerifyMode = "full",
    on_file: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Compare every file of a checkpoint with its manifest entry. `on_file(bytes)` is called
    after each file (progress bars)."""
    problems: list[VerifyProblem] = []
    checked = read = 0
    if mode == "sampled":
        rng = random.Random(manifest.checkpoint_id)
        large = [f for f in manifest.files if f.size_bytes > _SMALL_FILE_BYTES]
        sample_size = max(1, round(len(large) * _SAMPLED_FRACTION)) if large else 0
        hashed = {f.name for f in manifest.files if f.size_bytes <= _SMALL_FILE_BYTES}
        hashed |= {f.name for f in rng.sample(large, sample_size)}
    else:
        hashed = {f.name for f in manifest.files} if mode == "full" else set()
    for entry in manifest.files:
        problem = _check_file(
            storage,
            f"{folder_path}/{entry.name}",
            entry,
            entry.name in hashed,
            manifest.checksum_algorithm,
        )
        if problem is None and entry.name in hashed:
            checked += 1
            read += entry.size_bytes
        elif problem is not None:
            problems.append(problem)
        if on_file is not None:
            on_file(entry.size_bytes)
    return VerifyReport(
        checkpoint_id=manifest.checkpoint_id,
        mode=mode,
        files_checked=checked,
        bytes_read=read,
        problems=problems,
    )


def _check_file(
    storage: CheckpointStorage, path: str, entry: FileEntry, hash_it: bool, algorithm: str
) -> VerifyProblem | None:
    if not storage.exists(path):
        return VerifyProblem(file=entry.name, reason="missing")
    size = storage.size_bytes(path)
    if size != entry.size_bytes:
        return VerifyProblem(
            file=entry.name,
            reason=f"size {size} bytes, manifest says {entry.size_bytes} (truncated or replaced)",
        )
    if hash_it:
        digest, _ = file_checksum(storage, path, algorithm)
        if digest != entry.checksum:
            return VerifyProblem(
                file=entry.name,
                reason=f"checksum mismatch (expected {entry.checksum[:12]}..., "
                f"found {digest[:12]}...)",
            )
    return None


def logical_keys(metadata: Metadata) -> dict[str, LogicalKey]:
    """DCP metadata -> the manifest's logical keys with global shape, dtype and shard ranges."""
    keys: dict[str, LogicalKey] = {}
    for fqn, meta in sorted(metadata.state_dict_metadata.items()):
        if isinstance(meta, TensorStorageMetadata):
            keys[fqn] = LogicalKey(
                kind="tensor",
                shape=list(meta.size),
                dtype=str(meta.properties.dtype),
                shards=[
                    ShardRange(offsets=list(c.offsets), sizes=list(c.sizes)) for c in meta.chunks
                ],
            )
        elif isinstance(meta, BytesStorageMetadata):
            keys[fqn] = LogicalKey(kind="object")
    return keys


def check_staged(
    storage: CheckpointStorage, staged_path: str, metadata: Metadata, world_size: int
) -> list[FileEntry]:
    """Step 4: read every rank's sidecar and check that the staged checkpoint is complete.
    Returns the file entries for the manifest; raises `CheckpointIncompleteError` otherwise."""
    entries: list[FileEntry] = []
    expected_keys: set[str] = set()
    missing: list[str] = []
    for rank in range(world_size):
        name = sidecar_name(rank)
        path = f"{staged_path}/{name}"
        if not storage.exists(path):
            missing.append(f"{name} (rank {rank} did not finish writing)")
            continue
        raw = storage.read_bytes(path)
        sidecar = json.loads(raw)
        expected_keys.update(sidecar["keys"])
        entries += [FileEntry(rank=rank, **f) for f in sidecar["files"]]
        entries.append(
            FileEntry(
                name=name,
                size_bytes=len(raw),
                checksum=checksum_bytes(DEFAULT_CHECKSUM, raw),
                rank=rank,
            )
        )
    recorded = {e.name: e for e in entries}
    referenced = {info.relative_path for info in metadata.storage_data.values()}
    for name in sorted(referenced):
        path = f"{staged_path}/{name}"
        if name not in recorded:
            missing.append(f"{name} (referenced by DCP metadata, no writer recorded it)")
        elif not storage.exists(path):
            missing.append(f"{name} (recorded, not on storage)")
        elif storage.size_bytes(path) != recorded[name].size_bytes:
            missing.append(f"{name} (size differs from what its writer recorded)")
    absent_keys = sorted(expected_keys - set(metadata.state_dict_metadata))
    missing += [f"logical key {k}" for k in absent_keys]
    if missing:
        raise CheckpointIncompleteError(
            f"checkpoint in {staged_path} is incomplete, so it was not published: "
            + "; ".join(missing)
        )
    return entries
