"""What the reconcile passes need from a run's event log, kept up to date by reading new events
only.

A pass used to re-read a run's whole log for a stop acknowledgement, the rank pids of a
generation, the batch ranges to skip or the recovery in progress: with a log of thousands of
STEP_HEALTHY events, each of 50 runs every 0.2 s. A `RunLog` instead remembers the sequence
number of the last event it folded in and asks the store only for later ones
(`store.events(run_id, after_seq=..., types=KEPT)`), so a quiet pass costs one indexed query that
returns nothing. It keeps only the few event types the passes consult (none per step), so the
pure functions of recovery.py run on a short list.

The view is a cache of the store, never a source of truth: a restarted controller rebuilds it
from sequence 0, and a missing view simply reads everything once. On PostgreSQL two transactions
can commit out of sequence order (a lower number becomes visible after a higher one was read,
e.g. while two controllers write one run, or a `runwright cancel` beside the controller), so each
read looks back LOOKBACK_SEQ numbers behind the newest folded event and skips the events it
already holds (by event id): the window returns this run's few kept events, not its steps.
"""

from dataclasses import dataclass, field

from runwright.events import EventType
from runwright.store import EventRecord, Store

KEPT = (
    EventType.ADMISSION_PENDING,
    EventType.RUN_ADMITTED,
    EventType.ALLOCATION_REQUESTED,
    EventType.ALLOCATION_PENDING,
    EventType.ALLOCATION_FAILED,
    EventType.ALLOCATION_RELEASED,
    EventType.STOP_ACKNOWLEDGED,
    EventType.WORKER_STARTED,
    EventType.RESTORED,
    EventType.RECOVERY_STARTED,
    EventType.RECOVERY_SUCCEEDED,
    EventType.FAILURE_CLASSIFIED,
    EventType.MEMBERSHIP_CHANGED,
    EventType.RUN_FINISHED,
    EventType.OPERATOR_ACTION_REQUESTED,  # skipped shards go to every later launch (operator.py)
)
"""The event types the reconcile passes read; a view folds in these and nothing else."""
LOOKBACK_SEQ = 10_000
"""How far behind the newest folded sequence number each read starts again (see module doc)."""


@dataclass
class RunLog:
    """One run's kept events and the per-generation indexes the passes ask for."""

    run_id: str
    after_seq: int = 0
    """The sequence number of the newest event folded in."""
    events: list[EventRecord] = field(default_factory=list)
    """Every kept event, oldest first (recovery.py's pure functions take this list)."""
    stop_acks: dict[int, EventRecord] = field(default_factory=dict)
    """generation -> its first STOP_ACKNOWLEDGED."""
    rank_pids: dict[int, set[int]] = field(default_factory=dict)
    """generation -> the pids its ranks reported in WORKER_STARTED."""
    finished: bool = False
    """RUN_FINISHED is in the log."""
    seen: set[str] = field(default_factory=set)
    """Event ids folded in, so the look-back window never folds one twice."""

    def fold(self, event: EventRecord) -> None:
        if event.event_id in self.seen:
            return
        self.seen.add(event.event_id)
        self.after_seq = max(self.after_seq, event.seq)
        self.events.append(event)
        if event.type == EventType.STOP_ACKNOWLEDGED:
            self.stop_acks.setdefault(event.generation, event)
        elif event.type == EventType.WORKER_STARTED and "pid" in event.attributes:
            self.rank_pids.setdefault(event.generation, set()).add(int(event.attributes["pid"]))
        elif event.type == EventType.RUN_FINISHED:
            self.finished = True


class RunLogs:
    """The views of every run one controller drives."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._logs: dict[str, RunLog] = {}

    def of(self, run_id: str) -> RunLog:
        """Run `run_id`'s view, with every kept event stored so far folded in."""
        log = self._logs.setdefault(run_id, RunLog(run_id))
        after = max(0, log.after_seq - LOOKBACK_SEQ)
        for event in self.store.events(run_id, after_seq=after, types=KEPT):
            log.fold(event)
        return log

    def forget(self, run_id: str) -> None:
        self._logs.pop(run_id, None)
