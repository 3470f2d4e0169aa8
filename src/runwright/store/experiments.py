"""Experiments (issue 25): runs grouped under an owner and a hypothesis, in the store.

An experiment is a row per (project, name) and a row per run it groups, numbered in the order
the runs were added (the first is the comparisons' default reference). Rows are only added:
a run added twice is kept once, and nothing is rewritten. Each change commits with its audit
record. What the runs have in common, and why one cannot be compared with another, is computed
from their evidence when asked (govern/experiments.py), never stored.
"""

import time
from typing import TYPE_CHECKING

import sqlalchemy as sa
from pydantic import Field

from runwright.records import Record
from runwright.store.audit import NewAudit, insert_audit
from runwright.store.schema import metadata

if TYPE_CHECKING:
    from runwright.store.store import Store

experiments = sa.Table(
    "experiments",
    metadata,
    sa.Column("project", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("owner", sa.String(200), nullable=False),
    sa.Column("hypothesis", sa.Text, nullable=False),
    sa.Column("created_by", sa.String(200)),
    sa.Column("created_unix_s", sa.Float, nullable=False),
)
experiment_runs = sa.Table(
    "experiment_runs",
    metadata,
    sa.Column("project", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("added_by", sa.String(200)),
    sa.Column("added_unix_s", sa.Float, nullable=False),
    sa.Index("ix_experiment_runs_run", "run_id"),
)


class Experiment(Record):
    """One experiment and its runs."""

    project: str
    name: str
    owner: str
    hypothesis: str
    created_unix_s: float
    created_by: str | None = None
    runs: list[str] = Field(default_factory=list)
    """Run ids, in the order they were added; the first is the reference unless one is named."""


class Experiments:
    """The store's experiments (`store.experiments`)."""

    def __init__(self, store: "Store") -> None:
        self._engine = store.engine
        self._begin = store.begin

    def create(self, experiment: Experiment, audit: NewAudit) -> Experiment | None:
        """Write a new experiment with its audit record; None when the project has one of that
        name already (nothing written)."""
        values = experiment.model_dump(exclude={"runs"})
        try:
            with self._begin() as conn:
                conn.execute(experiments.insert().values(**values))
                insert_audit(conn, audit)
        except sa.exc.IntegrityError:
            return None
        return experiment.model_copy(update={"runs": []})

    def get(self, project: str, name: str) -> Experiment | None:
        with self._engine.connect() as conn:
            return self._get(conn, project, name)

    def of_project(self, project: str | None) -> list[Experiment]:
        """Every experiment of `project` (None: of every project), by name."""
        query = experiments.select().order_by(experiments.c.project, experiments.c.name)
        if project is not None:
            query = query.where(experiments.c.project == project)
        with self._engine.connect() as conn:
            rows = list(conn.execute(query))
            return [self._get(conn, r.project, r.name) or _experiment(r, []) for r in rows]

    def add_runs(
        self, project: str, name: str, run_ids: list[str], by: str | None, audit: NewAudit
    ) -> Experiment | None:
        """Add the runs not yet in the experiment after the ones that are, with the audit
        record, in one transaction; None when there is no such experiment."""
        with self._begin() as conn:
            current = self._get(conn, project, name)
            if current is None:
                return None
            now = time.time()
            new = [r for r in dict.fromkeys(run_ids) if r not in current.runs]
            for offset, run_id in enumerate(new):
                conn.execute(
                    experiment_runs.insert().values(
                        project=project,
                        name=name,
                        run_id=run_id,
                        position=len(current.runs) + offset,
                        added_by=by,
                        added_unix_s=now,
                    )
                )
            insert_audit(conn, audit)
        return current.model_copy(update={"runs": [*current.runs, *new]})

    @staticmethod
    def _get(conn: sa.Connection, project: str, name: str) -> Experiment | None:
        where = (experiments.c.project == project) & (experiments.c.name == name)
        row = conn.execute(experiments.select().where(where)).first()
        if row is None:
            return None
        runs = conn.execute(
            sa.select(experiment_runs.c.run_id)
            .where((experiment_runs.c.project == project) & (experiment_runs.c.name == name))
            .order_by(experiment_runs.c.position)
        )
        return _experiment(row, [r.run_id for r in runs])


def _experiment(row: sa.Row, runs: list[str]) -> Experiment:
    return Experiment.model_validate({**row._asdict(), "runs": runs})
