"""Operations on a run's checkpoint folder for operators (the `runwright ckpt` commands).

Each function takes a checkpoint root, does one thing, and returns a record the CLI renders.
"""

import os
from collections.abc import Callable
from typing import Any

from pydantic import Field

from runwright.ckpt.catalog import CommittedCheckpoint, Uncommitted, scan
from runwright.ckpt.errors import CheckpointError, CheckpointRootError
from runwright.ckpt.export import ReleaseManifest, export_model
from runwright.ckpt.fence import LocalFence
from runwright.ckpt.gc import GcReport, Residue, collect_residue, find_residue
from runwright.ckpt.manifest import HealthVerdict, LatestPointer
from runwright.ckpt.storage import CheckpointStorage
from runwright.ckpt.verify import VerifyMode, VerifyReport, verify_checkpoint
from runwright.errors import NotFoundError
from runwright.layout import resolve_root, run_paths
from runwright.records import Record


def checkpoint_root(target: str, root: str | os.PathLike[str] | None = None) -> str:
    """A checkpoint folder path or URL as given, else the checkpoints of run `target` under the
    runwright root (`root`, resolved as every command resolves `--root`)."""
    if "/" in target or "://" in target or os.path.isdir(target):
        return target
    return str(run_paths(resolve_root(root), target).checkpoints)


class ListedCheckpoint(Record):
    """One row of `runwright ckpt list`."""

    folder: str
    """Folder under the checkpoint root."""
    checkpoint_id: str
    """Checkpoint id."""
    step: int
    """Step."""
    generation: int
    """Writer's generation."""
    total_bytes: int
    """Bytes of shards and metadata."""
    health: HealthVerdict
    """Health verdict at save time."""
    latest: bool
    """Whether the latest pointer names it."""


class Inventory(Record):
    """Everything in a run's checkpoint folder."""

    root: str
    """The checkpoint root."""
    generation: int | None
    """Current generation according to a local fence, if one exists."""
    latest: LatestPointer | None
    """The latest pointer, if a local fence exists."""
    committed: list[ListedCheckpoint] = Field(default_factory=list)
    """Committed checkpoints, newest first."""
    uncommitted: list[Uncommitted] = Field(default_factory=list)
    """Residue and rejected folders, with reasons."""


def _local_fence(storage: CheckpointStorage) -> LocalFence | None:
    if storage.is_local and os.path.isdir(storage.root):
        return LocalFence(storage.root)
    return None


def inventory(root: str) -> Inventory:
    storage = CheckpointStorage(root)
    if not storage.exists(storage.root):
        raise NotFoundError(f"no checkpoint folder at {root}; pass a run id or a folder path")
    fence = _local_fence(storage)
    latest = fence.latest() if fence is not None else None
    committed, other = scan(storage)
    rows = [
        ListedCheckpoint(
            folder=c.folder,
            checkpoint_id=c.record.checkpoint_id,
            step=c.record.step,
            generation=c.record.generation,
            total_bytes=c.manifest.total_bytes,
            health=c.manifest.health,
            latest=latest is not None and latest.checkpoint_id == c.record.checkpoint_id,
        )
        for c in committed
    ]
    return Inventory(
        root=storage.root,
        generation=fence.current_generation() if fence is not None else None,
        latest=latest,
        committed=rows,
        uncommitted=other,
    )


def find(root: str, ref: str) -> tuple[CheckpointStorage, CommittedCheckpoint]:
    """A committed checkpoint by folder name, checkpoint id, step, or `latest`."""
    storage = CheckpointStorage(root)
    committed, _ = scan(storage)
    if ref == "latest":
        fence = _local_fence(storage)
        pointer = fence.latest() if fence is not None else None
        matches = [
            c for c in committed if pointer and c.record.checkpoint_id == pointer.checkpoint_id
        ]
        matches = matches or committed[:1]
    else:
        matches = [
            c
            for c in committed
            if ref in (c.folder, c.record.checkpoint_id)
            or (ref.isdigit() and c.record.step == int(ref))
        ]
    if not matches:
        raise NotFoundError(
            f"no committed checkpoint {ref!r} in {root}; `runwright ckpt list` shows what exists"
        )
    return storage, matches[0]


class RootReport(Record):
    """What `runwright ckpt verify` found in a checkpoint root."""

    root: str
    """The checkpoint root."""
    problems: list[str] = Field(default_factory=list)
    """Why restore or a start could not open this root, each naming the path and the fix."""
    residue: list[Residue] = Field(default_factory=list)
    """Entries that belong to no committed checkpoint, with what GC would do (restore and
    starts get past all of them)."""
    uninspectable: dict[str, str] = Field(default_factory=dict)
    """Entries that could not be inspected -> the error (restore skips them too)."""
    checkpoints: list[VerifyReport] = Field(default_factory=list)
    """One report per committed checkpoint verified, newest first."""

    @property
    def ok(self) -> bool:
        """Restore can open the root and every checkpoint verified; residue does not count."""
        return not self.problems and all(r.ok for r in self.checkpoints)


def verify(
    root: str,
    ref: str | None,
    mode: VerifyMode,
    on_file: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> RootReport:
    """Check what restore and a start read first (the fence's pointer and generation, the
    listing), list the residue, then verify one checkpoint (`ref`) or every committed one.
    `on_total(bytes)` is called once the bytes to read are known (progress bars)."""
    storage = CheckpointStorage(root)
    if not storage.exists(storage.root):
        raise NotFoundError(f"no checkpoint folder at {root}; pass a run id or a folder path")
    problems: list[str] = []
    generation, latest = 0, None
    fence = _local_fence(storage)
    if fence is not None:
        try:
            generation = fence.current_generation()
        except CheckpointError as exc:
            problems.append(str(exc))
        try:
            latest = fence.latest()
        except CheckpointError as exc:
            problems.append(str(exc))
    try:
        committed, _ = scan(storage)
    except CheckpointRootError as exc:
        problems.append(str(exc))
        committed = []
    residue, uninspectable = find_residue(
        storage,
        current_generation=generation,
        min_age_seconds=3600.0,
        latest_step=latest.step if latest is not None else None,
    )
    chosen = [find(root, ref)[1]] if ref is not None and not problems else committed
    if on_total is not None:
        on_total(sum(c.manifest.total_bytes for c in chosen))
    return RootReport(
        root=storage.root,
        problems=problems,
        residue=residue,
        uninspectable=uninspectable,
        checkpoints=[verify_checkpoint(storage, c.path, c.manifest, mode, on_file) for c in chosen],
    )


def collect(root: str, min_age_seconds: float, max_entries: int) -> GcReport:
    storage = CheckpointStorage(root)
    fence = _local_fence(storage)
    generation = fence.current_generation() if fence is not None else 0
    return collect_residue(
        storage,
        current_generation=generation,
        min_age_seconds=min_age_seconds,
        max_entries=max_entries,
        latest_step=latest.step if fence and (latest := fence.latest()) else None,
    )


def export(
    root: str,
    ref: str,
    out_dir: str,
    model_config: dict[str, Any],
    tokenizer_path: str | None,
) -> ReleaseManifest:
    storage, found = find(root, ref)
    if storage.is_local and os.path.realpath(out_dir).startswith(os.path.realpath(storage.root)):
        raise CheckpointError(
            f"export folder {out_dir} is inside the checkpoint folder; exports are kept apart "
            "from training state. Choose a folder outside it, e.g. <root>/runs/<run>/exports/."
        )
    return export_model(
        storage, found, out_dir, model_config=model_config, tokenizer_path=tokenizer_path
    )
