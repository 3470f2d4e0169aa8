"""The async backlog: staged snapshots persisting on one background thread.

An async save stages its snapshot in host memory and hands it here; the training step goes on
while the worker thread runs the commit protocol. The backlog tracks what is in flight (for the
`max_inflight` bound, the durability lag and GC, which must not collect a folder still being
written), keeps the first background failure until the caller's next call collects it (never
swallowed), and hands each snapshot's buffers back to the pool once it is persisted or abandoned.
One worker thread persists snapshots in the order they were staged, so commits never overtake
each other and every rank runs the same collectives in the same order. The persist running now
and when it started are kept too: one past `checkpoint.save_timeout_seconds` is overdue
(deadline.py), and waiting for the backlog ends there instead of never.
"""

import queue
import threading
import time
from collections.abc import Callable

from runwright.ckpt.commit import Snapshot


class Backlog:
    """Snapshots staged and not yet persisted, and the thread that persists them."""

    def __init__(
        self,
        persist: Callable[[Snapshot], object],
        on_failure: Callable[[Snapshot, BaseException], None],
        release: Callable[[Snapshot], None],
    ) -> None:
        """`persist(snap)` runs on the worker; `on_failure(snap, exc)` reports a failed persist;
        `release(snap)` runs after each snapshot either way (returns its buffers to the pool)."""
        self._persist, self._on_failure, self._release = persist, on_failure, release
        self._jobs: queue.Queue[Snapshot | None] = queue.Queue()
        self._inflight: dict[str, float] = {}
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._worker: threading.Thread | None = None
        self._running: tuple[Snapshot, float] | None = None
        """The snapshot persisting now and the monotonic time its persist started."""

    def __len__(self) -> int:
        with self._cond:
            return len(self._inflight)

    def submit(self, snap: Snapshot) -> None:
        """Queue a staged snapshot; starts the worker on first use."""
        with self._cond:
            self._inflight[snap.checkpoint_id] = time.monotonic()
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="runwright-ckpt", daemon=True)
            self._worker.start()
        self._jobs.put(snap)

    def wait_below(
        self, limit: int, timeout_seconds: float | None = None
    ) -> tuple[Snapshot, float] | None:
        """Block until fewer than `limit` snapshots are in flight (None), or until the persist
        running has run longer than `timeout_seconds`: (that snapshot, its seconds so far)."""
        with self._cond:
            while len(self._inflight) >= limit:
                overdue = self._overdue(timeout_seconds)
                if overdue is not None:
                    return overdue
                if timeout_seconds is None or self._running is None:
                    self._cond.wait()  # notified when a persist starts or ends
                else:
                    left = self._running[1] + timeout_seconds - time.monotonic()
                    self._cond.wait(max(left, 0.0) + 0.01)
        return None

    def overdue(self, timeout_seconds: float | None) -> tuple[Snapshot, float] | None:
        """(the snapshot persisting, its seconds so far) if that is more than `timeout_seconds`."""
        with self._cond:
            return self._overdue(timeout_seconds)

    def _overdue(self, timeout_seconds: float | None) -> tuple[Snapshot, float] | None:
        if timeout_seconds is None or self._running is None:
            return None
        snap, started = self._running
        seconds = time.monotonic() - started
        return (snap, seconds) if seconds > timeout_seconds else None

    def in_flight(self) -> frozenset[str]:
        """Ids of the snapshots staged and not yet persisted."""
        with self._cond:
            return frozenset(self._inflight)

    def oldest_age_seconds(self) -> float:
        """Age of the oldest snapshot still persisting (0 when none)."""
        with self._cond:
            oldest = min(self._inflight.values(), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest

    def take_error(self) -> BaseException | None:
        """The background failure not yet reported, cleared by this call."""
        with self._cond:
            error, self._error = self._error, None
        return error

    def close(self, *, join: bool = True) -> None:
        """Stop the worker after the queued snapshots (call `wait_below(1)` first to drain).
        `join=False` leaves a worker stuck in an overdue persist behind (a daemon thread)."""
        if self._worker is not None:
            self._jobs.put(None)
            if join:
                self._worker.join()
            self._worker = None

    def _work(self) -> None:
        while (snap := self._jobs.get()) is not None:
            with self._cond:
                self._running = (snap, time.monotonic())
                self._cond.notify_all()
            try:
                self._persist(snap)
            except BaseException as exc:
                with self._cond:
                    self._error = self._error or exc
                self._on_failure(snap, exc)
            finally:
                self._release(snap)
                with self._cond:
                    self._running = None
                    self._inflight.pop(snap.checkpoint_id, None)
                    self._cond.notify_all()
