"""What a controller holds for a run's current worker group."""

import time
from dataclasses import dataclass, field

from runwright.control.executor import WorkerGroup
from runwright.control.watchdog import Watchdog
from runwright.store import Store


@dataclass
class Supervision:
    group: WorkerGroup
    watchdog: Watchdog
    worker_pids: set[int] = field(default_factory=set)
    """Rank pids the workers reported (ranks run in sessions of their own)."""
    started_ranks: set[int] = field(default_factory=set)
    stop_reason: str | None = None
    """Why the controller asked the group to stop (e.g. budget), if it did."""
    stop_deadline: float | None = None
    """Monotonic time after which a stopping group is killed."""

    def end_attempt(
        self, store: Store, run_id: str, code: int | None, failure_class: str | None
    ) -> None:
        store.end_attempt(
            run_id,
            self.group.generation,
            exit_code=code,
            failure_class=failure_class,
            detail={"log": str(self.group.log_path)},
        )

    def stop_by(self, grace_seconds: float) -> None:
        self.stop_deadline = time.monotonic() + grace_seconds
        self.watchdog.paused = True
