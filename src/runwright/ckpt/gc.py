"""Garbage collection of residue: bounded, idempotent, confined to one run's folder, and never
stopped by what it finds.

Residue is every entry of a checkpoint root that is neither one of the fence's files
(`FENCE.lock`, `GENERATION`, `LATEST.json`; `FENCE.json` on an object store; the retention
hold `HOLD.json`, hold.py), nor the `staging/`
folder itself, nor a committed checkpoint. `find_residue` classifies each entry (files and
folders alike, links never followed) and `collect_residue` removes what the rules allow:

- Checkpoint residue: `staging/<id>` (a folder or a file), `<step>-<id>` folders without a valid
  commit record or with a REJECTED marker, a file where a `<step>-<id>/` folder belongs, and
  committed folders of a fenced generation newer than the latest pointer (killed between commit
  record and publish). Removable when its generation (encoded in the checkpoint id) is older
  than the current one (its writer is fenced and can never commit) or when nothing in it changed
  for `min_age_seconds` (its writer is gone); never while a writer in this process fills it.
- Temporary files `<name>.tmp-<pid>` (the fence's pointer and generation writes, durable
  writes): removable when that pid is not running on this host (a dead writer's tmp is never
  read: nobody opens a tmp file but the writer that created it) or when it is older than
  `min_age_seconds` (pids are per host and get reused). On object stores, by age only. Any other
  `*.tmp` or `.tmp-` name: by age.
- Anything else (stray files and folders, symbolic links, FIFOs, a file where `staging/`
  belongs, a fence file that is not a file): GC cannot tell whose it is, so it reports it in
  `kept` with the reason and leaves it.

An entry that cannot be inspected or removed (an OSError: permissions, a link loop) is reported in
`failed` and the pass goes on, so residue never stops a start, a restore or a GC. At most
`max_entries` entries are removed per call, so one call has bounded cost; running it again
continues where it stopped. `runwright ckpt verify` lists the same classification without
removing anything.
"""

import os
import re

from pydantic import Field

from runwright.ckpt.catalog import Uncommitted, read_committed
from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.fence import FENCE_OBJECT, GENERATION_FILE, LATEST_FILE, LOCK_FILE
from runwright.ckpt.hold import HOLD_FILE
from runwright.ckpt.manifest import generation_of
from runwright.ckpt.storage import STAGING, CheckpointStorage, EntryKind, parse_folder
from runwright.records import Record

FENCE_FILES = frozenset({LOCK_FILE, GENERATION_FILE, LATEST_FILE, FENCE_OBJECT, HOLD_FILE})
_TMP_PID = re.compile(r"\.tmp-(?P<pid>\d+)$")


class Residue(Record):
    """One entry of a checkpoint root that belongs to no committed checkpoint and not to the
    fence, and what GC does with it."""

    path: str
    """Path relative to the checkpoint root."""
    kind: EntryKind
    """file, folder, symlink or other (FIFO, socket, device); links are never followed."""
    reason: str
    """What it is, e.g. `temporary file of pid 12345, which is not running`."""
    removable: bool
    """Whether a GC pass now removes it."""
    kept_because: str | None = None
    """Why GC leaves it, when it does (too young, writer alive, in flight, not runwright's)."""


