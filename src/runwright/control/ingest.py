"""Ingest what the workers reported through the file channel into the store.

Heartbeats update the run's liveness (fenced) and the watchdog; every other message becomes an
event (fenced: a stale generation is rejected and recorded). A CHECKPOINT_COMMITTED event is
recorded in the checkpoint catalog and its data cursor written into the run record (fenced), and
STEP_HEALTHY moves the run's last healthy step.

The channel is the buffer while the store is away: the reader's cursor passes a message only after
every store write it causes has succeeded, so a poll the store breaks off (StoreUnavailableError)
leaves that message for the next poll. Nothing a worker reported is lost, and the event id keeps
the second attempt from storing it twice.
"""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runwright.ckpt import CheckpointError, LocalFence
from runwright.ckpt.manifest import COMMIT_FILE, MANIFEST_FILE, CheckpointManifest, CommitRecord
from runwright.control.channel import ChannelReader
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.protocol import HEARTBEAT, ChannelMessage
from runwright.store import NewEvent, Outcome, RunRecord, Store


class Ingestor:
    """Tails one run's channel. Re-reading from the start (a new controller) is harmless."""

    def __init__(self, store: Store, run: RunRecord) -> None:
        self.store = store
        self.run_id = run.run_id
        self.paths = run_paths(Path(run.root), run.run_id)
        self.reader = ChannelReader(self.paths.channel)
        self.last_step = run.last_step or 0
        self._beats: dict[int, float] = {}
        """generation -> newest heartbeat read but not yet written to the run record."""
        self._reported_unreadable: set[Path] = set()
        self._unfinished: set[str] = set()
        """Events whose follow-up writes (last step, latest checkpoint) a failed poll may have
        cut short: stored or not, they are finished when read again."""

    def poll(
        self,
        on_message: Callable[[ChannelMessage, Outcome | None], None] | None = None,
    ) -> int:
        """Ingest new messages; returns how many there were."""
        count = 0
        for message in self.reader.poll():
            count += 1
            outcome = None
            if message.type == HEARTBEAT:
                # One liveness write per generation and poll, however many beats were read; a
                # beat the store did not take stays here for the next poll.
                self._beats[message.generation] = max(
                    self._beats.get(message.generation, 0.0), message.time_unix_s
                )
            else:
                outcome = self._event(message)
            if on_message is not None:
                on_message(message, outcome)
        for generation, beat in sorted(self._beats.items()):
            self.store.fenced_update(self.run_id, generation, last_heartbeat_unix_s=beat)
            del self._beats[generation]
        for path, error in self.reader.unreadable.items():
            if path not in self._reported_unreadable:
                self._unreadable(path, error)
                self._reported_unreadable.add(path)
        return count

    def settle_with_fence(self) -> None:
        """After a group ended: the fence's pointer is the authority on the latest checkpoint, so
        a commit it names that no event reported (the writer was lost between its publish and
        its report) is recorded now, by the controller, with the commit's own facts."""
        try:
            latest = LocalFence(self.paths.checkpoints).latest()
        except (CheckpointError, OSError):
            return  # nothing published, or a root restore will report on
        if latest is None:
            return
        committed = self.store.checkpoints.list(self.run_id, status="COMMITTED")
        known = {row.checkpoint_id for row in committed}
        if latest.checkpoint_id in known:
            return
        message = ChannelMessage(
            event_id=f"fence-commit-{latest.checkpoint_id}",
            type=EventType.CHECKPOINT_COMMITTED,
            generation=latest.generation,
            rank=0,
            step=latest.step,
            checkpoint_id=latest.checkpoint_id,
            time_unix_s=time.time(),
            attributes={
                "folder": latest.folder,
                "manifest_sha256": latest.manifest_sha256,
                "reported_by": "controller",
                "why": "its writer was lost between the publish and the report; the fence's "
                "latest pointer names it",
            },
        )
        event = self._as_event(message)
        self.store.append_event(event, fenced=False)
        self._follow_up(message)

    def _unreadable(self, path: Path, error: Exception) -> None:
        """CHANNEL_UNREADABLE, once per file: a newer worker is visible, not silently dropped."""
        run = self.store.get_run(self.run_id)
        self.store.append_event(
            NewEvent(
                event_id=f"{self.run_id}:channel-unreadable:{path.name}",
                run_id=self.run_id,
                generation=run.generation,
                type=EventType.CHANNEL_UNREADABLE,
                time_unix_s=time.time(),
                attributes={"path": str(path), "error": str(error)},
            ),
            fenced=False,
        )

    def _event(self, message: ChannelMessage) -> Outcome:
        event = self._as_event(message)
        # Marked before the append: if the store fails at its commit, whether the event was
        # stored is unknown, and an ALREADY_APPLIED on the retry must still do the follow-ups.
        resumed = event.event_id in self._unfinished
        self._unfinished.add(event.event_id)
        outcome = self.store.append_event(event, fenced=True)
        if outcome is Outcome.APPLIED or (resumed and outcome is Outcome.ALREADY_APPLIED):
            self._follow_up(message)
        self._unfinished.discard(event.event_id)
        return outcome

    def _as_event(self, message: ChannelMessage) -> NewEvent:
        return NewEvent(
            event_id=f"{self.run_id}:{message.event_id}",
            run_id=self.run_id,
            generation=message.generation,
            type=message.type,
            step=message.step,
            world_size=message.world_size,
            checkpoint_id=message.checkpoint_id,
            time_unix_s=message.time_unix_s,
            attributes={**message.attributes, "rank": message.rank},
        )

    def _follow_up(self, message: ChannelMessage) -> None:
        """The run-record writes a stored event implies; each is idempotent."""
        if message.type == EventType.STEP_HEALTHY and message.step is not None:
            if message.step > self.last_step:
                self.store.fenced_update(self.run_id, message.generation, last_step=message.step)
                self.last_step = message.step
        elif message.type == EventType.CHECKPOINT_COMMITTED and message.checkpoint_id:
            folder = self.paths.checkpoints / str(message.attributes.get("folder") or "")
            self.store.checkpoints.record_committed(
                run_id=self.run_id,
                checkpoint_id=message.checkpoint_id,
                step=int(message.step or 0),
                generation=message.generation,
                path=str(folder),
                manifest_sha256=_manifest_sha256(folder),
                attributes={
                    k: v
                    for k, v in message.attributes.items()
                    if isinstance(v, int | float | str | bool)
                },
            )
            # The run record alone says where the run can resume (ARCHITECTURE.md): the
            # committed data cursor travels with every commit, fenced like the step.
            cursor = _data_cursor(folder)
            if cursor is not None:
                self.store.fenced_update(self.run_id, message.generation, data_cursor=cursor)
        elif message.type == EventType.CHECKPOINT_DELETED and message.attributes.get("folder"):
            folder = self.paths.checkpoints / str(message.attributes["folder"])
            self.store.checkpoints.mark_deleted(self.run_id, str(folder))


def _data_cursor(folder: Path) -> dict[str, Any] | None:
    """The data cursor a committed checkpoint's manifest recorded, if it has one."""
    try:
        return CheckpointManifest.model_validate_json(
            (folder / MANIFEST_FILE).read_bytes()
        ).data_cursor
    except (OSError, ValueError):
        return None


def _manifest_sha256(folder: Path) -> str:
    """The commit record binds the checkpoint to one manifest; the store keeps that hash."""
    try:
        return CommitRecord.model_validate_json((folder / COMMIT_FILE).read_bytes()).manifest_sha256
    except (OSError, ValueError):
        return ""
