"""Run inputs on SQLite and PostgreSQL: recorded once per run and dataset, queried by dataset
from an index, and filled on migration from the DATA_STAGE_READY events of runs stored
before lineage existed."""

import sqlalchemy as sa

from runwright.store import Store
from runwright.store.schema import events, runs


def _old_store(url: str) -> None:
    """A store at revision 0103 (before run inputs) holding two runs' loader reports."""
    from alembic import command
    from alembic.config import Config

    from runwright.store.engine import MIGRATIONS_DIR

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.upgrade(config, "0103_store_locks")
        conn.execute(
            runs.insert(),
            [
                {"run_id": r, "name": r, "spec_hash": "h" * 64, "spec": {}, "plan": {},
                 "generation": 2, "state": "SUCCEEDED", "workdir": "/w", "root": "/r",
                 "created_unix_s": 1.0, "updated_unix_s": 1.0}
                for r in ("old-a", "old-b")
            ],
        )  # fmt: skip
        reports = [("old-a", 1, "d" * 64), ("old-a", 2, "d" * 64), ("old-b", 1, "e" * 64)]
        conn.execute(
            events.insert(),
            [
                {"event_id": f"{run}:{gen}:ready", "run_id": run, "generation": gen,
                 "type": "DATA_STAGE_READY", "step": None, "world_size": 2,
                 "checkpoint_id": None, "time_unix_s": 10.0 + gen,
                 "attributes": {"dataset_id": dataset, "tokenizer_hash": "t" * 64, "rank": 0}}
                for run, gen, dataset in reports
            ],
        )  # fmt: skip
    engine.dispose()


def test_old_runs_are_found_after_the_migration_and_new_ones_once_each(store_url):
    _old_store(store_url)
    store = Store(store_url)
    try:
        (used,) = store.inputs.runs_using("d" * 64)
        assert (used.run_id, used.generation, used.tokenizer_hash) == ("old-a", 1, "t" * 64)
        assert [u.run_id for u in store.inputs.runs_using("e" * 64)] == ["old-b"]
        assert store.inputs.record("old-b", "d" * 64, None, 2) is True
        assert store.inputs.record("old-b", "d" * 64, None, 3) is False  # once per dataset
        assert [u.run_id for u in store.inputs.runs_using("d" * 64)] == ["old-a", "old-b"]
        assert [u.dataset_id for u in store.inputs.of_run("old-b")] == ["e" * 64, "d" * 64]
        assert store.inputs.dataset_ids("dd") == ["d" * 64]
        assert store.inputs.dataset_ids("%") == []  # a prefix is text, not a pattern
    finally:
        store.close()
