"""The audit log: who did what to which run, token, role or checkpoint, through the API or a CLI,
with what outcome; append-only.

Seed 000 asks for an audit record of every action that changes a job, accesses data or
checkpoints, or changes who may do what, and for append-only logs where a correction is a new
record, never an edit. Here that holds three ways: this module only ever INSERTs; nothing else
names the table; and the database refuses UPDATE and DELETE of its rows by trigger (migration
0100_server), so even a SQL client cannot rewrite history without dropping the trigger first.
Parameters hold names, ids, hashes and numbers, never sample text or secrets (`runwright.access`).
"""

import time
from typing import Any

import sqlalchemy as sa
from pydantic import Field

from runwright.records import Record
from runwright.store.schema import metadata

OUTCOMES = ("ok", "denied", "failed")
"""ok: it was done; denied: the actor may not do it (or may not see the target); failed: it was
allowed but could not be done (the detail says why)."""

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("time_unix_s", sa.Float, nullable=False, index=True),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("via", sa.String(16), nullable=False),
    sa.Column("project", sa.String(100), index=True),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("target", sa.String(300)),
    sa.Column("parameters", sa.JSON, nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("request_id", sa.String(64)),
)


class NewAudit(Record):
    """An audit record to append."""

    actor: str
    """Principal name through the API; `local:<os user>` from a CLI on the store itself."""
    via: str
    """`api` or `cli`."""
    project: str | None
    """Project the action concerns, if any."""
    action: str
    """What was attempted, e.g. `run.submit`, `run.cancel`, `token.create`, `role.grant`."""
    target: str | None = None
    """What it was attempted on (a run id, `token:<id>`, `principal:<name>`)."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The request's parameters that matter (names, ids, hashes, numbers)."""
    outcome: str = "ok"
    """ok, denied or failed."""
    detail: str | None = None
    """Why it was denied or failed, in words."""
    request_id: str | None = None
    """The API request's id (X-Request-ID), to match the server's log line."""


class AuditEntry(NewAudit):
    """An audit record as stored."""

    seq: int
    """Position in the log."""
    time_unix_s: float
    """When it was appended."""


def insert_audit(conn: sa.Connection, entry: NewAudit) -> None:
    """Append inside the caller's transaction (the change and its record commit together)."""
    conn.execute(audit_log.insert().values(**entry.model_dump(), time_unix_s=time.time()))


class AuditLog:
    """Append and query; there is deliberately no update or delete."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    def append(self, entry: NewAudit) -> None:
        with self._engine.begin() as conn:
            insert_audit(conn, entry)

    def query(
        self,
        *,
        project: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        target: str | None = None,
        since_unix_s: float | None = None,
        after_seq: int = 0,
        limit: int = 1000,
    ) -> list[AuditEntry]:
        """Oldest first, from `after_seq`; every filter given must match."""
        query = audit_log.select().where(audit_log.c.seq > after_seq)
        for column, value in (
            (audit_log.c.project, project),
            (audit_log.c.actor, actor),
            (audit_log.c.action, action),
            (audit_log.c.target, target),
        ):
            if value is not None:
                query = query.where(column == value)
        if since_unix_s is not None:
            query = query.where(audit_log.c.time_unix_s >= since_unix_s)
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(audit_log.c.seq).limit(limit))
            return [AuditEntry.model_validate(r._asdict()) for r in rows]
