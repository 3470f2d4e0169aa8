"""Checking a checkpoint against what its writers measured.

Two uses: step 4 of the commit protocol (`check_staged`: every shard DCP referenced exists with the
size its writer recorded, every logical key any rank asked to save is in DCP's metadata) and
verification of a committed checkpoint (`verify_checkpoint`: every file's size and checksum against
the manifest, fully or on a sample; in every mode also that the folder holds exactly the files
the manifest lists, each a regular file, and that the manifest's logical keys and shards are the
ones DCP's own `.metadata` lists, so a manifest edited and re-committed does not pass). A checksum
detects storage or transfer corruption; it cannot prove the tensors were right before they were
hashed (seed 003, step 4), which is what the restore smoke check is for.

Restore splits verification around its load (`ChecksumPass`): the checks that read no shard
bytes (sizes, the listing, DCP's metadata) run first, and the checksums run on a thread while DCP
reads the same files, so a full verification costs the load no second pass in series; the restore
applies nothing but tensor bytes until the pass has found every checksum right (restore.py).
"""

import json
import random
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from runwright.ckpt.checksum import CHECKSUMS, DEFAULT_CHECKSUM, checksum_bytes, new_hasher
from runwright.ckpt.errors import CheckpointIncompleteError
from runwright.ckpt.manifest import (
    COMMIT_FILE,
    DCP_METADATA,
    MANIFEST_FILE,
    CheckpointManifest,
    FileEntry,
    sidecar_name,
)
from runwright.ckpt.storage import CheckpointStorage
from runwright.records import Record

if TYPE_CHECKING:
    from torch.distributed.checkpoint.metadata import Metadata

VerifyMode = Literal["full", "sampled", "none"]
_READ_CHUNK_BYTES = 1 << 20
"""One reused buffer of 1 MiB: it stays in the L2 cache between the read and the hash. Reading
8 MiB at a time into a new bytes object each time took twice as long (0.30 s against 0.14 s for a
537 MB file from the page cache, medians of 7, benchmarks/checkpoint.py's machine)."""
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
    """(hex digest, bytes read) of one file, streamed through one reused 1 MiB buffer."""
    digest = new_hasher(algorithm)
    buffer = bytearray(_READ_CHUNK_BYTES)
    view = memoryview(buffer)
    total = 0
    with storage.open_read(path) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
            total += count
    return digest.hexdigest(), total


