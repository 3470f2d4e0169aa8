"""Operations on a run's checkpoint folder for operators (the `runwright ckpt` commands).

Each function takes a checkpoint root, does one thing, and returns a record the CLI renders.
"""

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from runwright.ckpt.catalog import CommittedCheckpoint, Uncommitted, scan
from runwright.ckpt.errors import CheckpointError, CheckpointRootError
from runwright.ckpt.faultfs import inner_url
from runwright.ckpt.fence import (
    FENCE_OBJECT,
    GENERATION_FILE,
    LATEST_FILE,
    GenerationFence,
    LocalFence,
    open_fence,
)
from runwright.ckpt.gc import FENCE_FILES, GcReport, Residue, collect_residue, find_residue
from runwright.ckpt.manifest import COMMIT_FILE, MANIFEST_FILE, HealthVerdict, LatestPointer
from runwright.ckpt.storage import STAGING, CheckpointStorage, parse_folder
from runwright.ckpt.verify import VerifyMode, VerifyReport, verify_checkpoint
from runwright.errors import NotFoundError
from runwright.layout import checkpoint_location, resolve_root, run_paths, validate_run_id
from runwright.layout import checkpoint_root as run_checkpoint_root
from runwright.records import Record
from runwright.remote import scheme_of

if TYPE_CHECKING:  # export needs torch: a controller importing this module does not
    from runwright.ckpt.export import ReleaseManifest


def checkpoint_root(target: str, root: str | os.PathLike[str] | None = None) -> str:
    """Without `root`: a checkpoint folder path or URL as given (a name with `/` or `://`, or an
    existing folder), else the checkpoints of run `target` under the default runwright root.
    With `root` (a command's `--root`), `target` is a run id under it. A run id must be a plain
    name, so it never reaches outside `<root>/runs/`. A run's checkpoints are where its spec's
    `checkpoint.location` puts them (`layout.checkpoint_root`), read from the run's spec.json."""
    if "\0" in target:
        raise CheckpointError(f"{target!r} holds a NUL byte; pass a run id or a folder path")
    if root is None and ("/" in target or "://" in target or os.path.isdir(target)):
        return target
    try:
        validate_run_id(target)
    except ValueError as exc:
        raise CheckpointError(
            f"run id {target!r}: {exc}; to name a checkpoint folder by its path, leave out --root"
        ) from None
    paths = run_paths(resolve_root(root), target)
    return run_checkpoint_root(paths, checkpoint_location(_submitted_spec(paths.spec_file)))


def _submitted_spec(path: Path) -> dict[str, Any] | None:
    """The run's canonical spec (written at its first launch: no launch, no checkpoints)."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return spec if isinstance(spec, dict) else None


def resume_root(
    given: str,
    root: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
) -> str:
    """The checkpoint root `checkpoint.resume_from` names: a URL as given, a folder path (a
    relative one from `workdir`, the folder the run was submitted from), else the checkpoints
    of run `given` under `root` (default: the default runwright root)."""
    if "://" in given:
        return given
    if "/" in given or given in (".", ".."):
        return str(Path(workdir or ".", given).absolute()) if workdir else given
    return checkpoint_root(given, root)


def checkpoint_target(
    target: str, root: str | os.PathLike[str] | None = None
) -> tuple[str, str | None]:
    """The checkpoint root `target` names and, when `target` is one checkpoint's own folder (it
    holds a manifest or a commit record and no fence files), that folder's name within its root:
    `ckpt verify|inspect FOLDER` then checks that checkpoint in its root, as their help says,
    instead of reading the folder as an empty root."""
    folder = checkpoint_root(target, root)
    if root is not None or "://" in folder:
        return folder, None
    path = Path(folder)
    own = any((path / name).is_file() for name in (MANIFEST_FILE, COMMIT_FILE))
    fence = any((path / name).exists() for name in (GENERATION_FILE, LATEST_FILE))
    if path.is_dir() and own and not fence:
        return str(path.resolve().parent), path.resolve().name
    return folder, None


def _open_root(root: str) -> CheckpointStorage:
    """The storage of an existing checkpoint folder; a missing path or a plain file is the
    user's mistake (exit status 2), not something to verify."""
    storage = CheckpointStorage(root)
    kind = storage.kind(storage.root)
    if kind is None:
        raise NotFoundError(f"no checkpoint folder at {root}; pass a run id or a folder path")
    if kind == "symlink" and os.path.isdir(storage.root):
        kind = "folder"
    if kind != "folder":
        raise CheckpointError(
            f"{root} is a {kind}, not a checkpoint folder; pass a run id or the folder that "
            "holds GENERATION, LATEST.json and the <step>-<checkpoint id>/ folders"
        )
    return storage


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
    suspect: str | None = None
    """Why a failed corruption check made it suspect (restore skips it); None: not suspect."""


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


