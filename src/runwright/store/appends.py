"""Rows of the append-only event log, inside the caller's transaction: insert once, the ids
already stored, a batch insert that skips them, and the record of a refused stale write."""

import importlib
import time

import sqlalchemy as sa

from runwright.events import EventType
from runwright.store.records import NewEvent
from runwright.store.schema import events


def insert_event_once(conn: sa.Connection, event: NewEvent) -> None:
    """Insert an event unless its id is already there, inside the caller's transaction."""
    row = event.model_dump()
    columns = list(row)
    select = sa.select(*[sa.literal(row[c], type_=events.c[c].type) for c in columns]).where(
        ~sa.exists().where(events.c.event_id == event.event_id)
    )
    conn.execute(events.insert().from_select(columns, select))


# Ids per IN (...) list: under SQLite's smallest host-parameter limit (999 before 3.32).
_ID_CHUNK = 500


def stored_event_ids(conn: sa.Connection, ids: list[str]) -> set[str]:
    """Which of `ids` the events table already holds."""
    found: set[str] = set()
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start : start + _ID_CHUNK]
        found.update(
            conn.execute(sa.select(events.c.event_id).where(events.c.event_id.in_(chunk))).scalars()
        )
    return found


def insert_new(conn: sa.Connection, batch: list[NewEvent]) -> None:
    """Insert `batch` in order, skipping any id already stored (INSERT ... ON CONFLICT (event_id)
    DO NOTHING, which SQLite and PostgreSQL both speak: a rejection recorded before, an event a
    controller stored by `append_event` meanwhile). No RETURNING: with it, SQLAlchemy sends one
    long multi-row statement that psycopg parses afresh every batch, which halved ingest on
    PostgreSQL (7,600 against 13,700 events/s, benchmarks/control_plane.py)."""
    if not batch:
        return
    # The dialect's own INSERT, imported on first use: PostgreSQL's module costs a quarter of a
    # second, which a CLI command on a SQLite store would pay for nothing.
    dialect = importlib.import_module(f"sqlalchemy.dialects.{conn.dialect.name}")
    statement = dialect.insert(events).on_conflict_do_nothing(index_elements=[events.c.event_id])
    conn.execute(statement, [e.model_dump() for e in batch])


def rejection(event: NewEvent, current: int) -> NewEvent:
    """The STALE_WRITE_REJECTED event recording that `event` was refused; one per rejected id."""
    return NewEvent(
        event_id=f"stale:{event.event_id}",
        run_id=event.run_id,
        generation=current,
        type=EventType.STALE_WRITE_REJECTED,
        step=event.step,
        time_unix_s=time.time(),
        attributes={
            "rejected_type": event.type,
            "writer_generation": event.generation,
            "run_generation": current,
            "rejected_event_id": event.event_id,
        },
    )