def verify_checkpoint(
    storage: CheckpointStorage,
    folder_path: str,
    manifest: CheckpointManifest,
    mode: VerifyMode = "full",
    on_file: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Compare every file of a checkpoint with its manifest entry, the folder's listing with the
    manifest, and the manifest with DCP's metadata. `on_file(bytes)` is called after each file
    (progress bars)."""
    problems = _manifest_problems(manifest)
    checked = read = 0
    hashed = hashed_names(manifest, mode)
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
    problems += _listing_problems(storage, folder_path, manifest)
    if not any(p.file == DCP_METADATA for p in problems):
        problems += _dcp_problems(storage, folder_path, manifest)
    return VerifyReport(
        checkpoint_id=manifest.checkpoint_id,
        mode=mode,
        files_checked=checked,
        bytes_read=read,
        problems=problems,
    )


def hashed_names(manifest: CheckpointManifest, mode: VerifyMode) -> set[str]:
    """The files whose checksum `mode` recomputes: all (full), every small file and a quarter of
    the large ones, seeded by the checkpoint id (sampled), none (none, or an unknown algorithm)."""
    if manifest.checksum_algorithm not in CHECKSUMS or mode == "none":
        return set()
    if mode == "full":
        return {f.name for f in manifest.files}
    rng = random.Random(manifest.checkpoint_id)
    large = [f for f in manifest.files if f.size_bytes > _SMALL_FILE_BYTES]
    sample_size = max(1, round(len(large) * _SAMPLED_FRACTION)) if large else 0
    hashed = {f.name for f in manifest.files if f.size_bytes <= _SMALL_FILE_BYTES}
    return hashed | {f.name for f in rng.sample(large, sample_size)}


class ChecksumPass:
    """The checksums `mode` recomputes, on a thread of their own, for a restore to overlap with
    its load. Start it once `verify_checkpoint(..., mode="none")` found the sizes, the listing
    and DCP's metadata right: this pass only hashes."""

    def __init__(
        self,
        storage: CheckpointStorage,
        folder_path: str,
        manifest: CheckpointManifest,
        mode: VerifyMode,
    ) -> None:
        self._storage, self._folder, self._manifest, self._mode = (
            storage,
            folder_path,
            manifest,
            mode,
        )
        self._report: VerifyReport | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="runwright-verify", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the pass to end, whatever it found."""
        self._thread.join()

    def result(self) -> VerifyReport:
        """Wait for the pass; its report names every file whose checksum differs (a file that
        cannot be read is a problem too); raises only what went wrong outside any file."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._report is not None  # set by _run whenever _error is not
        return self._report

    def _run(self) -> None:
        try:
            self._report = self._hash_all()
        except BaseException as exc:
            self._error = exc

    def _hash_all(self) -> VerifyReport:
        manifest = self._manifest
        hashed = hashed_names(manifest, self._mode)
        problems, checked, read = [], 0, 0
        for entry in manifest.files:
            if entry.name not in hashed:
                continue
            path = f"{self._folder}/{entry.name}"
            problem = _checksum_problem(self._storage, path, entry, manifest.checksum_algorithm)
            if problem is None:
                checked += 1
                read += entry.size_bytes
            else:
                problems.append(problem)
        return VerifyReport(
            checkpoint_id=manifest.checkpoint_id,
            mode=self._mode,
            files_checked=checked,
            bytes_read=read,
            problems=problems,
        )


def _manifest_problems(manifest: CheckpointManifest) -> list[VerifyProblem]:
    """What is wrong with the manifest on its own: an unknown checksum, a file listed twice, a
    rank's file list or DCP's metadata missing from the files."""
    problems = []
    if manifest.checksum_algorithm not in CHECKSUMS:
        problems.append(
            VerifyProblem(
                file=MANIFEST_FILE,
                reason=f"checksum_algorithm {manifest.checksum_algorithm!r} is not one of "
                f"{sorted(CHECKSUMS)}; no checksum could be checked",
            )
        )
    names = [f.name for f in manifest.files]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        problems.append(VerifyProblem(file=MANIFEST_FILE, reason=f"files lists {twice} twice"))
    expected = {DCP_METADATA} | {sidecar_name(rank) for rank in range(manifest.world_size)}
    if absent := sorted(expected - set(names)):
        shown = ", ".join(absent[:5]) + (f" and {len(absent) - 5} more" if len(absent) > 5 else "")
        problems.append(
            VerifyProblem(
                file=MANIFEST_FILE,
                reason=f"files does not list {shown}, which every checkpoint of world size "
                f"{manifest.world_size} has",
            )
        )
    return problems


def _listing_problems(
    storage: CheckpointStorage, folder_path: str, manifest: CheckpointManifest
) -> list[VerifyProblem]:
    """Entries of the folder the manifest does not list (it lists every file but itself and the
    commit record)."""
    try:
        entries = storage.entries(folder_path)
    except OSError as exc:
        return [VerifyProblem(file=".", reason=f"cannot list the folder: {exc}")]
    listed = {f.name for f in manifest.files} | {MANIFEST_FILE, COMMIT_FILE}
    return [
        VerifyProblem(
            file=name,
            reason=f"{kind} not listed in {MANIFEST_FILE} (the manifest dropped it, or it was "
            "put here after the commit)",
        )
        for name, kind in entries
        if name not in listed
    ]


def _dcp_problems(
    storage: CheckpointStorage, folder_path: str, manifest: CheckpointManifest
) -> list[VerifyProblem]:
    if DCP_METADATA not in {f.name for f in manifest.files}:
        return []  # reported by _manifest_problems
    # DCP's metadata is read with torch's types: imported when a checkpoint is verified, not by
    # every process that imports this module (the controller, the CLI's checkpoint commands).
    from runwright.ckpt.metadata import MetadataError, metadata_problems, read_metadata

    try:
        metadata = read_metadata(storage, f"{folder_path}/{DCP_METADATA}")
    except (OSError, MetadataError) as exc:
        return [VerifyProblem(file=DCP_METADATA, reason=f"cannot be read as DCP metadata: {exc}")]
    return [
        VerifyProblem(file=DCP_METADATA, reason=r) for r in metadata_problems(metadata, manifest)
    ]


def _check_file(
    storage: CheckpointStorage, path: str, entry: FileEntry, hash_it: bool, algorithm: str
) -> VerifyProblem | None:
    kind = storage.kind(path)
    if kind is None:
        return VerifyProblem(file=entry.name, reason="missing")
    if kind != "file":
        return VerifyProblem(
            file=entry.name, reason=f"a {kind}, not a regular file; nothing of it was read"
        )
    try:
        size = storage.size_bytes(path)
        if size != entry.size_bytes:
            return VerifyProblem(
                file=entry.name,
                reason=f"size {size} bytes, manifest says {entry.size_bytes} "
                "(truncated or replaced)",
            )
    except OSError as exc:
        return VerifyProblem(file=entry.name, reason=f"cannot be read: {exc}")
    return _checksum_problem(storage, path, entry, algorithm) if hash_it else None


def _checksum_problem(
    storage: CheckpointStorage, path: str, entry: FileEntry, algorithm: str
) -> VerifyProblem | None:
    try:
        digest, _ = file_checksum(storage, path, algorithm)
    except OSError as exc:
        return VerifyProblem(file=entry.name, reason=f"cannot be read: {exc}")
    if digest != entry.checksum:
        return VerifyProblem(
            file=entry.name,
            reason=f"checksum mismatch (expected {entry.checksum[:12]}..., found {digest[:12]}...)",
        )
    return None


def check_staged(
    storage: CheckpointStorage, staged_path: str, metadata: "Metadata", world_size: int
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
