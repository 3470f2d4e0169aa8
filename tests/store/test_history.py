"""Reads of a run's event log cost what they return (store/history.py, migration
0102_event_indexes): the same answers as filtering the whole log, from a store migrated from
the schema before the indexes, and `status` does not read a long run's steps."""

import sqlalchemy as sa

from runwright.control.summary import run_summary
from runwright.events import EventType
from runwright.store import Store
from runwright.store.schema import events, runs

KINDS = (
    EventType.STEP_HEALTHY,
    EventType.STEP_HEALTHY,
    EventType.STEP_HEALTHY,
    EventType.STATE_CHANGED,
    EventType.RESTORED,
    EventType.CHECKPOINT_COMMITTED,
    EventType.STALE_WRITE_REJECTED,
)


def _run_row(run_id: str) -> dict:
    return {
        "run_id": run_id,
        "name": "t",
        "spec_hash": "h" * 64,
        "spec": {"name": "t"},
        "plan": {},
        "generation": 2,
        "state": "RUNNING",
        "workdir": "/w",
        "root": "/r",
        "created_unix_s": 1.0,
        "updated_unix_s": 1.0,
    }


def _event_rows(run_id: str, count: int, first: int = 0, kinds=KINDS) -> list[dict]:
    rows = []
    for n in range(first, first + count):
        kind = kinds[n % len(kinds)]
        stale = kind == EventType.STALE_WRITE_REJECTED
        rows.append(
            {
                "event_id": f"{run_id}:{n}",
                "run_id": run_id,
                "generation": 1 + n % 2,
                "type": kind,
                "step": n // 3 if n % 5 else None,
                "world_size": 2,
                "checkpoint_id": None,
                "time_unix_s": 100.0 + n,
                "attributes": (
                    {
                        "writer_generation": n % 3,
                        "rejected_type": "STEP_HEALTHY",
                        "run_generation": 2,
                        # a folded step row of four ranks, every other time
                        **({"reports": 4} if n % 2 else {}),
                    }
                    if stale
                    else {"rank": n % 2}
                ),
            }
        )
    return rows


def _upgrade(url: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    from runwright.store.engine import MIGRATIONS_DIR

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.execute(runs.insert(), [_run_row("run-a"), _run_row("run-b")])
        conn.execute(events.insert(), _event_rows("run-a", 300) + _event_rows("run-b", 50))
    engine.dispose()


def test_the_indexed_reads_give_what_filtering_the_whole_log_gave(store_url):
    """A store written before 0102 migrates on open, gains the indexes, and every read form
    answers as filtering the whole log in Python would (the reads before the indexes)."""
    _upgrade(store_url, "0101_run_leases")
    store = Store(store_url)
    try:
        with store.engine.connect() as conn:
            indexes = {i["name"]: i["column_names"] for i in sa.inspect(conn).get_indexes("events")}
        assert indexes["ix_events_run_id_type_seq"] == ["run_id", "type", "seq"]
        assert indexes["ix_events_run_id_seq"] == ["run_id", "seq"]
        assert "ix_events_run_id" not in indexes
        log = store.events("run-a")
        assert len(log) == 300 and [e.seq for e in log] == sorted(e.seq for e in log)
        pair = (EventType.STATE_CHANGED, EventType.RESTORED)
        middle = log[150].seq
        cases = [
            (dict(types=pair), [e for e in log if e.type in pair]),
            (dict(types=[EventType.RESTORED]), [e for e in log if e.type == EventType.RESTORED]),
            (
                dict(after_seq=middle, types=pair),
                [e for e in log if e.seq > middle and e.type in pair],
            ),
            (dict(types=pair, limit=7), [e for e in log if e.type in pair][:7]),
            (dict(newest=20), log[-20:]),
            (dict(after_seq=middle, newest=5), log[-5:]),
            (dict(after_seq=log[-3].seq), log[-2:]),
        ]
        for query, expected in cases:
            assert store.events("run-a", **query) == expected, query
        stale = [e for e in log if e.type == EventType.STALE_WRITE_REJECTED]
        tally = store.stale_write_tally("run-a")
        assert [(t.writer_generation, t.count) for t in tally] == [
            (
                w,
                sum(
                    e.attributes.get("reports", 1)
                    for e in stale
                    if e.attributes["writer_generation"] == w
                ),
            )
            for w in (0, 1, 2)
        ]
        for row in tally:
            mine = [e for e in stale if e.attributes["writer_generation"] == row.writer_generation]
            steps = [e.step for e in mine if e.step is not None]
            assert (row.first_step, row.last_step) == (min(steps), max(steps))
            assert (row.first_unix_s, row.last_unix_s) == (
                mine[0].time_unix_s,
                mine[-1].time_unix_s,
            )
            assert row.rejected_type == "STEP_HEALTHY" and row.run_generation == 2
    finally:
        store.close()


def _vm_steps_of_status(url: str) -> int:
    """SQLite virtual-machine instructions (in thousands) one `run_summary` of run-a costs: what
    the database did, whatever it returned."""
    store = Store(url)
    steps = [0]

    def count(dbapi_conn, _record, _proxy) -> None:
        def tick() -> int:
            steps[0] += 1
            return 0

        dbapi_conn.set_progress_handler(tick, 1000)

    sa.event.listen(store.engine, "checkout", count)
    try:
        summary = run_summary(store, "run-a", with_events=False)
    finally:
        store.close()
    assert summary["state_history"][0] == "CREATED" and summary["stale_writes"]
    return steps[0]


def test_status_does_not_read_the_steps_of_a_long_run(tmp_path):
    """Ten times the STEP_HEALTHY rows leave `status`'s database work where it was: it seeks the
    rows it shows (SQLite's instruction count, which a scan of the log multiplies by ten)."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    Store(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(runs.insert(), [_run_row("run-a")])
        conn.execute(events.insert(), _event_rows("run-a", 210))
        conn.execute(
            events.insert(), _event_rows("run-a", 1_000, 1_000, kinds=[EventType.STEP_HEALTHY])
        )
    short = _vm_steps_of_status(url)
    with engine.begin() as conn:
        conn.execute(
            events.insert(), _event_rows("run-a", 9_000, 10_000, kinds=[EventType.STEP_HEALTHY])
        )
    engine.dispose()
    long = _vm_steps_of_status(url)
    assert long <= short * 1.2 + 5, (short, long)