class GcReport(Record):
    """What one GC pass removed and what it left."""

    removed: dict[str, str] = Field(default_factory=dict)
    """Path relative to the checkpoint root -> why it was residue."""
    bytes_freed: int = 0
    """Bytes deleted."""
    kept: dict[str, str] = Field(default_factory=dict)
    """Residue left in place -> why (too young, writer alive, in flight, over the per-call
    bound, or not something GC can classify)."""
    failed: dict[str, str] = Field(default_factory=dict)
    """Entries that could not be inspected or removed -> the error; the pass went on."""
    dry_run: bool = False
    """Nothing was removed: `removed` and `bytes_freed` say what a real pass would do."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (signal 0 probes without sending)."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, OSError):
        return False
    return True


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class _Rules:
    """The classification of one pass (see the module docstring)."""

    def __init__(
        self,
        storage: CheckpointStorage,
        current_generation: int,
        min_age_seconds: float,
        in_flight: frozenset[str],
        latest_step: int | None,
    ) -> None:
        self.storage, self.current_generation = storage, current_generation
        self.min_age_seconds, self.in_flight, self.latest_step = (
            min_age_seconds,
            in_flight,
            latest_step,
        )

    def _young(self, relative: str) -> bool:
        return self.storage.age_seconds(self.storage.path(relative)) < self.min_age_seconds

    def _too_young(self) -> str:
        return f"younger than {self.min_age_seconds:g} s; its writer may be alive"

    @staticmethod
    def keep(relative: str, kind: EntryKind, reason: str, because: str) -> Residue:
        return Residue(
            path=relative, kind=kind, reason=reason, removable=False, kept_because=because
        )

    def unknown(self, relative: str, kind: EntryKind) -> Residue:
        if kind == "symlink":
            return self.keep(relative, kind, "symbolic link", "GC never follows or removes links")
        return self.keep(
            relative,
            kind,
            f"{kind} not written by runwright",
            "GC leaves what it cannot classify; remove it by hand if nothing needs it",
        )

    def top(self, name: str, kind: EntryKind) -> Residue | None:
        """A name directly in the checkpoint root (not `staging/` as a folder)."""
        if name in FENCE_FILES:
            if kind == "file":
                return None
            return self.keep(
                name,
                kind,
                f"a {kind} where the fence's {name} file belongs",
                "the fence cannot read or replace it; move it aside by hand",
            )
        if name == STAGING:
            return self.keep(
                name,
                kind,
                f"a {kind} where the staging folder belongs",
                "saves cannot stage until it is moved aside by hand",
            )
        parsed = parse_folder(name)
        if parsed is not None:
            return self.checkpoint_folder(name, kind, parsed[1])
        return self.temporary(name, kind) or self.unknown(name, kind)

    def staged(self, relative: str, name: str, kind: EntryKind) -> Residue:
        """An entry of `staging/`."""
        if generation_of(name) is None or kind == "symlink":
            return self.temporary(relative, kind) or self.unknown(relative, kind)
        return self.checkpoint(relative, kind, f"staging {kind}", name)

    def checkpoint_folder(self, name: str, kind: EntryKind, checkpoint_id: str) -> Residue | None:
        if kind in ("file", "other"):
            return self.checkpoint(
                name, kind, f"a {kind} where a checkpoint folder belongs", checkpoint_id
            )
        found = read_committed(self.storage, name)
        if isinstance(found, Uncommitted):
            if kind == "symlink":
                return self.keep(
                    name,
                    kind,
                    f"symbolic link, {found.reason}",
                    "GC never follows or removes links",
                )
            return self.checkpoint(name, kind, found.reason, checkpoint_id)
        beyond_pointer = self.latest_step is not None and found.record.step > self.latest_step
        fenced = found.record.generation < self.current_generation
        # An operator's rollback left an ABANDONED one beyond the pointer on purpose: it was
        # published, and is kept as evidence (ckpt/abandon.py).
        if kind == "folder" and beyond_pointer and fenced and found.abandoned is None:
            return self.checkpoint(
                name, kind, "committed but never published (writer fenced)", checkpoint_id
            )
        return None

    def checkpoint(
        self, relative: str, kind: EntryKind, reason: str, checkpoint_id: str
    ) -> Residue:
        """Residue of one checkpoint id: removable once fenced or idle for the minimum age."""
        if checkpoint_id in self.in_flight:
            return self.keep(relative, kind, reason, "being written by this process")
        generation = generation_of(checkpoint_id)
        if generation is not None and generation < self.current_generation:
            return Residue(
                path=relative, kind=kind, reason=f"{reason} (older generation)", removable=True
            )
        if self._young(relative):
            return self.keep(relative, kind, reason, self._too_young())
        return Residue(path=relative, kind=kind, reason=reason, removable=True)

    def temporary(self, relative: str, kind: EntryKind) -> Residue | None:
        """A `*.tmp-<pid>`, `*.tmp` or other `.tmp-` name, or None if it is none of these."""
        name = relative.rsplit("/", 1)[-1]
        match = _TMP_PID.search(name)
        if match is None and not (name.endswith(".tmp") or ".tmp-" in name):
            return None
        if kind == "symlink":
            return None
        if match is not None:
            pid = int(match["pid"])
            reason = f"temporary {kind} of pid {pid}"
            if self.storage.is_local and not pid_alive(pid):
                return Residue(
                    path=relative,
                    kind=kind,
                    reason=f"{reason}, which is not running",
                    removable=True,
                )
            if self._young(relative):
                because = (
                    f"pid {pid} is running and it is younger than {self.min_age_seconds:g} s"
                    if self.storage.is_local
                    else self._too_young()
                )
                return self.keep(relative, kind, reason, because)
            return Residue(path=relative, kind=kind, reason=f"{reason}, abandoned", removable=True)
        reason = f"temporary {kind}"
        if self._young(relative):
            return self.keep(relative, kind, reason, self._too_young())
        return Residue(path=relative, kind=kind, reason=reason, removable=True)


def find_residue(
    storage: CheckpointStorage,
    *,
    current_generation: int,
    min_age_seconds: float,
    in_flight: frozenset[str] = frozenset(),
    latest_step: int | None = None,
) -> tuple[list[Residue], dict[str, str]]:
    """Every residue entry with GC's verdict, and the entries that could not be inspected (path
    -> error). Removes nothing. `latest_step` (the fence's pointer) also marks committed folders
    of an older generation beyond it as residue: their publish never happened and never can."""
    rules = _Rules(storage, current_generation, min_age_seconds, in_flight, latest_step)
    found: list[Residue] = []
    failed: dict[str, str] = {}
    try:
        top = storage.entries(storage.root)
    except OSError as exc:
        return [], {".": _error(exc)}
    for name, kind in top:
        try:
            if name == STAGING and kind == "folder":
                inner = storage.entries(storage.path(STAGING))
            else:
                item = rules.top(name, kind)
                found += [item] if item is not None else []
                continue
        except OSError as exc:
            failed[name] = _error(exc)
            continue
        for staged_name, staged_kind in inner:
            relative = f"{STAGING}/{staged_name}"
            try:
                found.append(rules.staged(relative, staged_name, staged_kind))
            except OSError as exc:
                failed[relative] = _error(exc)
    return found, failed


def collect_residue(
    storage: CheckpointStorage,
    *,
    current_generation: int,
    min_age_seconds: float,
    in_flight: frozenset[str] = frozenset(),
    max_entries: int = 64,
    latest_step: int | None = None,
    dry_run: bool = False,
) -> GcReport:
    """One bounded pass: remove what `find_residue` marks removable, report the rest. A dry
    run removes nothing and reports what it would remove and free."""
    found, failed = find_residue(
        storage,
        current_generation=current_generation,
        min_age_seconds=min_age_seconds,
        in_flight=in_flight,
        latest_step=latest_step,
    )
    removed: dict[str, str] = {}
    kept: dict[str, str] = {}
    freed = 0
    for item in found:
        if not item.removable:
            kept[item.path] = item.kept_because or item.reason
            continue
        if len(removed) >= max_entries:
            kept[item.path] = f"over the per-call bound of {max_entries}; run gc again"
            continue
        try:
            path = storage.path(item.path)
            if dry_run:
                freed += _size(storage, path, item.kind)
            else:
                freed += _remove(storage, path, item.kind)
        except (OSError, CheckpointError) as exc:
            failed[item.path] = _error(exc)
            continue
        removed[item.path] = item.reason
    return GcReport(removed=removed, bytes_freed=freed, kept=kept, failed=failed, dry_run=dry_run)


def _size(storage: CheckpointStorage, path: str, kind: EntryKind) -> int:
    if kind == "folder":
        return storage.tree_bytes(path)
    return os.lstat(path).st_size if storage.is_local else storage.size_bytes(path)


def _remove(storage: CheckpointStorage, path: str, kind: EntryKind) -> int:
    if kind == "folder":
        return storage.remove_tree(path)
    size = os.lstat(path).st_size if storage.is_local else storage.size_bytes(path)
    storage.remove_file(path)
    return size
