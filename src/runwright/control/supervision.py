"""What a controller holds for a run's current worker group."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from runwright.control.executors.protocol import GroupHandle
from runwright.control.liveness import Liveness
from runwright.control.stall import StallCheck
from runwright.control.watchdog import Verdict, Watchdog
from runwright.spec import FailureClass
from runwright.store import Store


@dataclass
class Supervision:
    group: GroupHandle
    watchdog: Watchdog
    worker_pids: set[int] = field(default_factory=set)
    """Rank pids the workers reported (ranks run in sessions of their own)."""
    rank_pids: dict[int, int] = field(default_factory=dict)
    """rank -> its pid, from WORKER_STARTED: whose process confirms a suspected hang."""
    started_ranks: set[int] = field(default_factory=set)
    saves_in_flight: set[str] = field(default_factory=set)
    """Checkpoints this group staged that have not yet committed, failed or been rejected: while
    there is one, the run is CHECKPOINTING."""
    stop_reason: str | None = None
    """Why the controller asked the group to stop (e.g. budget), if it did."""
    stop_deadline: float | None = None
    """Monotonic time after which a stopping group is killed."""
    liveness: Liveness | None = None
    """Confirms the watchdog's HANG verdicts from the ranks' processes (slow is not stopped)."""
    stall: StallCheck = field(default_factory=StallCheck)
    """Confirms the watchdog's steady-state NO_PROGRESS suspicions (slow is not blocked)."""
    unread: Callable[[int], bool] | None = None
    """rank -> whether its channel file holds messages the controller has not read yet."""
    stepped: bool = False
    """The group completed a step: it trains (a warm standby may start beside it now)."""
    standby_asked: bool = False
    """The next generation's warm standby was asked for (started, or found there)."""

    def __post_init__(self) -> None:
        if self.liveness is None:
            recovery = self.watchdog.recovery
            self.liveness = Liveness(
                grace_seconds=recovery.heartbeat_timeout_seconds,
                max_silent_seconds=recovery.progress_timeout_seconds,
            )

    def watch(self) -> Verdict | None:
        """The watchdog's verdict, with a HANG confirmed by the silent rank's process first and a
        steady-state NO_PROGRESS by the ranks' CPU (control/stall.py)."""
        verdict = self.watchdog.check()
        assert self.liveness is not None
        if verdict is not None and verdict.suspect:
            return self.stall.confirm(verdict, self.rank_pids.values(), self.watchdog.world_size)
        self.stall.clear()
        if verdict is None or verdict.failure_class is not FailureClass.HANG:
            self.liveness.clear()
            return verdict
        if verdict.rank is not None and self.unread is not None and self.unread(verdict.rank):
            # The rank wrote more than the controller has read yet (an ingest backlog, or a
            # controller that waited for a core): silence is measured from what it wrote.
            self.watchdog.beat(verdict.rank)
            self.liveness.suspected.pop(verdict.rank, None)
            return None
        pid = self.rank_pids.get(verdict.rank) if verdict.rank is not None else None
        # A rank with no pid yet is still starting: the generation's processes, where the
        # executor can list them, show whether start-up computes or is stuck.
        members = getattr(self.group, "members", None) if pid is None else None
        return self.liveness.confirm(verdict, pid, members=members)

    def end_attempt(
        self, store: Store, run_id: str, code: int | None, failure_class: str | None
    ) -> None:
        store.end_attempt(
            run_id,
            self.group.generation,
            exit_code=code,
            failure_class=failure_class,
            detail={"log": self.group.log_ref},
        )

    def stop_by(self, grace_seconds: float) -> None:
        self.stop_deadline = time.monotonic() + grace_seconds
        self.watchdog.paused = True
