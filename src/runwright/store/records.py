"""Typed views of store rows and the outcome of every compare-and-set write."""

from enum import StrEnum
from typing import Any, NamedTuple

from runwright.events import EventRecord, NewEvent
from runwright.records import Record

__all__ = [
    "AttemptRecord",
    "CheckpointRow",
    "DatasetRow",
    "EventRecord",
    "EventRow",
    "NewEvent",
    "Outcome",
    "Record",
    "RunRecord",
    "WriteResult",
]


class Outcome(StrEnum):
    """What a fenced or state-changing write did. Expected cases are values, never exceptions."""

    APPLIED = "APPLIED"
    ALREADY_APPLIED = "ALREADY_APPLIED"
    STALE_GENERATION = "STALE_GENERATION"
    INVALID_TRANSITION = "INVALID_TRANSITION"


class EventRow(NamedTuple):
    """A `NewEvent`'s fields, unvalidated: the form `Store.append_events` also takes, for a batch
    built from data already validated (control/ingest.py builds one per channel message, whose
    fields `ChannelMessage` validated when it was decoded). Building a NewEvent per message costs
    ~2.7 us, this tuple ~0.7 us: the 2 us saved are about a tenth of ingest's time per event on
    SQLite (benchmarks/control_plane.py). Its fields are NewEvent's, described there."""

    event_id: str
    run_id: str
    generation: int
    type: str
    step: int | None
    world_size: int | None
    checkpoint_id: str | None
    time_unix_s: float
    attributes: dict[str, Any]


class RunRecord(Record):
    """The durable run record: the source of truth the controller reconciles against."""

    run_id: str
    name: str
    spec_hash: str
    spec: dict[str, Any]
    plan: dict[str, Any]
    idempotency_key: str | None
    generation: int
    """Fencing token: bumped on every (re)start and on cancel."""
    state: str
    terminal_reason: str | None
    state_detail: str | None
    workdir: str
    """Folder the spec was submitted from; relative entrypoints resolve against it."""
    root: str
    """runwright root holding this run's files (`<root>/runs/<run_id>/`)."""
    allocation: dict[str, Any] | None
    rank_manifest: list[dict[str, Any]] | None
    last_heartbeat_unix_s: float | None
    last_step: int | None
    latest_checkpoint_id: str | None
    data_cursor: dict[str, Any] | None
    created_unix_s: float
    updated_unix_s: float
    project: str = "default"
    """Project the run belongs to; who may see and act on it (docs/server.md)."""
    submitted_by: str | None = None
    """Who submitted it: a principal through the server, `local:<user>` from a local CLI."""
    report_sha256: str | None = None
    """The hash of the newest report served of it (govern/performance.py `report_sha256`);
    its REPORT_HASHED events name every report given out."""


class WriteResult(Record):
    """Outcome of a compare-and-set write and the run as it stands afterwards."""

    outcome: Outcome
    run: RunRecord | None = None
    detail: str = ""

    @property
    def applied(self) -> bool:
        return self.outcome is Outcome.APPLIED


class AttemptRecord(Record):
    """One generation's worker group: when it ran and how it ended."""

    run_id: str
    generation: int
    started_unix_s: float
    ended_unix_s: float | None
    world_size: int
    exit_code: int | None
    failure_class: str | None
    detail: dict[str, Any] | None


class CheckpointRow(Record):
    """A checkpoint the store knows of; `status` is STAGED or COMMITTED."""

    checkpoint_id: str
    run_id: str
    step: int
    generation: int
    path: str
    status: str
    manifest_sha256: str | None
    attributes: dict[str, Any]
    created_unix_s: float


class DatasetRow(Record):
    """A registered, content-addressed dataset."""

    dataset_id: str
    name: str
    path: str
    manifest: dict[str, Any]
    created_unix_s: float
