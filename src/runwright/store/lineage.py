"""Run inputs: which datasets each run trained on, the index lineage queries read.

The controller's ingest records a run's dataset when the run's loader reports it
(DATA_STAGE_READY: dataset id and tokenizer hash), once per run and dataset; migration 0104 fills
it from the events of runs stored before. `runs_using` answers "which runs used this dataset"
from an index, without reading any run's event log (govern/lineage.py builds on it).
"""

import time
from typing import TYPE_CHECKING

import sqlalchemy as sa

from runwright.records import Record
from runwright.store.schema import run_inputs

if TYPE_CHECKING:
    from runwright.store.store import Store


class RunInput(Record):
    """One dataset a run trained on."""

    run_id: str
    dataset_id: str
    tokenizer_hash: str | None
    generation: int
    """The first generation that reported it."""
    recorded_unix_s: float


class RunInputs:
    """The store's run inputs (`store.inputs`)."""

    def __init__(self, store: "Store") -> None:
        self._engine = store.engine
        self._begin = store.begin

    def record(
        self, run_id: str, dataset_id: str, tokenizer_hash: str | None, generation: int
    ) -> bool:
        """Note that `run_id` trained on `dataset_id`; True the first time, False after."""
        try:
            with self._begin() as conn:
                conn.execute(
                    run_inputs.insert().values(
                        run_id=run_id,
                        dataset_id=dataset_id,
                        tokenizer_hash=tokenizer_hash,
                        generation=generation,
                        recorded_unix_s=time.time(),
                    )
                )
        except sa.exc.IntegrityError:
            return False
        return True

    def runs_using(self, dataset_id: str) -> list[RunInput]:
        """Every run that trained on `dataset_id`, first recorded first."""
        query = (
            run_inputs.select()
            .where(run_inputs.c.dataset_id == dataset_id)
            .order_by(run_inputs.c.recorded_unix_s, run_inputs.c.run_id)
        )
        with self._engine.connect() as conn:
            return [RunInput.model_validate(r._asdict()) for r in conn.execute(query)]

    def of_run(self, run_id: str) -> list[RunInput]:
        """The datasets `run_id` trained on."""
        query = run_inputs.select().where(run_inputs.c.run_id == run_id)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(run_inputs.c.recorded_unix_s))
            return [RunInput.model_validate(r._asdict()) for r in rows]

    def dataset_ids(self, prefix: str) -> list[str]:
        """The recorded dataset ids starting with `prefix` (a user types a short id)."""
        query = (
            sa.select(run_inputs.c.dataset_id)
            .where(run_inputs.c.dataset_id.startswith(prefix, autoescape=True))
            .distinct()
        )
        with self._engine.connect() as conn:
            return sorted(conn.execute(query).scalars())
