"""The worker -> controller channel: append-only JSON-lines files, one per (generation, rank).

A worker never holds a database connection (ARCHITECTURE.md). It appends messages to its own file
under `<run_dir>/channel/`; the controller tails every file and ingests the messages into the
store, where `event_id` makes a re-read harmless and the generation fence rejects stale writers.
A local file survives a controller restart, so nothing a worker reported is lost while the
controller is down.
"""

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runwright.layout import RANK_FILE_GLOB, rank_file_name

HEARTBEAT = "HEARTBEAT"
# STEP_HEALTHY is per-step telemetry (progress, loss curve, phase times); the run's state is the
# committed checkpoint, whose CHECKPOINT_COMMITTED event is fsynced like every other event. So its
# line is written and flushed at once (the tailing controller sees it at once, and a killed process
# loses nothing: the page cache outlives the process) but its fsync, 0.2-4 ms per call on the ext4
# disk of benchmarks/runtime_overhead.py against a 60-70 ms reference step, is deferred to the
# first of: the next fsynced event (an fsync covers every earlier line of the file), the next
# heartbeat (sent from the heartbeat thread, so the training thread does not wait), close(), or
# the next STEP_HEALTHY once the oldest unsynced line is TELEMETRY_SYNC_SECONDS old (the bound
# when heartbeats are off). A power loss can drop at most those last seconds of telemetry, never
# a CHECKPOINT_*, STOP_*, RESTORED or NAN_DETECTED event.
DEFERRED_SYNC_TYPES = frozenset({"STEP_HEALTHY"})
TELEMETRY_SYNC_SECONDS = 5.0


class ChannelMessage(BaseModel):
    """One message from a worker. HEARTBEAT messages update liveness; all others become events."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    """Unique per message; the store ignores a second copy."""
    type: str
    generation: int
    rank: int
    step: int | None = None
    world_size: int | None = None
    checkpoint_id: str | None = None
    time_unix_s: float
    attributes: dict[str, Any] = Field(default_factory=dict)


class ChannelWriter:
    """Appends messages for one rank of one generation; safe to call from several threads."""

    def __init__(
        self, channel_dir: Path, generation: int, rank: int, fsync_events: bool = True
    ) -> None:
        channel_dir.mkdir(parents=True, exist_ok=True)
        self.path = channel_dir / rank_file_name(generation, rank)
        self.generation = generation
        self.rank = rank
        self._fsync_events = fsync_events
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._counter = 0
        # monotonic time of the oldest written, not yet fsynced telemetry line
        self._unsynced_since: float | None = None

    def send(
        self,
        type_: str,
        *,
        step: int | None = None,
        event_id: str | None = None,
        generation: int | None = None,
        **fields: Any,
    ) -> ChannelMessage:
        with self._lock:
            self._counter += 1
            message = ChannelMessage(
                event_id=event_id
                or f"g{self.generation}-r{self.rank}-{type_}-{self._counter}-{time.time_ns()}",
                type=type_,
                generation=self.generation,
                rank=self.rank,
                step=step,
                time_unix_s=time.time(),
                **fields,
            )
            self._file.write(message.model_dump_json() + "\n")
            self._file.flush()
            # Events are facts the run's history depends on; a heartbeat is worth no fsync and
            # telemetry waits for the next one (DEFERRED_SYNC_TYPES above).
            if self._fsync_events and type_ in DEFERRED_SYNC_TYPES:
                now = time.monotonic()
                if self._unsynced_since is None:
                    self._unsynced_since = now
                elif now - self._unsynced_since >= TELEMETRY_SYNC_SECONDS:
                    self._fsync_locked()
            elif self._fsync_events and type_ != HEARTBEAT:
                self._fsync_locked()
            sync_now = type_ == HEARTBEAT and self._unsynced_since is not None
        if sync_now:
            self.sync()
        return message

    def _fsync_locked(self) -> None:
        os.fsync(self._file.fileno())
        self._unsynced_since = None

    def sync(self) -> None:
        """fsync the telemetry written so far, without holding the lock during the fsync: the
        training thread keeps sending while the heartbeat thread waits for the disk."""
        with self._lock:
            if self._file.closed or self._unsynced_since is None:
                return
            # A duplicate descriptor stays valid even if close() runs during the fsync.
            fd = os.dup(self._file.fileno())
            self._unsynced_since = None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                if self._unsynced_since is not None:
                    self._fsync_locked()
                self._file.close()


class ChannelReader:
    """Tails every file in a channel folder, yielding only complete new lines.

    The cursor moves past a message only when the consumer asks for the next one, i.e. once it
    has handled this one. A consumer that raises (the store went away while it stored the
    message) or stops early gets the same message again on the next poll, so the file stays the
    buffer of everything not yet handled; the event id makes the second copy harmless."""

    def __init__(self, channel_dir: Path) -> None:
        self.channel_dir = channel_dir
        self._offsets: dict[Path, int] = {}

    def poll(self) -> Iterator[ChannelMessage]:
        if not self.channel_dir.is_dir():
            return
        for path in sorted(self.channel_dir.glob(RANK_FILE_GLOB)):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            start = 0
            # A line without its newline is still being written; read it next time.
            while (end := data.find(b"\n", start)) >= 0:
                message = _parse(data[start:end])
                if message is not None:
                    yield message
                start = end + 1
                self._offsets[path] = offset + start


def _parse(line: bytes) -> ChannelMessage | None:
    """One message, or None for a blank or unreadable line (skipped, never retried)."""
    if not line.strip():
        return None
    try:
        return ChannelMessage.model_validate(json.loads(line))
    except (ValueError, TypeError):
        return None
