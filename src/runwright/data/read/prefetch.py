"""The loader's read pipeline: ordered planning, parallel reads, a reorder buffer, a prefetch bound.

    worker threads (read_workers of them), each in a loop:
        take a token (blocks while the pipeline is full) -> plan step k under the plan lock
        (so steps are planned in order) -> read/materialise step k (in parallel with the other
        workers; the fill kernels run without the GIL) -> publish it in slot k
    consumer (`get`): wait for slot k, k = 0, 1, 2, ... in order, take its batch and give the
        token back; while slot k is not ready and a token is free, plan and read the next
        step itself (so on a single core a batch needs no hand-off at all)

The slots keyed by step number are the reorder buffer: a read that finishes early waits in
its slot until every earlier one has been taken, so parallel reads that finish out of order
are handed out in plan order. Back-pressure: there are `reorder_capacity + prefetch_batches`
tokens, so at most that many batches are planned and not yet taken (being read, waiting for an
earlier one, or finished and waiting for the caller); a slow consumer stops the workers at the
token queue, before planning.

Why tokens and per-slot locks instead of a condition variable and a semaphore: both of those
are written in Python on top of `threading.Condition` (a fresh lock per wait, a waiter list),
which cost ~15-20 us of CPU per batch on one core, as much as the planning. A SimpleQueue and
a plain lock are C-level, so a batch costs two lock operations and a token round trip.
"""

import queue
import threading
from collections.abc import Callable
from typing import Any

_POLL_SECONDS = 0.1

END = object()
"""Marks the end of the planned sequence; `get` returns it once, after every batch."""


class _Slot:
    """One planned step: `ready` is held until the read stored its item."""

    __slots__ = ("item", "ready")

    def __init__(self) -> None:
        self.ready = threading.Lock()
        self.ready.acquire()
        self.item: Any = None

    @property
    def finished(self) -> bool:
        return not self.ready.locked()


class ReadPipeline:
    """Runs `plan` (in order) and `read` (in parallel) on worker threads; `get` yields in order.

    `plan()` returns the next plan or None at the end; `read(plan)` turns it into the item the
    consumer receives. An exception from either is delivered by `get` in its place in the order;
    one from `plan` also ends planning. `read_workers` may be 0: then `get` does all the work.
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
        self._stop = threading.Event()
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(reorder_capacity + prefetch_batches):
            self._tokens.put(None)
        self._plan_lock = threading.Lock()
        self._planned = 0
        self._planning_done = False
        self._slots_lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}
        self._next_out = 0
        self._threads = [
            threading.Thread(target=self._work, daemon=True, name=f"runwright-read-{i}")
            for i in range(read_workers)
        ]
        for t in self._threads:
            t.start()

    def _slot(self, seq: int) -> _Slot:
        """Slot `seq`, made by whichever of its worker and the consumer comes first."""
        with self._slots_lock:
            slot = self._slots.get(seq)
            if slot is None:
                slot = self._slots[seq] = _Slot()
            return slot

    def _depths(self) -> tuple[int, int]:
        """(finished batches next in line, finished batches waiting behind an unfinished one)."""
        with self._slots_lock:
            seq, ready = self._next_out, 0
            while seq in self._slots and self._slots[seq].finished:
                ready += 1
                seq += 1
            waiting = sum(1 for k, s in self._slots.items() if k > seq and s.finished)
        return ready, waiting

    @property
    def queue_depth(self) -> int:
        """Finished batches the caller can take without waiting."""
        return self._depths()[0]

    @property
    def reorder_depth(self) -> int:
        """Batches read but waiting for an earlier one."""
        return self._depths()[1]

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

    def _produce(self) -> bool:
        """Plan and read the next step into its slot (the caller holds a token).

        False once planning is done (the token is given back).
        """
        taken = self._take_plan()
        if taken is None:
            self._tokens.put(None)
            return False
        seq, item = taken
        if item is not END and not isinstance(item, Exception):
            try:
                item = self._read(item)
            except Exception as exc:
                item = exc
        slot = self._slot(seq)
        slot.item = item
        slot.ready.release()
        return True

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                self._tokens.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
            if not self._produce():
                return

    def get(self) -> Any:
        """The next item in plan order (END after the last); raises if every worker died.

        When nothing is ready and the pipeline has room, the caller plans and reads the next
        step itself instead of waiting: a hand-off to a worker costs two context switches and a
        GIL transfer (~10-15 us on one core, measured), and a caller that would wait has
        nothing better to do.
        """
        slot = self._slot(self._next_out)
        stealing = True
        while not slot.ready.acquire(blocking=False):
            if stealing:
                try:
                    self._tokens.get_nowait()
                except queue.Empty:
                    pass
                else:
                    stealing = self._produce()
                    continue
            if slot.ready.acquire(timeout=_POLL_SECONDS):
                break
            if not any(t.is_alive() for t in self._threads):
                raise RuntimeError("the loader's reader threads stopped")  # or there are none
        with self._slots_lock:
            del self._slots[self._next_out]
            self._next_out += 1
        self._tokens.put(None)
        return slot.item

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
