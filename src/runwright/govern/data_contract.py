"""The data contract (issue 25): datasets' use policies checked against runs, withdrawals reaching
the runs, checkpoints and releases that used the data, and deletion that leaves a tombstone.

The policy in force for a dataset is its newest stored version (store/dataset_policies.py), else
version 0 read from the build's tags (data/policy.py). Who may change it is decided above, in
runwright.access (the policy's owner or a site admin); this module only reads and writes.
"""

import datetime as dt
import functools
import re
import shutil
from pathlib import Path

from runwright.data.errors import DataError
from runwright.data.format.dataset import cache_copy
from runwright.data.format.manifest import read_manifest
from runwright.data.policy import (
    CLASS_ORDER,
    DataClass,
    PolicyVersion,
    Refusal,
    Standing,
    policy_from_tags,
    refusals,
)
from runwright.errors import RunwrightError
from runwright.govern.lineage import (
    DatasetLineage,
    LineageError,
    dataset_lineage,
    resolve_dataset,
)
from runwright.govern.preflight import dataset_folder
from runwright.layout import dataset_dir, datasets_dir
from runwright.records import Record
from runwright.spec import JobSpec
from runwright.store import Store

DATASET_ID = re.compile(r"[0-9a-f]{64}")


class DataStanding(Record):
    """A dataset a run trained on, as its policy stands now (a report's data section)."""

    dataset_id: str
    """The dataset."""
    standing: Standing
    """Active, withdrawn or deleted."""
    version: int
    """The policy version in force."""
    reason: str | None = None
    """Why it was withdrawn or deleted."""
    changed_by: str | None = None
    """Who withdrew or deleted it."""
    changed_unix_s: float | None = None
    """When."""

    def sentence(self) -> str:
        """One line for a report: what happened to the data since the run trained on it."""
        if self.standing is Standing.ACTIVE:
            return f"dataset {self.dataset_id[:16]}: in use (policy v{self.version})"
        when = (
            dt.datetime.fromtimestamp(self.changed_unix_s, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
            if self.changed_unix_s
            else "at an unknown time"
        )
        return (
            f"dataset {self.dataset_id[:16]}: {self.standing.value} by {self.changed_by} on "
            f"{when}: {self.reason or 'no reason given'}"
            + (
                "; its shards are gone, this report shows what was recorded"
                if self.standing is Standing.DELETED
                else ""
            )
        )


def tags_of(store: Store, root: Path, dataset_id: str) -> dict[str, str]:
    """The build's tags: from the dataset's folder under `root`, else the catalog's copy of its
    manifest, else none (a dataset known only from a run's report)."""
    manifest = dataset_dir(root, dataset_id) / "manifest.json"
    try:
        return dict(_tags_at(str(manifest.parent), manifest.stat().st_mtime_ns))
    except (OSError, DataError):
        pass
    row = store.datasets.get(dataset_id)
    return dict((row.manifest.get("tags") or {}) if row else {})


@functools.lru_cache(maxsize=256)
def _tags_at(folder: str, mtime_ns: int) -> tuple[tuple[str, str], ...]:
    """A manifest's tags, read once per folder and modification time: a listing's redaction
    asks for every run's datasets, and a manifest can be megabytes."""
    return tuple(sorted(read_manifest(folder).tags.items()))


def current(
    store: Store | None,
    dataset_id: str,
    tags: dict[str, str] | None = None,
    root: Path | None = None,
) -> PolicyVersion:
    """The policy version in force for `dataset_id` (`tags`: the build's, when already read;
    without a store, the build's tags are all there is)."""
    stored = store.policies.latest(dataset_id) if store is not None else None
    if stored is not None:
        return stored
    if tags is None and store is None:
        tags = {}
    if tags is None:
        tags = tags_of(store, root, dataset_id) if root is not None else {}
    return PolicyVersion(dataset_id=dataset_id, version=0, policy=policy_from_tags(tags))


def resolve(store: Store, root: Path, given: str) -> str:
    """The dataset id `given` names: an id of a folder under `root`, a folder, or what the
    lineage query resolves (a prefix or catalog name of a dataset the store knows)."""
    folders = datasets_dir(root)
    here = (
        [p.name for p in folders.iterdir() if DATASET_ID.fullmatch(p.name)]
        if folders.is_dir() and given
        else []
    )
    if given in here:
        return given
    matching = [name for name in here if name.startswith(given)]
    if len(matching) == 1 and given.isalnum():
        return matching[0]
    return resolve_dataset(store, given)


def spec_datasets(spec: JobSpec, workdir: Path) -> list[tuple[str, dict[str, str]]]:
    """(dataset id, build tags) of each dataset the spec names: its folder's manifest, or for a
    URL the spec's `data.manifest_id` (its tags then come from the store)."""
    if spec.data.dataset is None:
        return []
    folder = dataset_folder(spec, workdir)
    if folder is not None:
        try:
            manifest = read_manifest(folder)
        except DataError:
            # A folder named by its id whose manifest is gone (deleted): its tombstone answers.
            # Anything else wrong with the folder is the preflight's to name.
            return [(folder.name, {})] if DATASET_ID.fullmatch(folder.name) else []
        return [(manifest.dataset_id, dict(manifest.tags))]
    return [(spec.data.manifest_id, {})] if spec.data.manifest_id else []


def use_refusals(
    store: Store | None,
    spec: JobSpec,
    workdir: Path,
    project: str | None,
    root: Path,
    today: dt.date | None = None,
) -> list[Refusal]:
    """Every way the policies of the spec's datasets forbid it (data/policy.py `refusals`)."""
    today = today or dt.datetime.now(dt.UTC).date()
    found: list[Refusal] = []
    for dataset_id, tags in spec_datasets(spec, workdir):
        version = current(store, dataset_id, tags if tags or store is None else None, root)
        found += refusals(
            version,
            purpose=spec.usage.purpose,
            region=spec.usage.region,
            project=project,
            today=today,
        )
    return found


def reach(store: Store, dataset_id: str) -> DatasetLineage:
    """Every run, checkpoint and release the dataset reaches (none when no run reported it and
    the catalog does not know it)."""
    try:
        return dataset_lineage(store, dataset_id)
    except LineageError:
        return DatasetLineage(dataset_id=dataset_id, name=None, path=None, runs=[])


def withdrawn_inputs(store: Store, run_id: str) -> list[PolicyVersion]:
    """The datasets `run_id` trained on that are now withdrawn or deleted (their newest
    version): a checkpoint of the run consumed them."""
    return store.policies.not_active([i.dataset_id for i in store.inputs.of_run(run_id)])


def standing_of_run(store: Store, run_id: str, root: Path) -> list[DataStanding]:
    """How each dataset the run (under `root`) trained on stands now."""
    out = []
    for used in store.inputs.of_run(run_id):
        version = current(store, used.dataset_id, root=root)
        out.append(
            DataStanding(
                dataset_id=used.dataset_id,
                standing=version.standing,
                version=version.version,
                reason=version.reason,
                changed_by=version.changed_by,
                changed_unix_s=version.changed_unix_s,
            )
        )
    return out


def strictest_class(store: Store, run_id: str, root: Path) -> DataClass | None:
    """The most sensitive data class among the datasets `run_id` (under `root`) trained on
    (None: none reported)."""
    classes = [
        current(store, i.dataset_id, root=root).policy.data_class
        for i in store.inputs.of_run(run_id)
    ]
    return max(classes, key=CLASS_ORDER.index) if classes else None


def remove_copies(root: Path, dataset_id: str, cache_dirs: list[Path]) -> list[str]:
    """Remove the dataset's folder under `root` and its copy in this host's data cache and in
    each of `cache_dirs`; the paths removed."""
    removed = []
    for folder in [dataset_dir(root, dataset_id), cache_copy(dataset_id)] + [
        cache_copy(dataset_id, d) for d in cache_dirs
    ]:
        if folder.is_dir():
            try:
                shutil.rmtree(folder)
            except OSError as exc:
                raise RunwrightError(
                    f"cannot remove {folder}: {exc}; the dataset is marked deleted, remove the "
                    "folder by hand or run `runwright data delete` again"
                ) from None
            removed.append(str(folder))
    return removed
