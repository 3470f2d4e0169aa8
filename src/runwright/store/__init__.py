"""The durable store: runs, attempts, events, checkpoints and datasets (SQLAlchemy; SQLite file
by default, PostgreSQL for shared deployments)."""

from runwright.store.engine import resolve_store_url
from runwright.store.faults import describe_fault, is_transient
from runwright.store.history import StaleWriteTally
from runwright.store.records import (
    AttemptRecord,
    CheckpointRow,
    DatasetRow,
    EventRecord,
    EventRow,
    NewEvent,
    Outcome,
    RunRecord,
    WriteResult,
)
from runwright.store.store import Store

__all__ = [
    "AttemptRecord",
    "CheckpointRow",
    "DatasetRow",
    "EventRecord",
    "EventRow",
    "NewEvent",
    "Outcome",
    "RunRecord",
    "StaleWriteTally",
    "Store",
    "WriteResult",
    "describe_fault",
    "is_transient",
    "resolve_store_url",
]
