"""Checkpoints and datasets known to the store.

Publishing a checkpoint is the fenced compare-and-set of ARCHITECTURE.md's commit protocol,
step (5): the run's latest pointer moves iff the writer's generation is the run's current one and
the new step is not older than the current latest. A stale publish is rejected and recorded.
"""

import time
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from runwright.store.records import CheckpointRow, DatasetRow, NewEvent, Outcome, WriteResult
from runwright.store.schema import checkpoints, datasets, runs

if TYPE_CHECKING:
    from runwright.store.store import Store

STAGED = "STAGED"
COMMITTED = "COMMITTED"
DELETED = "DELETED"


class CheckpointCatalog:
    def __init__(self, store: "Store") -> None:
        self._store = store
        self._engine = store.engine

    def record_staged(
        self,
        *,
        run_id: str,
        checkpoint_id: str,
        step: int,
        generation: int,
        path: str,
        attributes: dict[str, Any] | None = None,
    ) -> Outcome:
        """Note a checkpoint being written. Not fenced: a stale writer may finish its bytes."""
        return _insert_once(
            self._engine,
            checkpoints.insert().values(
                checkpoint_id=checkpoint_id,
                run_id=run_id,
                step=step,
                generation=generation,
                path=path,
                status=STAGED,
                attributes=attributes or {},
                created_unix_s=time.time(),
            ),
        )

    def publish(
        self,
        *,
        run_id: str,
        checkpoint_id: str,
        step: int,
        generation: int,
        path: str,
        manifest_sha256: str,
        attributes: dict[str, Any] | None = None,
    ) -> WriteResult:
        """Move the run's latest pointer to this committed checkpoint under the fence."""
        latest_step = (
            sa.select(checkpoints.c.step)
            .where(checkpoints.c.checkpoint_id == runs.c.latest_checkpoint_id)
            .scalar_subquery()
        )
        with self._engine.begin() as conn:
            current = conn.execute(
                sa.select(runs.c.generation, runs.c.latest_checkpoint_id).where(
                    runs.c.run_id == run_id
                )
            ).first()
            if current is not None and current.latest_checkpoint_id == checkpoint_id:
                return WriteResult(outcome=Outcome.ALREADY_APPLIED, run=None)
            moved = conn.execute(
                runs.update()
                .where(
                    runs.c.run_id == run_id,
                    runs.c.generation == generation,
                    sa.or_(runs.c.latest_checkpoint_id.is_(None), latest_step <= step),
                )
                .values(latest_checkpoint_id=checkpoint_id, updated_unix_s=time.time())
            ).rowcount
            if moved == 1:
                row = {
                    "status": COMMITTED,
                    "manifest_sha256": manifest_sha256,
                    "path": path,
                    "attributes": attributes or {},
                }
                updated = conn.execute(
                    checkpoints.update()
                    .where(checkpoints.c.checkpoint_id == checkpoint_id)
                    .values(**row)
                ).rowcount
                if updated == 0:
                    conn.execute(
                        checkpoints.insert().values(
                            checkpoint_id=checkpoint_id,
                            run_id=run_id,
                            step=step,
                            generation=generation,
                            created_unix_s=time.time(),
                            **row,
                        )
                    )
        run = self._store.get_run(run_id)
        if moved == 1:
            return WriteResult(outcome=Outcome.APPLIED, run=run)
        if run.generation != generation:
            self._store.append_event(
                NewEvent(
                    event_id=f"stale-publish:{checkpoint_id}:{generation}",
                    run_id=run_id,
                    generation=run.generation,
                    type="STALE_WRITE_REJECTED",
                    step=step,
                    checkpoint_id=checkpoint_id,
                    time_unix_s=time.time(),
                    attributes={
                        "rejected_type": "CHECKPOINT_PUBLISH",
                        "writer_generation": generation,
                        "run_generation": run.generation,
                    },
                ),
                fenced=False,
            )
            return WriteResult(
                outcome=Outcome.STALE_GENERATION,
                run=run,
                detail=f"publisher generation {generation} != run generation {run.generation}",
            )
        return WriteResult(
            outcome=Outcome.INVALID_TRANSITION,
            run=run,
            detail=f"step {step} is older than the latest checkpoint {run.latest_checkpoint_id}",
        )

    def mark_deleted(self, run_id: str, path: str) -> Outcome:
        """Retention removed the checkpoint at `path`; the row stays, as history."""
        with self._engine.begin() as conn:
            changed = conn.execute(
                checkpoints.update()
                .where(
                    checkpoints.c.run_id == run_id,
                    checkpoints.c.path == path,
                    checkpoints.c.status != DELETED,
                )
                .values(status=DELETED)
            ).rowcount
        return Outcome.APPLIED if changed else Outcome.ALREADY_APPLIED

    def list(self, run_id: str, status: str | None = None) -> list[CheckpointRow]:
        query = checkpoints.select().where(checkpoints.c.run_id == run_id)
        if status:
            query = query.where(checkpoints.c.status == status)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(checkpoints.c.step, checkpoints.c.created_unix_s))
            return [CheckpointRow.model_validate(r._asdict()) for r in rows]

    def latest(self, run_id: str) -> CheckpointRow | None:
        run = self._store.get_run(run_id)
        if run.latest_checkpoint_id is None:
            return None
        with self._engine.connect() as conn:
            row = conn.execute(
                checkpoints.select().where(checkpoints.c.checkpoint_id == run.latest_checkpoint_id)
            ).first()
        return CheckpointRow.model_validate(row._asdict()) if row else None


class DatasetCatalog:
    def __init__(self, store: "Store") -> None:
        self._engine = store.engine

    def register(
        self, *, dataset_id: str, name: str, path: str, manifest: dict[str, Any]
    ) -> Outcome:
        """Record a dataset once; its id is its content address, so a repeat is a no-op."""
        return _insert_once(
            self._engine,
            datasets.insert().values(
                dataset_id=dataset_id,
                name=name,
                path=path,
                manifest=manifest,
                created_unix_s=time.time(),
            ),
        )

    def get(self, dataset_id: str) -> DatasetRow | None:
        with self._engine.connect() as conn:
            row = conn.execute(datasets.select().where(datasets.c.dataset_id == dataset_id)).first()
        return DatasetRow.model_validate(row._asdict()) if row else None

    def list(self) -> list[DatasetRow]:
        with self._engine.connect() as conn:
            rows = conn.execute(datasets.select().order_by(datasets.c.created_unix_s))
            return [DatasetRow.model_validate(r._asdict()) for r in rows]


def _insert_once(engine: sa.Engine, statement: sa.Insert) -> Outcome:
    """Insert a row keyed by its id; the same id again is ALREADY_APPLIED, not an error."""
    try:
        with engine.begin() as conn:
            conn.execute(statement)
    except sa.exc.IntegrityError:
        return Outcome.ALREADY_APPLIED
    return Outcome.APPLIED
