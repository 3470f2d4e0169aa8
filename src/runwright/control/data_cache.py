"""A node's dataset cache past its retention (issue 27, "node-cache entries past their retention"):
what `runwright gc` sweeps besides ended runs.

The cache (`$RUNWRIGHT_DATA_CACHE`, else `~/.cache/runwright/datasets`; data/format/dataset.py)
holds this host's verified copies of remote datasets, one folder per dataset id, shared by every
run of the host: no single run owns an entry, so ownership is the store's view of who reads it.
Only folders named like a dataset id (64 hex digits) are looked at; anything else in the folder
is not runwright's and is never touched. An entry is

- kept while a run that is not terminal reads it (its recorded inputs, or a queued run's
  `data.manifest_id`), whatever its age;
- removed when its dataset is withdrawn or deleted (`data delete` removes this host's copy
  itself; a withdrawn one has no further use);
- removed when it was last used longer ago than the retention: last used is the newest of its
  files' times (a fill writes them) and the last update of any run that read it;
- and a fill's partial file (`.<name>.partial-<pid>`) whose process is gone is removed with it
  or alone.

Removing is idempotent (what is gone is not found again), and a dry run lists what would go.
"""

import os
import shutil
import time
from pathlib import Path

from pydantic import Field

from runwright.control.processes import is_alive
from runwright.control.states import TERMINAL
from runwright.control.sweep import ALL_RUNS
from runwright.data.format.dataset import PARTIAL_FILE
from runwright.errors import NotFoundError, RunwrightError
from runwright.govern.data_contract import DATASET_ID
from runwright.records import Record
from runwright.store import Store

RETENTION_ENV = "RUNWRIGHT_DATA_CACHE_RETENTION_DAYS"
DEFAULT_RETENTION_DAYS = 7.0


class CacheEntry(Record):
    """One dataset copy (or a dead fill's partial file) and what the sweep made of it."""

    path: str
    dataset_id: str
    bytes: int
    last_used_unix_s: float
    verdict: str
    """`kept` or `removed` (`would remove` in a dry run)."""
    because: str


class CacheSweep(Record):
    cache_dir: str
    retention_days: float
    dry_run: bool
    entries: list[CacheEntry] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict)
    """path -> why it could not be removed."""

    @property
    def removed(self) -> list[CacheEntry]:
        return [e for e in self.entries if e.verdict != "kept"]


def retention_days(environ: dict[str, str] | None = None) -> float:
    """The retention from $RUNWRIGHT_DATA_CACHE_RETENTION_DAYS (default 7 days)."""
    raw = (environ if environ is not None else os.environ).get(RETENTION_ENV, "").strip()
    if not raw:
        return DEFAULT_RETENTION_DAYS
    try:
        days = float(raw)
    except ValueError:
        days = -1.0
    if not days >= 0:
        raise RunwrightError(
            f"{RETENTION_ENV}={raw!r}: give the days a cache entry is kept after its last use, "
            f"a number >= 0 (default {DEFAULT_RETENTION_DAYS:g})"
        )
    return days


def _in_use(store: Store) -> dict[str, str]:
    """dataset id -> a live run that reads it."""
    using: dict[str, str] = {}
    for run in store.list_runs(limit=ALL_RUNS):
        if run.state in TERMINAL:
            continue
        manifest_id = (run.spec.get("data") or {}).get("manifest_id")
        if manifest_id:
            using.setdefault(manifest_id, run.run_id)
        for read in store.inputs.of_run(run.run_id):
            using.setdefault(read.dataset_id, run.run_id)
    return using


def _last_run_use(store: Store, dataset_id: str) -> float:
    latest = 0.0
    for read in store.inputs.runs_using(dataset_id):
        try:
            latest = max(latest, store.get_run(read.run_id).updated_unix_s)
        except NotFoundError:  # a run the store no longer has: its read time stands
            latest = max(latest, read.recorded_unix_s)
    return latest


def _size_and_mtime(folder: Path) -> tuple[int, float]:
    """The entry's bytes and its newest file's time: a fill writes each file (and publishes it
    by a rename, which keeps its time); the folder's own time also moves when a partial file is
    removed, so it counts only for an empty folder."""
    size, newest = 0, 0.0
    for path in folder.rglob("*"):
        if PARTIAL_FILE.match(path.name):
            continue
        try:
            stat = path.lstat()
        except OSError:
            continue
        if path.is_file():
            size += stat.st_size
            newest = max(newest, stat.st_mtime)
    return size, newest or folder.stat().st_mtime


def _dead_partials(folder: Path) -> list[Path]:
    found = []
    for path in folder.iterdir():
        matched = PARTIAL_FILE.match(path.name)
        if matched and not is_alive(int(matched["pid"])):
            found.append(path)
    return found


def sweep_data_cache(
    store: Store,
    cache_dir: Path,
    *,
    retention: float | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> CacheSweep:
    """Remove the entries of `cache_dir` no live run reads that are withdrawn, deleted or past
    `retention` days since their last use (module docstring)."""
    days = retention_days() if retention is None else retention
    sweep = CacheSweep(cache_dir=str(cache_dir), retention_days=days, dry_run=dry_run)
    if not cache_dir.is_dir():
        return sweep
    now = time.time() if now is None else now
    using = _in_use(store)
    gone = {v.dataset_id: v for v in store.policies.not_active(
        [p.name for p in cache_dir.iterdir() if DATASET_ID.fullmatch(p.name)]
    )}  # fmt: skip
    verb = "would remove" if dry_run else "removed"
    for folder in sorted(cache_dir.iterdir()):
        if not folder.is_dir() or folder.is_symlink() or not DATASET_ID.fullmatch(folder.name):
            continue
        dataset_id = folder.name
        size, touched = _size_and_mtime(folder)
        last_used = max(touched, _last_run_use(store, dataset_id))
        entry = dict(path=str(folder), dataset_id=dataset_id, bytes=size,
                     last_used_unix_s=last_used)  # fmt: skip
        age_days = (now - last_used) / 86400
        if dataset_id in using:
            because = f"read by run {using[dataset_id]}, not yet ended"
        elif dataset_id in gone:
            because = f"dataset {gone[dataset_id].standing.value}: no run may read it"
        elif age_days > days:
            because = f"last used {age_days:.1f} days ago, past the {days:g}-day retention"
        else:
            because = f"last used {age_days:.1f} days ago, within the {days:g}-day retention"
        remove = dataset_id not in using and (dataset_id in gone or age_days > days)
        partials = [] if remove else _dead_partials(folder)
        for partial in partials:  # a kept entry loses only a dead fill's leftovers
            sweep.entries.append(CacheEntry(
                path=str(partial), dataset_id=dataset_id, bytes=partial.stat().st_size,
                last_used_unix_s=partial.stat().st_mtime, verdict=verb,
                because="a partial file of a fill whose process is gone",
            ))  # fmt: skip
            if not dry_run:
                partial.unlink(missing_ok=True)
        sweep.entries.append(
            CacheEntry(**entry, verdict=verb if remove else "kept", because=because)
        )
        if remove and not dry_run:
            try:
                shutil.rmtree(folder)
            except OSError as exc:
                sweep.failed[str(folder)] = f"{type(exc).__name__}: {exc}"
    return sweep
