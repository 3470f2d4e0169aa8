"""The worker side of the channel: append-only JSON-lines files, one per (generation, rank).

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
from pathlib import Path
from typing import Any

from runwright.events import EventType
from runwright.layout import rank_file_name
from runwright.protocol import HEARTBEAT, PROTOCOL_VERSION, ChannelMessage, encode_message

# STEP_HEALTHY is per-step telemetry (progress, loss curve, phase times); the run's state is the
# committed checkpoint, whose CHECKPOINT_COMMITTED event is fsynced like every other event. So its
# line is written at once, in one write(2) (the tailing controller sees it at once, and a killed
# process loses nothing: the page cache outlives the process), but its fsync, 0.2-4 ms per call
# on the ext4 disk of benchmarks/runtime_overhead.py against a 35-70 ms reference step, is
# deferred to the first of: the next fsynced event (an fsync covers every earlier line of the
# file), a heartbeat once the oldest unsynced line is HEARTBEAT_SYNC_SECONDS old (from the
# heartbeat thread, so the training thread does not wait), close(), or the next STEP_HEALTHY once
# the oldest unsynced line is TELEMETRY_SYNC_SECONDS old (the bound when heartbeats are off). A
# power loss can drop at most those last seconds of telemetry, never a CHECKPOINT_*, STOP_*,
# RESTORED or NAN_DETECTED event.
# A node's SYSTEM_SAMPLE (one per interval, from its sampler thread) is telemetry of the same
# kind and takes the same path.
DEFERRED_SYNC_TYPES = frozenset({EventType.STEP_HEALTHY, EventType.SYSTEM_SAMPLE})
TELEMETRY_SYNC_SECONDS = 5.0
HEARTBEAT_SYNC_SECONDS = TELEMETRY_SYNC_SECONDS / 2
"""A heartbeat fsyncs the telemetry once its oldest unsynced line is this old (an fsync at every
beat cost 320 us of CPU a second at the demo's 1 s beat). Half the bound: at a beat of up to
2.5 s (the default is 2 s) the heartbeat thread finds the telemetry due before a training step
does (TELEMETRY_SYNC_SECONDS, in `_write_locked`)."""


_TELEMETRY_LINE = (
    '{"v": %d, "event_id": %s, "type": %s, "generation": %d, "rank": %d, "step": %d, '
    '"world_size": %s, "checkpoint_id": null, "time_unix_s": %r, "attributes": %s}\n'
)
"""A ChannelMessage's line as `json.dumps` of its fields writes it (`telemetry`)."""
_quoted = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


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
        # A bare O_APPEND descriptor: each line is one write(2), without the text and buffer
        # layers of a Python file and its flush (cold on every step, runtime/steploop.py).
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
        )
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
                v=PROTOCOL_VERSION,
                event_id=event_id
                or f"g{self.generation}-r{self.rank}-{type_}-{self._counter}-{time.time_ns()}",
                type=type_,
                generation=self.generation,
                rank=self.rank,
                step=step,
                time_unix_s=time.time(),
                **fields,
            )
            self._write_locked(encode_message(message), type_)
        return message

    def heartbeat(self) -> None:
        """A HEARTBEAT line (the same fields `send` writes, encoded with json: the pydantic
        model's validator and serializer ran cold in the heartbeat thread, 160 us a beat), and
        the telemetry's deferred fsync when it is due (DEFERRED_SYNC_TYPES above)."""
        with self._lock:
            self._counter += 1
            now = time.time()
            body = {
                "v": PROTOCOL_VERSION,
                "event_id": f"g{self.generation}-r{self.rank}-{HEARTBEAT}-{self._counter}-"
                f"{time.time_ns()}",
                "type": HEARTBEAT,
                "generation": self.generation,
                "rank": self.rank,
                "step": None,
                "world_size": None,
                "checkpoint_id": None,
                "time_unix_s": now,
                "attributes": {},
            }
            self._write_locked(json.dumps(body) + "\n", HEARTBEAT)
            since = self._unsynced_since
        if since is not None and time.monotonic() - since >= HEARTBEAT_SYNC_SECONDS:
            self.sync()

    def telemetry(
        self,
        type_: str,
        *,
        step: int,
        event_id: str,
        world_size: int | None = None,
        attributes: dict[str, Any],
    ) -> str | None:
        """`send` for per-step telemetry (a DEFERRED_SYNC_TYPES message), encoded with the json
        module rather than the pydantic model: the same line, field for field (the controller
        decodes both alike). Each step's compute evicts the caches, and the model's validator and
        serializer ran cold there: about 130 of this call's 230 us per step
        (benchmarks/runtime_overhead.py, in situ). Only `attributes` goes through the encoder;
        the fixed fields are formatted around it, and the encoded attributes are returned for
        the step loop's timeline line (one encoding for both). A value json cannot encode (NaN,
        an object) goes through `send` as before, and None is returned."""
        try:
            encoded = json.dumps(attributes, allow_nan=False)
        except (TypeError, ValueError):
            self.send(
                type_, step=step, event_id=event_id, world_size=world_size, attributes=attributes
            )
            return None
        line = _TELEMETRY_LINE % (
            PROTOCOL_VERSION,
            _quoted(event_id),
            _quoted(type_),
            self.generation,
            self.rank,
            step,
            "null" if world_size is None else int(world_size),
            time.time(),
            encoded,
        )
        with self._lock:
            self._counter += 1
            self._write_locked(line, type_)
        return encoded

    def _write_locked(self, line: str, type_: str) -> None:
        """Append one encoded line (the lock held). Events are facts the run's history depends
        on and are fsynced; a heartbeat is worth no fsync, and telemetry waits for the next one
        (DEFERRED_SYNC_TYPES above) or TELEMETRY_SYNC_SECONDS."""
        if self._fd is None:  # as a closed file answers
            raise ValueError(f"the channel {self.path} was closed")
        data = line.encode()
        while data:  # a regular file takes it whole; a short write would be retried
            data = data[os.write(self._fd, data) :]
        if not self._fsync_events or type_ == HEARTBEAT:
            return
        if type_ not in DEFERRED_SYNC_TYPES:
            self._fsync_locked()
            return
        now = time.monotonic()
        if self._unsynced_since is None:
            self._unsynced_since = now
        elif now - self._unsynced_since >= TELEMETRY_SYNC_SECONDS:
            self._fsync_locked()

    def _fsync_locked(self) -> None:
        assert self._fd is not None
        os.fsync(self._fd)
        self._unsynced_since = None

    def sync(self) -> None:
        """fsync the telemetry written so far, without holding the lock during the fsync: the
        training thread keeps sending while the heartbeat thread waits for the disk."""
        with self._lock:
            if self._fd is None or self._unsynced_since is None:
                return
            # A duplicate descriptor stays valid even if close() runs during the fsync.
            fd = os.dup(self._fd)
            self._unsynced_since = None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                if self._unsynced_since is not None:
                    self._fsync_locked()
                os.close(self._fd)
                self._fd = None
