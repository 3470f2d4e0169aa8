"""Reads of a run's event log that cost what they return, not what the run has reported.

A run at one step per second on 1,024 ranks stores millions of STEP_HEALTHY rows a day, while
`status` shows a dozen state changes and incidents, the controller's passes a few event types, and
`events --type X` one type. Every read here is a seek on an index of the events table (migration
0102_event_indexes: (run_id, type, seq) and (run_id, seq)) followed by the rows it returns, and the
rejected stale writes, which a fenced group can leave by the tens of thousands (issue 19), are
counted by the database instead of fetched one by one.
"""

from collections.abc import Collection

import sqlalchemy as sa

from runwright.events import EventType
from runwright.store.records import Record
from runwright.store.schema import events


class StaleWriteTally(Record):
    """The rejected writes of one fenced writer generation and one event type."""

    writer_generation: int
    """The generation that wrote them after its fence."""
    rejected_type: str
    """The type of the events it tried to store."""
    run_generation: int
    """The newest generation that held the run while they were rejected."""
    count: int
    """How many reports were rejected (a folded step row counts each rank it spoke for)."""
    first_step: int | None
    """The lowest step among them (None when none carried a step)."""
    last_step: int | None
    """The highest step among them."""
    first_unix_s: float
    """When the store rejected the first of them."""
    last_unix_s: float
    """When it rejected the last."""


def select_events(
    run_id: str,
    *,
    after_seq: int = 0,
    types: Collection[str] | None = None,
    limit: int | None = None,
    newest: int | None = None,
    ids: Collection[str] | None = None,
) -> sa.Select:
    """One run's events after `after_seq`, of `types` when given, with one of `ids` when given
    (a seek per id on the event id's unique index), in sequence order; with `newest`, the newest
    that many in descending order (the caller reverses them).

    With two or more `types`, the order is by `seq + 0`, which no index can supply (the trick of
    SQLite's "disqualifying terms", https://sqlite.org/optoverview.html): SQLite's planner
    has no statistics here and, to spare itself a sort, walked (run_id, seq) through every row
    of the run checking each one's type (0.13 s for a dozen rows of a 100,000-event run, ~1 s
    at a million). Without that, it seeks (run_id, type, seq) once per type and sorts what it
    found: the dozen rows. One type needs nothing: (run_id, type, seq) is in seq order already.
    The cost: a `limit` over several common types sorts all their rows before it stops."""
    if limit and newest:
        raise ValueError("select_events takes `limit` or `newest`, not both")
    query = events.select().where(events.c.run_id == run_id)
    if after_seq > 0:
        query = query.where(events.c.seq > after_seq)
    if types:
        query = query.where(events.c.type.in_(sorted(types)))
    if ids is not None:
        query = query.where(events.c.event_id.in_(sorted(ids)))
    if newest:
        return query.order_by(events.c.seq.desc()).limit(newest)
    by_seq = events.c.seq + 0 if types and len(set(types)) > 1 else events.c.seq
    query = query.order_by(by_seq)
    return query.limit(limit) if limit else query


def stale_write_tally(conn: sa.Connection, run_id: str) -> list[StaleWriteTally]:
    """The run's STALE_WRITE_REJECTED events counted by (writer generation, rejected type), in
    that order; the grouping happens in the database (JSON attributes read by json_extract on
    SQLite, ->> on PostgreSQL), so 44,000 rejections return as a handful of rows."""
    attributes = events.c.attributes
    writer = sa.func.coalesce(attributes["writer_generation"].as_integer(), 0)
    kind = sa.func.coalesce(attributes["rejected_type"].as_string(), "None")
    holder = sa.func.coalesce(attributes["run_generation"].as_integer(), events.c.generation)
    query = (
        sa.select(
            writer.label("writer_generation"),
            kind.label("rejected_type"),
            sa.func.max(holder).label("run_generation"),
            sa.func.sum(sa.func.coalesce(attributes["reports"].as_integer(), 1)).label("count"),
            sa.func.min(events.c.step).label("first_step"),
            sa.func.max(events.c.step).label("last_step"),
            sa.func.min(events.c.time_unix_s).label("first_unix_s"),
            sa.func.max(events.c.time_unix_s).label("last_unix_s"),
        )
        .where(events.c.run_id == run_id, events.c.type == EventType.STALE_WRITE_REJECTED)
        .group_by(writer, kind)
        .order_by(writer, kind)
    )
    return [StaleWriteTally.model_validate(row._asdict()) for row in conn.execute(query)]
