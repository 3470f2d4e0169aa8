"""A reconcile pass does bounded work whatever the event rate: a channel backlog is read in
turns across ranks and cut at a deadline, so a cancel's grace kill happens on time."""

import os
import threading
import time
from pathlib import Path

import pytest

from runwright.control import controller as controller_module
from runwright.control.cancel import request_cancel
from runwright.control.channel import READ_CHUNK_BYTES, ChannelReader
from runwright.control.controller import Controller
from runwright.runtime.channel import ChannelWriter
from runwright.spec import spec_from_mapping
from runwright.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "flood_worker.py"


def test_a_deadline_cut_poll_advances_every_rank(tmp_path):
    """Rank 0 has a long backlog: rank 1's messages are read after at most a turn of rank 0's,
    not after all of it, and a cut poll keeps the rest for the next poll."""
    channel = tmp_path / "channel"
    writers = [ChannelWriter(channel, 1, rank, fsync_events=False) for rank in (0, 1)]
    for step in range(1, 20_001):
        writers[0].send("STEP_HEALTHY", step=step)
    for step in range(1, 11):
        writers[1].send("STEP_HEALTHY", step=step)
    line_bytes = (channel / "gen00001-rank00000.jsonl").stat().st_size / 20_000
    reader = ChannelReader(channel)
    seen: list[tuple[int, int]] = []
    first_of_rank_one = None
    polls = 0
    while len(seen) < 20_010:
        polls += 1
        for batch in reader.poll_batches(100, until=0.0):  # cut after every batch
            seen += [(m.rank, m.step) for m in batch]
            if first_of_rank_one is None and any(m.rank == 1 for m in batch):
                first_of_rank_one = len(seen)
    assert polls > 1
    assert sorted(seen) == sorted({*seen})  # nothing twice, nothing lost
    assert first_of_rank_one is not None
    assert first_of_rank_one <= READ_CHUNK_BYTES / line_bytes + 200


@pytest.mark.integration
def test_cancel_kills_a_flooding_group_on_time(tmp_path):
    grace = 3.0
    spec = spec_from_mapping(
        {
            "name": "flood",
            "code": {"entrypoint": str(SCRIPT), "args": ["1000"]},
            "training": {"global_batch_samples": 2, "steps": 10**9},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"enabled": False},
            "recovery": {
                "stop_grace_seconds": grace,
                "heartbeat_interval_seconds": 1,
                "heartbeat_timeout_seconds": 600,
                "progress_timeout_seconds": 1200,
            },
        }
    )
    store = Store.open(tmp_path)
    marks: dict[str, float] = {}
    pids: list[int] = []
    watchers: list[threading.Thread] = []

    def on_event(event) -> None:
        if event.type == "WORKER_STARTED":
            pids.append(int(event.attributes["pid"]))
        if event.type == "STEP_HEALTHY" and (event.step or 0) >= 3000 and "cancel" not in marks:
            marks["cancel"] = time.monotonic()
            request_cancel(store, event.run_id, "test: cancel a flood")
            watchers.append(threading.Thread(target=watch_workers, daemon=True))
            watchers[0].start()

    def watch_workers() -> None:
        while any(_alive(pid) for pid in pids):
            time.sleep(0.05)
        marks["gone"] = time.monotonic()

    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=on_event)
    passes: list[tuple[float, float]] = []
    reconcile = controller.reconcile

    def timed(run_id: str) -> bool:
        started = time.monotonic()
        try:
            return reconcile(run_id)
        finally:
            passes.append((started, time.monotonic() - started))

    controller.reconcile = timed  # type: ignore[method-assign]
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "CANCELLED"
    # drive returns once the workers are gone; the watcher notices within one of its polls.
    for watcher in watchers:
        watcher.join(timeout=30)
    assert len(pids) == 2 and "gone" in marks, marks
    killed_after = marks["gone"] - marks["cancel"]
    # The grace, then at most the pass that notices the deadline and the one before it: bounded
    # by the slowest pass measured after the cancel (a backlog would make it the ingest slice).
    waiting = [s for started, s in passes if marks["cancel"] <= started < marks["cancel"] + grace]
    slowest = max(waiting)
    bound = grace + 2 * slowest + 2 * controller.poll_seconds + 1.0
    assert killed_after < bound, (
        f"the workers died {killed_after:.1f} s after the cancel; the slowest pass in the grace "
        f"took {slowest:.2f} s (bound {bound:.1f} s)"
    )
    # While the flood goes on, a pass is its ingest slice plus the writes around it, however
    # long the backlog grows (seconds of slack for a starved machine; an unbounded pass over a
    # backlog of this flood's size took tens of seconds).
    assert slowest < controller_module.INGEST_SLICE_SECONDS + 5.0, waiting
    (attempt,) = [a for a in store.attempts(run.run_id) if a.generation == 1]
    assert attempt.exit_code != 0  # killed: the worker honours no stop


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False  # gone, also between the signal and the read (the watcher must not die)
    return stat.split(") ")[-1][:1] != "Z"
