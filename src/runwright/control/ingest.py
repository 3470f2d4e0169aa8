"""Ingest what the workers reported through the file channel into the store.

Heartbeats update the run's liveness (fenced) and the watchdog; every other message becomes an
event (fenced: a stale generation is rejected and recorded). A CHECKPOINT_COMMITTED event is
mirrored into the store's latest pointer with the fenced compare-and-set, and STEP_HEALTHY moves
the run's last healthy step.
"""

from collections.abc import Callable
from pathlib import Path

from runwright.ckpt.manifest import COMMIT_FILE, CommitRecord
from runwright.control.executor import run_dir
from runwright.runtime.channel import HEARTBEAT, ChannelMessage, ChannelReader
from runwright.runtime.checkpoints import checkpoint_root
from runwright.store import NewEvent, Outcome, RunRecord, Store


class Ingestor:
    """Tails one run's channel. Re-reading from the start (a new controller) is harmless."""

    def __init__(self, store: Store, run: RunRecord) -> None:
        self.store = store
        self.run_id = run.run_id
        self.root = Path(run.root)
        self.reader = ChannelReader(run_dir(self.root, run.run_id) / "channel")
        self.last_step = run.last_step or 0

    def poll(
        self,
        on_message: Callable[[ChannelMessage, Outcome | None], None] | None = None,
    ) -> int:
        """Ingest new messages; returns how many there were."""
        newest_beat: dict[int, float] = {}
        count = 0
        for message in self.reader.poll():
            count += 1
            outcome = None
            if message.type == HEARTBEAT:
                newest_beat[message.generation] = max(
                    newest_beat.get(message.generation, 0.0), message.time_unix_s
                )
            else:
                outcome = self._event(message)
            if on_message is not None:
                on_message(message, outcome)
        for generation, beat in newest_beat.items():
            self.store.fenced_update(self.run_id, generation, last_heartbeat_unix_s=beat)
        return count

    def _event(self, message: ChannelMessage) -> Outcome:
        event = NewEvent(
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
        outcome = self.store.append_event(event, fenced=True)
        if outcome is not Outcome.APPLIED:
            return outcome
        if message.type == "STEP_HEALTHY" and message.step is not None:
            if message.step > self.last_step:
                self.last_step = message.step
                self.store.fenced_update(self.run_id, message.generation, last_step=message.step)
        elif message.type == "CHECKPOINT_COMMITTED" and message.checkpoint_id:
            folder = checkpoint_root(run_dir(self.root, self.run_id)) / str(
                message.attributes.get("folder") or ""
            )
            self.store.checkpoints.publish(
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
        elif message.type == "CHECKPOINT_DELETED" and message.attributes.get("folder"):
            folder = checkpoint_root(run_dir(self.root, self.run_id)) / str(
                message.attributes["folder"]
            )
            self.store.checkpoints.mark_deleted(self.run_id, str(folder))
        return outcome


def _manifest_sha256(folder: Path) -> str:
    """The commit record binds the checkpoint to one manifest; the store keeps that hash."""
    try:
        return CommitRecord.model_validate_json((folder / COMMIT_FILE).read_bytes()).manifest_sha256
    except (OSError, ValueError):
        return ""
