"""Checkpoint events and the sink they go to.

The checkpoint package never writes to a database: the caller passes an `EventSink` (the runtime
forwards events to the control plane's event log; a standalone script may keep the default, which
logs). Event types are the run's event vocabulary (`runwright.events.EventType`).

Attributes the controller and the run report read (govern/evidence.py, observe/):
    CHECKPOINT_COMMITTED    folder, bytes, manifest_sha256 (sha256 of the committed manifest.json,
                            as the commit record names it), stall_seconds (how long the training
                            step was blocked: the host copy for an async save, the call up to the
                            publish for a sync save), persist_seconds (shards written through
                            publish), and the per-step timings stage/write/verify/persist
    CHECKPOINT_DELETED      folder, bytes, seconds (retention's delete, never part of a stall)
    CHECKPOINT_FAILED       error, mode; for a storage failure also action, path, cause, errno,
                            bytes_needed, bytes_free and on_save_failure (the alert)
"""

import logging
import threading
import time
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from runwright.events import EventType
from runwright.records import Record

_log = logging.getLogger("runwright.ckpt")


class CheckpointEvent(Record):
    """One thing that happened to one checkpoint, as the caller's event log will store it."""

    type: EventType
    """What happened (one of the checkpoint types of the vocabulary)."""
    generation: int
    """Generation (fencing token) of the process that emits the event."""
    step: int | None = None
    """Global optimizer step the event concerns, if any."""
    checkpoint_id: str | None = None
    """Checkpoint the event concerns, if any."""
    time_unix_seconds: float = Field(default_factory=time.time)
    """When the event was emitted (seconds since the epoch)."""
    attributes: dict[str, Any] = Field(default_factory=dict)
    """Details: reasons, durations in seconds, sizes in bytes."""


@runtime_checkable
class EventSink(Protocol):
    """Receives checkpoint events. Must be thread-safe: async saves emit from a worker thread."""

    def emit(self, event: CheckpointEvent) -> None:
        """Record one event; must not raise for an ordinary event."""
        ...


class LoggingSink:
    """The default sink: one log line per event on the `runwright.ckpt` logger."""

    def emit(self, event: CheckpointEvent) -> None:
        level = logging.WARNING if event.type in _WARNINGS else logging.INFO
        _log.log(
            level,
            "%s step=%s checkpoint=%s generation=%s %s",
            event.type.value,
            event.step,
            event.checkpoint_id,
            event.generation,
            event.attributes,
        )


_WARNINGS = {
    EventType.CHECKPOINT_FAILED,
    EventType.CHECKPOINT_SKIPPED,
    EventType.STALE_WRITE_REJECTED,
    EventType.RESTORE_FALLBACK,
}


class MemorySink:
    """Keeps events in a list (tests, notebooks, and scripts that report at the end)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[CheckpointEvent] = []

    def emit(self, event: CheckpointEvent) -> None:
        with self._lock:
            self.events.append(event)

    def of_type(self, kind: EventType) -> list[CheckpointEvent]:
        with self._lock:
            return [e for e in self.events if e.type == kind]
