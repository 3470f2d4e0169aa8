"""Ingest what the workers reported through the file channel into the store.

Heartbeats update the run's liveness (fenced) and the watchdog; every other message becomes an
event (fenced: a stale generation is rejected and recorded). A CHECKPOINT_COMMITTED event is
recorded in the checkpoint catalog and its data cursor written into the run record (fenced), and
STEP_HEALTHY moves the run's last healthy step.

Messages are read and stored in batches (`BATCH_MESSAGES`): one store transaction appends a batch's
events, with the generation fence checked once for it (`Store.append_events`), and the follow-ups
are coalesced over the events it stored.

A step's per-rank STEP_HEALTHY messages are held until every rank reported it and stored as ONE
row (control/step_holding.py: when a step is stored in parts, and why nothing is counted twice);
`on_message` still sees each rank's message as its batch is read, so the watchdog, the alerts and
the replay check see every rank at once.

The channel is the buffer while the store is away: the reader's cursor passes a batch only after
every store write it causes has succeeded, so a poll the store breaks off (StoreUnavailableError)
leaves that batch for the next poll. Nothing a worker reported is lost, and the event ids keep the
second attempt from storing any of it twice.
"""

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from runwright.ckpt import CheckpointError
from runwright.ckpt.catalog import CommittedCheckpoint, read_committed
from runwright.ckpt.fence import open_fence
from runwright.ckpt.storage import CheckpointStorage
from runwright.control.channel import ChannelReader
from runwright.control.node_health import record_sample
from runwright.control.step_holding import StepHolder, holdable, step_rows
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.observe.rank_steps import RANKS
from runwright.protocol import HEARTBEAT, ChannelMessage, RankEntry, node_hosts, placed_entry
from runwright.store import EventRow, NewEvent, Outcome, RunRecord, Store
from runwright.store.fence import run_checkpoint_root


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a poll decodes and stores messages. Decoded
    messages and held steps are freed by reference counting (they form no cycles), but each
    allocation-count trigger of the collector walks them, and the batch's survivors are promoted
    until a full pass walks every object the process tracks: with it on, collector passes took
    a third of the ingest's time (benchmarks/control_plane.py, `gc_seconds`). A poll is bounded
    (INGEST_SLICE_SECONDS in a live pass), so cyclic garbage made meanwhile waits at most that
    long; it is collected once the collector is back on."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


GONE = frozenset({EventType.CHECKPOINT_DELETED, EventType.RETENTION_FAILED})
"""Retention's reports of a checkpoint that is no longer one: deleted, or uncommitted before a
delete storage refused (RETENTION_FAILED with committed false; residue for GC)."""
BATCH_MESSAGES = 2000
"""Channel messages per store transaction. One commit (an fsync on SQLite) costs milliseconds
whatever it holds, so a batch amortises it, while one transaction's lock hold should stay short
(tens of milliseconds) for the CLI and other controllers sharing the store. Since the batch insert
went straight to the driver (store/appends.py), a stored event costs 8-11 us of the transaction
where it cost 20-40 us, so a batch of 2,000 holds SQLite's lock 14-22 ms (median per run, commit
included) where 500 held it 9-16 ms, and pays a quarter of the commits (benchmarks/
control_plane.py, docs/control.md)."""


