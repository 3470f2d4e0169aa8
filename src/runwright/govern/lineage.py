"""Lineage queries (issue 17): which runs and checkpoints used a dataset, for a data deletion or
a licence withdrawal, and what a checkpoint was trained on.

A dataset is named by its id (or a unique prefix), its folder (whose manifest gives the id) or
its catalog name. Its runs come from the store's run inputs (store/lineage.py: what each run's
loaders reported), each with every checkpoint it wrote, deleted ones included (the row stays as
history: what was trained on the data may live on in an export). A checkpoint is named by its
id or a unique prefix; its trace is its run, the run's spec hash and code version, the datasets
and tokenizer the run trained on, and its chain of parents back to the run's first checkpoint
(govern/evidence.py's lineage: recorded parents, else inferred from commits and restores).
"""

from pathlib import Path

from pydantic import Field

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.evidence import CodeVersion, checkpoint_lineage, code_version
from runwright.records import Record
from runwright.store import Store
from runwright.store.lineage import RunInput


class LineageError(RunwrightError):
    """A dataset or checkpoint that cannot be found or is ambiguous; the message says what to
    give instead."""


class CheckpointUse(Record):
    checkpoint_id: str
    step: int
    status: str
    path: str


class ReleaseUse(Record):
    """A release of one of the run's checkpoints in the model registry (store/releases.py):
    what a withdrawal of the data must also reach."""

    release_id: str
    name: str
    version: int
    status: str
    checkpoint_id: str
    export_path: str


class RunUse(Record):
    """One run that trained on the dataset, and the checkpoints it wrote."""

    run_id: str
    name: str
    project: str
    state: str
    tokenizer_hash: str | None
    first_generation: int
    checkpoints: list[CheckpointUse]
    releases: list[ReleaseUse] = Field(default_factory=list)


class DatasetLineage(Record):
    dataset_id: str
    name: str | None
    """The catalog's name for it, when it was registered."""
    path: str | None
    runs: list[RunUse]


class CheckpointTrace(Record):
    checkpoint_id: str
    run_id: str
    run_name: str
    step: int
    generation: int
    status: str
    path: str
    spec_hash: str
    code: CodeVersion
    datasets: list[RunInput]
    parents: list[str]
    """Its parent, the parent's parent, ... back to the run's first checkpoint."""
    releases: list[ReleaseUse] = Field(default_factory=list)
    """Its releases in the model registry."""


def resolve_dataset(store: Store, given: str) -> str:
    """The dataset id `given` names (module docstring); LineageError when none or several."""
    folder = Path(given).expanduser()
    if (folder / "manifest.json").is_file():
        from runwright.data.format.manifest import read_manifest

        return read_manifest(folder).dataset_id
    named = [row.dataset_id for row in store.datasets.list() if row.name == given]
    if len(named) == 1:
        return named[0]
    candidates = set(store.inputs.dataset_ids(given))
    candidates |= {
        row.dataset_id for row in store.datasets.list() if row.dataset_id.startswith(given)
    }
    if len(candidates) == 1:
        return candidates.pop()
    if not candidates:
        raise LineageError(
            f"no dataset {given!r} is known to this store (no run reported it and the catalog "
            "has no such id or name): give a dataset id, a prefix of one, a dataset folder or "
            "its catalog name (`runwright data inspect FOLDER` prints the id)"
        )
    shown = ", ".join(sorted(c[:16] for c in candidates)[:5])
    raise LineageError(f"{given!r} names several datasets ({shown}): give more of the id")


def dataset_lineage(store: Store, given: str) -> DatasetLineage:
    """Every run that trained on the dataset `given` names, with its checkpoints."""
    dataset_id = resolve_dataset(store, given)
    row = store.datasets.get(dataset_id)
    runs = []
    for used in store.inputs.runs_using(dataset_id):
        run = store.get_run(used.run_id)
        runs.append(
            RunUse(
                run_id=run.run_id,
                name=run.name,
                project=run.project,
                state=run.state,
                tokenizer_hash=used.tokenizer_hash,
                first_generation=used.generation,
                checkpoints=[
                    CheckpointUse(
                        checkpoint_id=c.checkpoint_id, step=c.step, status=c.status, path=c.path
                    )
                    for c in store.checkpoints.list(run.run_id)
                ],
                releases=_releases(store, run.run_id),
            )
        )
    return DatasetLineage(
        dataset_id=dataset_id,
        name=row.name if row else None,
        path=row.path if row else None,
        runs=runs,
    )


def _releases(store: Store, run_id: str) -> list[ReleaseUse]:
    return [
        ReleaseUse(
            release_id=r.release_id,
            name=r.name,
            version=r.version,
            status=r.status.value,
            checkpoint_id=r.checkpoint_id,
            export_path=r.export_path,
        )
        for r in store.releases.find(run_ids=[run_id])
    ]


def checkpoint_trace(store: Store, given: str) -> CheckpointTrace:
    """What the checkpoint `given` names was trained on, and where it comes from."""
    found = store.checkpoints.find(given)
    exact = [c for c in found if c.checkpoint_id == given]
    if exact:
        found = exact
    if len(found) != 1:
        if not found:
            raise LineageError(
                f"no checkpoint {given!r} in this store: give a checkpoint id or a prefix of one "
                "(`runwright ckpt list RUN` lists a run's)"
            )
        shown = ", ".join(c.checkpoint_id[:16] for c in found[:5])
        raise LineageError(f"{given!r} names several checkpoints ({shown}): give more of the id")
    row = found[0]
    run = store.get_run(row.run_id)
    events = store.events(run.run_id, types=[EventType.CHECKPOINT_COMMITTED, EventType.RESTORED])
    parent_of = {
        entry.checkpoint_id: entry.parent
        for entry in checkpoint_lineage(store.checkpoints.list(run.run_id), events)
    }
    parents: list[str] = []
    at = parent_of.get(row.checkpoint_id)
    while at is not None and at not in parents and at != row.checkpoint_id:
        parents.append(at)
        at = parent_of.get(at)
    return CheckpointTrace(
        checkpoint_id=row.checkpoint_id,
        run_id=run.run_id,
        run_name=run.name,
        step=row.step,
        generation=row.generation,
        status=row.status,
        path=row.path,
        spec_hash=run.spec_hash,
        code=code_version(run, run.spec),
        datasets=store.inputs.of_run(run.run_id),
        parents=parents,
        releases=[r for r in _releases(store, run.run_id) if r.checkpoint_id == row.checkpoint_id],
    )
