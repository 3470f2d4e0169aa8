"""Rows of the append-only event log, inside the caller's transaction: insert once, the ids
already stored, a batch insert that skips them, and the record of a refused stale write."""

import operator
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from pydantic_core import to_json

from runwright.events import EventType
from runwright.store.records import EventRow, NewEvent
from runwright.store.schema import events


def insert_event_once(conn: sa.Connection, event: NewEvent) -> None:
    """Insert an event unless its id is already there, inside the caller's transaction."""
    row = event.model_dump()
    columns = list(row)
    select = sa.select(*[sa.literal(row[c], type_=events.c[c].type) for c in columns]).where(
        ~sa.exists().where(events.c.event_id == event.event_id)
    )
    conn.execute(events.insert().from_select(columns, select))


_SCALAR_COLUMNS = tuple(name for name in EventRow._fields if name != "attributes")
EVENT_COLUMNS = (*_SCALAR_COLUMNS, "attributes")
"""The events table's columns an append writes: an event's fields (seq is the store's)."""
_scalars = operator.attrgetter(*_SCALAR_COLUMNS)


def encode_attributes(attributes: dict[str, Any]) -> str:
    """An event's attributes as the JSON text its column holds. pydantic-core's serializer (Rust,
    already here with pydantic): 0.25 us for a STEP_HEALTHY's attributes against 2.2 us for
    `json.dumps`, with the same values back (NaN and infinities kept as `json.dumps` writes them,
    nested records serialised as `model_dump` would), only without the spaces."""
    return to_json(attributes).decode()


def event_parameters(batch: Sequence[NewEvent | EventRow]) -> list[tuple[Any, ...]]:
    """One driver parameter tuple per event, in EVENT_COLUMNS' order."""
    return [(*_scalars(e), encode_attributes(e.attributes)) for e in batch]


def _markers(conn: sa.Connection, count: int) -> str:
    """`count` positional parameter markers in the driver's style (sqlite3's `?`, psycopg's
    `%s`)."""
    return ", ".join(["?" if conn.dialect.paramstyle == "qmark" else "%s"] * count)


def insert_sql(conn: sa.Connection, *, skip_stored: bool) -> str:
    """The driver's INSERT of one event row; with `skip_stored`, a row whose event id is stored
    already is skipped (ON CONFLICT (event_id) DO NOTHING, which SQLite and PostgreSQL both
    speak)."""
    quote = conn.dialect.identifier_preparer.quote
    sql = (
        f"INSERT INTO {quote(events.name)} ({', '.join(map(quote, EVENT_COLUMNS))}) "
        f"VALUES ({_markers(conn, len(EVENT_COLUMNS))})"
    )
    return f"{sql} ON CONFLICT ({quote('event_id')}) DO NOTHING" if skip_stored else sql


# Ids per IN (...) list: under SQLite's smallest host-parameter limit (999 before 3.32).
_ID_CHUNK = 500


def stored_event_ids(conn: sa.Connection, ids: list[str]) -> set[str]:
    """Which of `ids` the events table already holds: one indexed look-up per 500 ids."""
    quote = conn.dialect.identifier_preparer.quote
    found: set[str] = set()
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start : start + _ID_CHUNK]
        sql = (
            f"SELECT {quote('event_id')} FROM {quote(events.name)} "
            f"WHERE {quote('event_id')} IN ({_markers(conn, len(chunk))})"
        )
        found.update(row[0] for row in conn.exec_driver_sql(sql, tuple(chunk)))
    return found


def insert_new(conn: sa.Connection, batch: Sequence[NewEvent | EventRow]) -> int:
    """Insert `batch` in order, skipping any id already stored (a rejection recorded before, an
    event a controller stored by `append_event` meanwhile), as one driver executemany; returns
    how many rows went in.

    Straight to the driver, not through `events.insert()`: `model_dump` per event and
    SQLAlchemy's per-row parameter processing (a bound-parameter dict and `json.dumps` per row)
    were a quarter of ingest's profiled time on SQLite (benchmarks/control_plane.py,
    docs/control.md), and sqlite3 inserts the same rows about twice as fast (psycopg 1.1-1.2x). No
    RETURNING either: with it, SQLAlchemy sends one long multi-row statement that psycopg parses
    afresh every batch, which halved ingest on PostgreSQL."""
    if not batch:
        return 0
    inserted = conn.exec_driver_sql(insert_sql(conn, skip_stored=True), event_parameters(batch))
    # sqlite3 and psycopg both sum an executemany's rows into rowcount; a skipped row adds 0.
    return inserted.rowcount


def rejection(event: NewEvent | EventRow, current: int) -> NewEvent:
    """The STALE_WRITE_REJECTED event recording that `event` was refused; one per rejected id.
    A folded step row (several ranks' STEP_HEALTHY in one, observe/rank_steps.py: its `ranks`
    attribute) is one write of that many reports: `reports` says how many, so a tally counts
    what the ranks sent, not how the ingest stored it."""
    reports = len(event.attributes.get("ranks") or ()) or 1
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
            **({"reports": reports} if reports > 1 else {}),
        },
    )