class Ingestor:
    """Tails one run's channel. Re-reading from the start (a new controller) is harmless."""

    def __init__(self, store: Store, run: RunRecord) -> None:
        self.store = store
        self.run_id = run.run_id
        self.root = Path(run.root)
        self.paths = run_paths(Path(run.root), run.run_id)
        self.checkpoint_root = run_checkpoint_root(run)
        """The run's checkpoint root, folder or URL (`layout.checkpoint_root`)."""
        self.reader = ChannelReader(self.paths.channel)
        self.last_step = run.last_step or 0
        self._beats: dict[int, float] = {}
        """generation -> newest heartbeat read but not yet written to the run record."""
        self._reported_unreadable: set[Path] = set()
        self._unfinished: set[str] = set()
        """Events whose follow-up writes (last step, latest checkpoint) a failed poll may have
        cut short: stored or not, they are finished when read again."""
        self._unfinished_steps: set[tuple[int, int]] = set()
        """The same for (generation, step) of folded step rows."""
        self.steps = StepHolder()
        self.fold_steps = not _stored_per_rank(store, run.run_id)
        """False for a run whose store already holds per-rank step rows (ingested before steps
        were folded): its steps stay per rank, so a re-read cannot store a step twice."""
        self._fence: int | None = None
        """The run's generation, read once per poll for the messages still held."""

    def poll(
        self,
        on_message: Callable[[ChannelMessage, Outcome | None], None] | None = None,
        until: float | None = None,
    ) -> int:
        """Ingest new messages, `BATCH_MESSAGES` per store transaction; returns how many there
        were. `on_message(message, outcome)` sees every message once its batch is stored, with
        the event's outcome (None for a heartbeat). Past `until` (time.monotonic()) the rest
        stays in the channel for the next poll."""
        self._fence = None
        with collector_paused():
            count = self._poll(on_message, until)
        if self.steps.due():
            self._ingest([])  # a step whose last ranks are late is stored as a part
        for generation, beat in sorted(self._beats.items()):
            self.store.fenced_update(self.run_id, generation, last_heartbeat_unix_s=beat)
            del self._beats[generation]
        for path, error in self.reader.unreadable.items():
            if path not in self._reported_unreadable:
                self._unreadable(path, error)
                self._reported_unreadable.add(path)
        return count

    def _poll(
        self,
        on_message: Callable[[ChannelMessage, Outcome | None], None] | None,
        until: float | None,
    ) -> int:
        count = 0
        for batch in self.reader.poll_batches(BATCH_MESSAGES, until=until):
            outcomes = self._ingest(batch)
            count += len(batch)
            if on_message is not None:
                for message, outcome in zip(batch, outcomes, strict=True):
                    on_message(message, outcome)
        return count

    def _ingest(self, batch: list[ChannelMessage], ended: bool = False) -> list[Outcome | None]:
        """Store one batch's events and the steps it completes in one append, and do the
        follow-ups of those it stored; `ended`: the group is gone, store every held step."""
        reported, steps = [], []
        held = []  # per message: None a heartbeat, True held with its step, False reported
        fold_steps = self.fold_steps
        for message in batch:
            if message.type == HEARTBEAT:
                # One liveness write per generation and poll, however many beats were read; a
                # beat the store did not take stays here for the next poll.
                self._beats[message.generation] = max(
                    self._beats.get(message.generation, 0.0), message.time_unix_s
                )
                held.append(None)
            elif fold_steps and holdable(message):
                steps.append(message)
                held.append(True)
            else:
                reported.append(message)
                held.append(False)
        staged = self.steps.stage(steps, ended=ended)
        flushed = sorted(staged.flush)
        folded = step_rows(self.store, self.run_id, [staged.held[k] for k in flushed])
        rows = [self._as_row(m) for m in reported]
        rows += [row for row in folded.values() if row is not None]
        ids = [row.event_id for row in rows]
        # Marked before the append: if the store fails at its commit, whether the batch was
        # stored is unknown, and an ALREADY_APPLIED on the retry must still do the follow-ups.
        resumed = self._unfinished.intersection(ids)
        self._unfinished.update(ids)
        # A step the store holds whole has no row to retry: whether its follow-up ran is here.
        resumed_steps = self._unfinished_steps.intersection(flushed)
        self._unfinished_steps.update(flushed)
        outcomes = self.store.append_events(rows, fenced=True)
        done = {
            event_id
            for event_id, outcome in zip(ids, outcomes, strict=True)
            if outcome is Outcome.APPLIED
            or (outcome is Outcome.ALREADY_APPLIED and event_id in resumed)
        }
        self._follow_up(
            [m for m, row in zip(reported, rows, strict=False) if row.event_id in done],
            [
                k
                for k, row in folded.items()
                if (row.event_id in done if row is not None else k in resumed_steps)
            ],
        )
        self._unfinished.difference_update(ids)
        self._unfinished_steps.difference_update(flushed)
        self.steps.commit(staged)
        by_id = dict(zip(ids, outcomes, strict=True))
        stored = iter(outcomes)
        found: list[Outcome | None] = []
        for m, kind in zip(batch, held, strict=True):
            if kind is None:
                found.append(None)
            elif not kind:
                found.append(next(stored))
            elif (key := (m.generation, m.step or 0)) in staged.flush:
                row = folded[key]  # None: stored parts already cover it
                found.append(Outcome.ALREADY_APPLIED if row is None else by_id[row.event_id])
            else:
                found.append(self._held_outcome(m.generation))
        return found

    def _held_outcome(self, generation: int) -> Outcome:
        """What the fence will say to a held message's step, by the run's generation now."""
        if self._fence is None:
            self._fence = self.store.get_run(self.run_id).generation
        return Outcome.APPLIED if generation == self._fence else Outcome.STALE_GENERATION

    def settle_with_fence(self) -> None:
        """After a group ended: the fence's pointer is the authority on the latest checkpoint, so
        a commit it names that no event reported (the writer was lost between its publish and
        its report) is recorded now, by the controller, with the commit's own facts. Steps
        some ranks never reported are stored first, as the parts the group left."""
        if self.steps.held:
            self._ingest([], ended=True)
        try:
            latest = open_fence(self.checkpoint_root).latest()
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
        self.store.append_event(NewEvent(**self._as_row(message)._asdict()), fenced=False)
        self._follow_up([message], [])

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

    def _as_row(self, message: ChannelMessage) -> EventRow:
        """The event a message reports, as its store row (the message's fields were validated
        when it was decoded, so the row is not validated again)."""
        return EventRow(
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

    def _follow_up(self, stored: list[ChannelMessage], steps: list[tuple[int, int]]) -> None:
        """The run-record writes stored events and steps ((generation, step)) imply, coalesced;
        each is idempotent. The last step is written once per generation (its highest step),
        the checkpoint catalog once per commit or deletion, the run's inputs (lineage) once per
        dataset, in the channel's order."""
        highest: dict[int, int] = {}
        for generation, step in steps:
            highest[generation] = max(highest.get(generation, 0), step)
        placed = [
            m
            for m in stored
            if m.type == EventType.WORKER_STARTED
            and isinstance(m.attributes.get("node"), int)
            and isinstance(m.attributes.get("host"), str)
        ]
        if placed:
            self._place_ranks(placed)
        for message in stored:
            if message.type == EventType.STEP_HEALTHY and message.step is not None:
                highest[message.generation] = max(highest.get(message.generation, 0), message.step)
            elif message.type == EventType.CHECKPOINT_COMMITTED and message.checkpoint_id:
                self._committed(message)
            elif message.type == EventType.SYSTEM_SAMPLE and message.attributes.get("gpus"):
                # A GPU's ECC counts and Xids go to the node's health history (the drain input).
                record_sample(self.root, self.run_id, message.attributes, message.time_unix_s)
            elif message.type == EventType.DATA_STAGE_READY:
                dataset = message.attributes.get("dataset_id")
                tokenizer = message.attributes.get("tokenizer_hash")
                if isinstance(dataset, str) and dataset:
                    self.store.inputs.record(
                        self.run_id,
                        dataset[:64],
                        tokenizer if isinstance(tokenizer, str) else None,
                        message.generation,
                    )
            elif message.type in GONE and message.attributes.get("folder"):
                if message.attributes.get("committed") is True:
                    continue  # retention could not even uncommit it: still a checkpoint
                folder = f"{self.checkpoint_root}/{message.attributes['folder']}"
                self.store.checkpoints.mark_deleted(self.run_id, folder)
        for generation, step in sorted(highest.items()):
            if step > self.last_step:
                self.store.fenced_update(self.run_id, generation, last_step=step)
                self.last_step = step

    def _place_ranks(self, started: list[ChannelMessage]) -> None:
        """The run's rank manifest says on which node each rank of the current generation really
        runs, as the rank reported it: under c10d rendezvous torchrun, not launch order, decides
        which node runs which global rank (`protocol.placed_entry`). One write per batch, and
        none when the manifest already says it (every one-node run)."""
        run = self.store.get_run(self.run_id)
        entries = [RankEntry.model_validate(e) for e in run.rank_manifest or []]
        # Each node's host as the allocation names it, taken before any entry moves (a manifest
        # half corrected may, for a moment, have no rank on some node).
        allocated = (run.allocation or {}).get("hosts")
        if isinstance(allocated, list) and all(isinstance(h, str) for h in allocated):
            hosts = dict(enumerate(allocated))
        else:
            hosts = node_hosts(entries)
        changed = False
        for message in started:
            if message.generation != run.generation or message.rank >= len(entries):
                continue
            node, host = message.attributes["node"], message.attributes["host"]
            placed = placed_entry(entries, message.rank, node=node, host=host, hosts=hosts)
            if placed is not None and placed != entries[message.rank]:
                entries[message.rank] = placed
                changed = True
        if changed:
            self.store.update_run(self.run_id, rank_manifest=[e.model_dump() for e in entries])

    def _committed(self, message: ChannelMessage) -> None:
        """A stored CHECKPOINT_COMMITTED: its catalog row and the data cursor it carries."""
        name = str(message.attributes.get("folder") or "")
        committed = self._read_committed(name)
        self.store.checkpoints.record_committed(
            run_id=self.run_id,
            checkpoint_id=str(message.checkpoint_id),
            step=int(message.step or 0),
            generation=message.generation,
            path=f"{self.checkpoint_root}/{name}",
            # The commit record binds the checkpoint to one manifest; the store keeps that hash.
            manifest_sha256=committed.record.manifest_sha256 if committed else "",
            attributes={
                k: v
                for k, v in message.attributes.items()
                if isinstance(v, int | float | str | bool)
            },
        )
        # The run record alone says where the run can resume (ARCHITECTURE.md): the committed
        # data cursor travels with every commit, fenced like the step.
        cursor = committed.manifest.data_cursor if committed else None
        if cursor is not None:
            self.store.fenced_update(self.run_id, message.generation, data_cursor=cursor)

    def _read_committed(self, folder: str) -> CommittedCheckpoint | None:
        """The committed checkpoint in `folder` of the run's checkpoint root (local or on an
        object store), or None when it cannot be read (restore will report on it)."""
        if not folder:
            return None
        try:
            found = read_committed(CheckpointStorage(self.checkpoint_root), folder)
        except (OSError, CheckpointError):
            return None
        return found if isinstance(found, CommittedCheckpoint) else None


def _stored_per_rank(store: Store, run_id: str) -> bool:
    """Whether the run's newest step rows are one rank's reports each (a store written before
    steps were folded). A folding ingest writes a step's report per rank only without a step."""
    newest = store.events(run_id, types=[EventType.STEP_HEALTHY], newest=20)
    return any(
        e.step is not None and e.checkpoint_id is None and RANKS not in e.attributes for e in newest
    )
