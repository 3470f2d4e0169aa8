"""Checkpoints and datasets known to the store.

The catalog records every checkpoint it hears of, for queries (`list`, reports). It is not a
second latest pointer: publishing is the fenced compare-and-set of ARCHITECTURE.md's commit
protocol, step (5), done by the worker through the run's checkpoint fence, and `latest` answers
from that fence (`store/fence.py`). A stale writer's publish is rejected by the fence, and its
CHECKPOINT_COMMITTED event by the store's fenced append (STALE_WRITE_REJECTED).
"""

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from runwright.store.fence import published_latest, run_checkpoint_root
from runwright.store.records import CheckpointRow, DatasetRow, Outcome
from runwright.store.schema import checkpoints, datasets, runs

if TYPE_CHECKING:
    from runwright.store.store import Store

STAGED = "STAGED"
COMMITTED = "COMMITTED"
DELETED = "DELETED"
ABANDONED = "ABANDONED"
"""Committed, then left behind by an operator's rollback to an older checkpoint (kept on storage
with an ABANDONED marker, ckpt/abandon.py; control/operator.py marks the row)."""


class CheckpointCatalog:
    def __init__(self, store: "Store") -> None:
        self._store = store
        self._engine = store.engine
        self._begin = store.begin

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
            self._begin,
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

    def record_committed(
        self,
        *,
        run_id: str,
        checkpoint_id: str,
        step: int,
        generation: int,
        path: str,
        manifest_sha256: str,
        attributes: dict[str, Any] | None = None,
    ) -> Outcome:
        """Note a committed checkpoint in the catalog (for queries), and refresh the run record's
        `latest_checkpoint_id` from the fence's pointer. Nothing here decides what is latest: the
        worker's publish through the run's fence did (`store/fence.py`), and a commit the fence
        did not publish is catalogued but never becomes latest. ALREADY_APPLIED when nothing
        changed."""
        published = published_latest(self._store.get_run(run_id))
        row = {
            "status": COMMITTED,
            "manifest_sha256": manifest_sha256,
            "path": path,
            "attributes": attributes or {},
        }
        with self._begin() as conn:
            changed = conn.execute(
                checkpoints.update()
                .where(
                    checkpoints.c.checkpoint_id == checkpoint_id,
                    checkpoints.c.status.not_in([COMMITTED, ABANDONED]),
                )
                .values(**row)
            ).rowcount
            exists = conn.execute(
                sa.select(checkpoints.c.checkpoint_id).where(
                    checkpoints.c.checkpoint_id == checkpoint_id
                )
            ).first()
            if exists is None:
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
                changed = 1
            if published is not None:
                changed += conn.execute(
                    runs.update()
                    .where(
                        runs.c.run_id == run_id,
                        sa.or_(
                            runs.c.latest_checkpoint_id.is_(None),
                            runs.c.latest_checkpoint_id != published[0].checkpoint_id,
                        ),
                    )
                    .values(latest_checkpoint_id=published[0].checkpoint_id)
                ).rowcount
        return Outcome.APPLIED if changed else Outcome.ALREADY_APPLIED

    def mark_deleted(self, run_id: str, path: str) -> Outcome:
        """Retention removed the checkpoint at `path`; the row stays, as history."""
        with self._begin() as conn:
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

    def mark_abandoned(self, run_id: str, checkpoint_ids: list[str]) -> Outcome:
        """An operator's rollback left these committed checkpoints behind (ABANDONED): they stay
        listed, as history, but are no longer the run's committed ones."""
        if not checkpoint_ids:
            return Outcome.ALREADY_APPLIED
        with self._begin() as conn:
            changed = conn.execute(
                checkpoints.update()
                .where(
                    checkpoints.c.run_id == run_id,
                    checkpoints.c.checkpoint_id.in_(checkpoint_ids),
                    checkpoints.c.status == COMMITTED,
                )
                .values(status=ABANDONED)
            ).rowcount
        return Outcome.APPLIED if changed else Outcome.ALREADY_APPLIED

    def find(self, prefix: str, limit: int = 20) -> list[CheckpointRow]:
        """Checkpoints of any run whose id starts with `prefix` (a user types a short id)."""
        query = (
            checkpoints.select()
            .where(checkpoints.c.checkpoint_id.startswith(prefix, autoescape=True))
            .order_by(checkpoints.c.checkpoint_id)
            .limit(limit)
        )
        with self._engine.connect() as conn:
            return [CheckpointRow.model_validate(r._asdict()) for r in conn.execute(query)]

    def list(self, run_id: str, status: str | None = None) -> list[CheckpointRow]:
        query = checkpoints.select().where(checkpoints.c.run_id == run_id)
        if status:
            query = query.where(checkpoints.c.status == status)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(checkpoints.c.step, checkpoints.c.created_unix_s))
            return [CheckpointRow.model_validate(r._asdict()) for r in rows]

    def latest(self, run_id: str) -> CheckpointRow | None:
        """The run's latest checkpoint: the one its fence's pointer names (the authority), with
        the catalog's row for it, or a row built from the pointer when the controller has not
        ingested that commit yet. None before the first publish."""
        run = self._store.get_run(run_id)
        published = published_latest(run)
        if published is None:
            return None
        pointer, published_unix_s = published
        with self._engine.connect() as conn:
            row = conn.execute(
                checkpoints.select().where(checkpoints.c.checkpoint_id == pointer.checkpoint_id)
            ).first()
        if row is not None:
            return CheckpointRow.model_validate(row._asdict())
        return CheckpointRow(
            checkpoint_id=pointer.checkpoint_id,
            run_id=run_id,
            step=pointer.step,
            generation=pointer.generation,
            path=f"{run_checkpoint_root(run)}/{pointer.folder}",
            status=COMMITTED,
            manifest_sha256=pointer.manifest_sha256,
            attributes={},
            created_unix_s=published_unix_s,
        )


class DatasetCatalog:
    def __init__(self, store: "Store") -> None:
        self._engine = store.engine
        self._begin = store.begin

    def register(
        self, *, dataset_id: str, name: str, path: str, manifest: dict[str, Any]
    ) -> Outcome:
        """Record a dataset once; its id is its content address, so a repeat is a no-op."""
        return _insert_once(
            self._begin,
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


def _insert_once(
    begin: Callable[[], AbstractContextManager[sa.Connection]], statement: sa.Insert
) -> Outcome:
    """Insert a row keyed by its id; the same id again is ALREADY_APPLIED, not an error."""
    try:
        with begin() as conn:
            conn.execute(statement)
    except sa.exc.IntegrityError:
        return Outcome.ALREADY_APPLIED
    return Outcome.APPLIED
