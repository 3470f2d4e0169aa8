"""The read pipeline: plan order restored after out-of-order reads, the bound, errors in order."""

import random
import threading
import time

import pytest

from runwright.data.read.prefetch import END, ReadPipeline

from .test_loader import read_global, spec


class Source:
    """Plans 0..count-1 and counts what is planned but not yet taken by the consumer."""

    def __init__(self, count: int, *, fail_plan_at: int | None = None) -> None:
        self.count = count
        self.fail_plan_at = fail_plan_at
        self.next = 0
        self.lock = threading.Lock()
        self.outstanding = 0
        self.max_outstanding = 0

    def plan(self):
        if self.next == self.fail_plan_at:
            raise ValueError(f"plan {self.next} failed")
        if self.next >= self.count:
            return None
        k, self.next = self.next, self.next + 1
        with self.lock:
            self.outstanding += 1
            self.max_outstanding = max(self.max_outstanding, self.outstanding)
        return k

    def taken(self) -> None:
        with self.lock:
            self.outstanding -= 1


def drain(pipeline: ReadPipeline, source: Source, pause_seconds: float = 0.0) -> list:
    out = []
    while True:
        item = pipeline.get()
        if item is END or isinstance(item, Exception):
            out.append(item)
            return out
        source.taken()
        out.append(item)
        time.sleep(pause_seconds)


@pytest.mark.parametrize("workers", [0, 1, 4])
def test_out_of_order_reads_come_out_in_plan_order(workers: int) -> None:
    source = Source(200)
    rng = random.Random(workers)
    delays = [rng.choice([0.0, 0.0, 0.001, 0.003]) for _ in range(200)]

    def read(k: int) -> int:
        time.sleep(delays[k])  # later plans often finish first
        return k * 10

    pipeline = ReadPipeline(
        source.plan, read, read_workers=workers, reorder_capacity=3, prefetch_batches=2
    )
    try:
        assert drain(pipeline, source) == [k * 10 for k in range(200)] + [END]
    finally:
        pipeline.close()


def test_a_slow_consumer_holds_planning_at_the_bound() -> None:
    source = Source(10_000)
    pipeline = ReadPipeline(
        source.plan, lambda k: k, read_workers=3, reorder_capacity=2, prefetch_batches=3
    )
    try:
        time.sleep(0.3)  # the workers run ahead as far as the bound lets them, then wait
        assert source.next == 5
        for k in range(20):
            assert pipeline.get() == k
            source.taken()
            time.sleep(0.005)
        assert source.max_outstanding <= 5
        assert source.next <= 20 + 5
    finally:
        pipeline.close()


def test_a_read_error_is_delivered_in_its_place() -> None:
    source = Source(50)

    def read(k: int) -> int:
        if k == 7:
            raise OSError("shard 7 unreadable")
        time.sleep(0.001 if k < 7 else 0.0)  # later reads finish before the failing one
        return k

    pipeline = ReadPipeline(
        source.plan, read, read_workers=3, reorder_capacity=4, prefetch_batches=2
    )
    try:
        out = drain(pipeline, source)
    finally:
        pipeline.close()
    assert out[:7] == list(range(7))
    assert isinstance(out[7], OSError) and "shard 7" in str(out[7])


def test_a_planning_error_ends_planning() -> None:
    source = Source(50, fail_plan_at=4)
    pipeline = ReadPipeline(
        source.plan, lambda k: k, read_workers=2, reorder_capacity=2, prefetch_batches=2
    )
    try:
        out = drain(pipeline, source)
        time.sleep(0.2)
    finally:
        pipeline.close()
    assert out[:4] == [0, 1, 2, 3] and isinstance(out[4], ValueError)
    assert source.next == 4


def test_queue_depth_reports_finished_batches() -> None:
    source = Source(100)
    pipeline = ReadPipeline(
        source.plan, lambda k: k, read_workers=1, reorder_capacity=2, prefetch_batches=2
    )
    try:
        time.sleep(0.3)
        assert pipeline.queue_depth == 4 and pipeline.reorder_depth == 0
    finally:
        pipeline.close()


def test_the_sequence_does_not_depend_on_read_workers(two_source_dataset) -> None:
    folder, _, _ = two_source_dataset
    data = spec()
    inline, _, _ = read_global(folder, data, 15, 1, read_workers=0)
    threaded, _, _ = read_global(folder, data, 15, 1, read_workers=3)
    assert len(inline) == len(threaded) == 15
    assert all((a == b).all() for a, b in zip(inline, threaded, strict=True))
