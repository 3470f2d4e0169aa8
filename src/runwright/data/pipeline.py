"""The loader's read pipeline: ordered planning, parallel reads, a reorder buffer, a prefetch queue.

    worker threads (read_workers of them), each in a loop:
        take a reorder slot -> plan step k under the plan lock (so steps are planned in order)
        -> read/materialise step k (in parallel with the other workers; numpy copies release
        the GIL) -> put it in the reorder buffer -> move every in-order batch to the prefetch
        queue while it has room
    consumer (`get`): take the next batch from the prefetch queue, and move in-order batches
        from the reorder buffer into the room it made

Bounds, as before the pipeline was merged into the workers: at most `reorder_capacity` batches
are being read or waiting in the reorder buffer (a slot is returned when a batch moves to the
prefetch queue), plus at most `prefetch_batches` finished ones, so a slow consumer applies
back-pressure all the way to planning.

Why workers plan and sequence themselves instead of separate planner and sequencer threads: on
one core every hand-off between threads is a context switch plus a GIL transfer, and with four
threads a batch took three of them; measured at S = 2048, the hand-offs cost ~200 us of CPU per
step, about as much as the work. Now a batch crosses one thread boundary (worker -> consumer),
and only when the consumer is actually waiting.
"""

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

_POLL_SECONDS = 0.1

END = object()
"""Marks the end of the planned sequence; `get` returns it once, after every batch."""


class ReadPipeline:
    """Runs `plan` (in order) and `read` (in parallel) on worker threads; `get` yields in order.

    `plan()` returns the next plan or None at the end; `read(plan)` turns it into the item the
    consumer receives. An exception from either is delivered by `get` in its place in the order,
    and nothing after it is planned.
    """

    def __init__(
        self,
        plan: Callable[[], Any],
        read: Callable[[Any], Any],
        *,
        read_workers: int,
        reorder_capacity: int,
        prefetch_batches: int,
    ) -> None:
        self._plan = plan
        self._read = read
        self.prefetch_batches = prefetch_batches
        self._stop = threading.Event()
        self._slots = threading.Semaphore(reorder_capacity)
        self._plan_lock = threading.Lock()
        self._planned = 0
        self._planning_done = False
        self._cond = threading.Condition()
        self._reorder: dict[int, Any] = {}
        self._next_out = 0
        self._prefetch: deque[Any] = deque()
        self._threads = [
            threading.Thread(target=self._work, daemon=True, name=f"runwright-read-{i}")
            for i in range(read_workers)
        ]
        for t in self._threads:
            t.start()

    @property
    def queue_depth(self) -> int:
        """Finished batches waiting in the prefetch queue."""
        return len(self._prefetch)

    @property
    def reorder_depth(self) -> int:
        """Batches read but waiting for an earlier one."""
        return len(self._reorder)

    def _take_plan(self) -> tuple[int, Any] | None:
        with self._plan_lock:
            if self._planning_done:
                return None
            seq = self._planned
            try:
                plan = self._plan()
            except Exception as exc:  # delivered to the consumer in order, then re-raised there
                plan = exc
            if plan is None:
                plan = END
            if plan is END or isinstance(plan, Exception):
                self._planning_done = True
            self._planned += 1
            return seq, plan

    def _work(self) -> None:
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=_POLL_SECONDS):
                continue
            taken = self._take_plan()
            if taken is None:
                self._slots.release()
                return
            seq, item = taken
            if item is not END and not isinstance(item, Exception):
                try:
                    item = self._read(item)
                except Exception as exc:
                    item = exc
            with self._cond:
                self._reorder[seq] = item
                self._drain()

    def _drain(self) -> None:
        """Move in-order batches from the reorder buffer to the prefetch queue (lock held)."""
        moved = False
        while self._next_out in self._reorder and len(self._prefetch) < self.prefetch_batches:
            self._prefetch.append(self._reorder.pop(self._next_out))
            self._next_out += 1
            self._slots.release()
            moved = True
        if moved:
            self._cond.notify_all()

    def get(self) -> Any:
        """The next item in plan order (END after the last); raises if every worker died."""
        with self._cond:
            while not self._prefetch:
                self._cond.wait(timeout=_POLL_SECONDS)
                if not self._prefetch and not any(t.is_alive() for t in self._threads):
                    raise RuntimeError("the loader's reader threads stopped")
            item = self._prefetch.popleft()
            self._drain()
            return item

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