def _local_fence(storage: CheckpointStorage) -> GenerationFence | None:
    """The root's fence for commands that only look: a local folder's (when it exists, so
    looking creates nothing) or an `s3://` root's, also behind a drill's `faulty+`; None on
    other URLs."""
    if storage.is_local:
        return LocalFence(storage.root) if os.path.isdir(storage.root) else None
    wrapped = inner_url(storage.root)
    if wrapped.startswith("file://"):
        folder = wrapped.removeprefix("file://")
        return LocalFence(folder) if os.path.isdir(folder) else None
    return open_fence(wrapped) if scheme_of(wrapped) == "s3" else None


def _fence_names(fence: GenerationFence | None) -> tuple[str, str]:
    """The names of the files holding the generation and the pointer, for messages."""
    if fence is None or isinstance(fence, LocalFence):
        return GENERATION_FILE, LATEST_FILE
    return FENCE_OBJECT, FENCE_OBJECT


def inventory(root: str) -> Inventory:
    storage = _open_root(root)
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
            suspect=c.suspect,
        )
        for c in committed
    ]
    return Inventory(
        root=storage.root,
        generation=fence.peek_generation() if fence is not None else None,
        latest=latest,
        committed=rows,
        uncommitted=other,
    )


def _matching(
    committed: list[CommittedCheckpoint], ref: str, pointer: LatestPointer | None
) -> list[CommittedCheckpoint]:
    """The committed checkpoints `ref` (folder, id, step or `latest`) names, best first."""
    if ref == "latest":
        named = [
            c for c in committed if pointer and c.record.checkpoint_id == pointer.checkpoint_id
        ]
        return named or committed[:1]
    return [
        c
        for c in committed
        if ref in (c.folder, c.record.checkpoint_id)
        or (ref.isascii() and ref.isdigit() and c.record.step == int(ref))
    ]


def _no_such(ref: str, root: str) -> NotFoundError:
    return NotFoundError(
        f"no committed checkpoint {ref!r} in {root}; `runwright ckpt list` shows what exists"
    )


def find(root: str, ref: str) -> tuple[CheckpointStorage, CommittedCheckpoint]:
    """A committed checkpoint by folder name, checkpoint id, step, or `latest`."""
    storage = _open_root(root)
    committed, _ = scan(storage)
    fence = _local_fence(storage) if ref == "latest" else None
    matches = _matching(committed, ref, fence.latest() if fence is not None else None)
    if not matches:
        raise _no_such(ref, root)
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
    """Entries that could not be inspected -> the error (restore skips them too; verify fails,
    since it could not check them)."""
    checkpoints: list[VerifyReport] = Field(default_factory=list)
    """One report per committed checkpoint verified, newest first."""

    @property
    def ok(self) -> bool:
        """Restore can open the root, the records agree, at least one checkpoint was verified,
        nothing was skipped and every checkpoint verified; residue does not count."""
        return (
            not self.problems
            and not self.uninspectable
            and bool(self.checkpoints)
            and all(r.ok for r in self.checkpoints)
        )


def _pointer_problems(
    storage: CheckpointStorage,
    latest: LatestPointer,
    committed: list[CommittedCheckpoint],
    other: list[Uncommitted],
    generation: int | None,
    names: tuple[str, str] = (GENERATION_FILE, LATEST_FILE),
) -> list[str]:
    """Whether the latest pointer names a committed folder and agrees with its commit record.
    `names`: the files holding the generation and the pointer."""
    generation_file, latest_file = names
    where = f"{storage.path(latest_file)} names {latest.folder}"
    fix = (
        f"put back the pointer the last publish wrote, or move {latest_file} aside so restore "
        "takes the newest committed checkpoint"
    )
    named = next((c for c in committed if c.folder == latest.folder), None)
    if named is None:
        damaged = next((u for u in other if u.folder == latest.folder), None)
        if damaged is not None:
            return [f"{where}, which is not committed ({damaged.reason}); {fix}"]
        if storage.kind(storage.path(latest.folder)) is None:
            return [f"{where}, which does not exist; {fix}"]
        return [f"{where}, which is not a committed checkpoint folder; {fix}"]
    fields = ("checkpoint_id", "step", "generation", "manifest_sha256")
    differ = [
        f"{field} {getattr(latest, field)} (its {COMMIT_FILE}: {getattr(named.record, field)})"
        for field in fields
        if getattr(latest, field) != getattr(named.record, field)
    ]
    if differ:
        return [f"{where}, but disagrees with it on " + "; ".join(differ) + f"; {fix}"]
    if generation is not None and latest.generation > generation:
        return [
            f"{storage.path(generation_file)} says generation {generation}, but {latest_file} was "
            f"published by generation {latest.generation}: the generation went back, so a fenced "
            f"writer could publish again. Write {latest.generation} or more into it"
        ]
    return []


def verify(
    root: str,
    ref: str | None,
    mode: VerifyMode,
    on_file: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> RootReport:
    """Check what restore and a start read first (the fence's pointer and generation, the
    listing), that the pointer names a committed folder whose commit record it matches, that no
    checkpoint folder carries a broken commit record, list the residue, then verify one
    checkpoint (`ref`) or every committed one. Reads only; creates nothing (not even the fence's
    lock file). `on_total(bytes)` is called once the bytes to read are known (progress bars)."""
    storage = _open_root(root)
    problems: list[str] = []
    generation, latest = None, None
    fence = _local_fence(storage)
    if fence is not None:
        try:
            generation = fence.peek_generation()
        except CheckpointError as exc:
            problems.append(str(exc))
        try:
            latest = fence.latest()
        except CheckpointError as exc:
            problems.append(str(exc))
    try:
        committed, other = scan(storage)
    except CheckpointRootError as exc:
        problems.append(str(exc))
        committed, other = [], []
    problems += [f"{storage.path(u.folder)}: {u.reason}" for u in other if u.damaged]
    names = _fence_names(fence)
    written = storage.kind(storage.path(names[0])) is not None
    if latest is not None:
        problems += _pointer_problems(
            storage, latest, committed, other, generation if written else None, names
        )
    residue, uninspectable = find_residue(
        storage,
        current_generation=generation or 0,
        min_age_seconds=3600.0,
        latest_step=latest.step if latest is not None else None,
    )
    chosen = committed
    if ref is not None:
        chosen = _matching(committed, ref, latest)[:1]
        if not chosen and not any(u.damaged for u in other):
            raise _no_such(ref, root)
    if not chosen:
        problems.append(
            f"no committed checkpoint {'matching ' + repr(ref) + ' ' if ref else ''}in "
            f"{storage.root} verified: nothing was checked"
        )
    if on_total is not None:
        on_total(sum(c.manifest.total_bytes for c in chosen))
    return RootReport(
        root=storage.root,
        problems=problems,
        residue=residue,
        uninspectable=uninspectable,
        checkpoints=[verify_checkpoint(storage, c.path, c.manifest, mode, on_file) for c in chosen],
    )


def _require_checkpoint_root(storage: CheckpointStorage) -> None:
    """GC deletes what it classifies as residue, so it runs only in a folder that is visibly a
    checkpoint root: one holding a fence file, `staging/` or a `<step>-<id>` entry."""
    try:
        names = {name for name, _ in storage.entries(storage.root)}
    except OSError as exc:
        raise CheckpointRootError(
            f"cannot list {storage.root}: {type(exc).__name__}: {exc}. Make it a folder this "
            "user can read."
        ) from exc
    if names & (FENCE_FILES | {STAGING}) or any(parse_folder(n) for n in names):
        return
    raise CheckpointError(
        f"{storage.root} is not a checkpoint root: it holds none of "
        f"{', '.join(sorted(FENCE_FILES))}, {STAGING}/ or a <step>-<checkpoint id>/ folder, and "
        "GC removes files, so it refuses. "
        "Pass a run id or a run's checkpoints folder (<root>/runs/<run id>/checkpoints)."
    )


def collect(
    root: str, min_age_seconds: float, max_entries: int, *, dry_run: bool = False
) -> GcReport:
    if not (math.isfinite(min_age_seconds) and min_age_seconds >= 0):
        raise CheckpointError(
            f"min_age_seconds must be a finite number >= 0, not {min_age_seconds}"
        )
    if max_entries < 1:
        raise CheckpointError(f"max_entries must be at least 1, not {max_entries}")
    storage = _open_root(root)
    _require_checkpoint_root(storage)
    fence = _local_fence(storage)
    generation = fence.current_generation() if fence is not None else 0
    return collect_residue(
        storage,
        current_generation=generation,
        min_age_seconds=min_age_seconds,
        max_entries=max_entries,
        latest_step=latest.step if fence and (latest := fence.latest()) else None,
        dry_run=dry_run,
    )


def export(root: str, ref: str, out_dir: str, **options: Any) -> "ReleaseManifest":
    """Export checkpoint `ref` of `root` into `out_dir`; `options` are `export_model`'s (the
    export source and format)."""
    storage, found = find(root, ref)
    inside = storage.is_local and os.path.commonpath(
        [os.path.realpath(out_dir), os.path.realpath(storage.root)]
    ) == os.path.realpath(storage.root)
    if inside:
        raise CheckpointError(
            f"export folder {out_dir} is inside the checkpoint folder; exports are kept apart "
            "from training state. Choose a folder outside it, e.g. <root>/runs/<run>/exports/."
        )
    from runwright.ckpt.export import export_model

    return export_model(storage, found, out_dir, **options)
