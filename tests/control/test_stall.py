"""Slow is not blocked: the ranks' processes confirm or clear a steady-state stall
(control/stall.py). Real processes: two gloo ranks blocked in a collective with their heartbeat
threads beating, a rank that computes in its main thread, and one whose reader thread computes
while its main thread waits for it."""

import socket
import subprocess
import sys
import time

import pytest

from runwright.control.stall import StallCheck
from runwright.control.watchdog import Verdict
from runwright.spec import FailureClass

pytestmark = pytest.mark.integration
STALL = Verdict(FailureClass.NO_PROGRESS, None, "no step past 13 for 5.1 s", suspect=True)

# Rank 1 enters an all-reduce on a side group rank 0 never joins; rank 0 waits in the default
# group's: as the reference trainer's --block-at-step knob does. A heartbeat thread beats every
# 0.5 s (a file append with fsync, like the channel's), so heartbeats go on while nothing trains.
BLOCKED_RANK = """
import os, sys, threading, time
import torch, torch.distributed as dist
rank, port, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
side = dist.new_group(backend="gloo")
def beat():
    while True:
        with open(f"{ready}.beats{rank}", "a") as f:
            f.write(f"{time.time()}\\n"); f.flush(); os.fsync(f.fileno())
        time.sleep(0.5)
threading.Thread(target=beat, daemon=True).start()
open(f"{ready}.{rank}", "w").close()
if rank == 1:
    dist.all_reduce(torch.zeros(1), group=side)
dist.all_reduce(torch.zeros(1))
"""
READER_BUSY = """
import threading
def read():
    while True: sum(range(10000))
worker = threading.Thread(target=read)
worker.start(); worker.join()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def spawn():
    started: list[subprocess.Popen] = []

    def start(*argv: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, *argv])
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def watch(check: StallCheck, pids: list[int], seconds: float) -> Verdict | None:
    """Confirm every 0.1 s (a controller pass) until a verdict or `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        verdict = check.confirm(STALL, pids, world_size=len(pids))
        if verdict is not None:
            return verdict
        time.sleep(0.1)
    return None


def wait_for(paths, timeout_seconds: float) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"{paths} not written in {timeout_seconds} s"
        time.sleep(0.1)


def test_ranks_blocked_in_a_collective_are_confirmed_while_they_still_beat(spawn, tmp_path):
    port, ready = str(free_port()), tmp_path / "ready"
    ranks = [spawn("-c", BLOCKED_RANK, str(r), port, str(ready)) for r in (0, 1)]
    # Importing torch on a busy 2-core machine took up to 40 s (docs/drill.md).
    wait_for([tmp_path / "ready.0", tmp_path / "ready.1"], timeout_seconds=120)
    time.sleep(1.0)  # into the collective: init's own CPU is behind them
    check = StallCheck(confirm_seconds=2.0)
    started, began = time.monotonic(), time.time()
    verdict = watch(check, [r.pid for r in ranks], seconds=10)
    assert verdict is not None and "no rank computed" in verdict.detail
    assert not verdict.suspect and verdict.failure_class is FailureClass.NO_PROGRESS
    assert 2.0 <= time.monotonic() - started < 10
    # The heartbeat thread was beating all along: a beat written after the watch began (waited
    # for, not assumed within a fixed time: on a busy machine an fsync may take seconds).
    deadline = time.monotonic() + 60
    while float((tmp_path / "ready.beats0").read_text().split()[-1]) <= began:
        assert time.monotonic() < deadline, "no heartbeat after the watch began"
        time.sleep(0.1)


def test_a_rank_computing_in_its_main_thread_is_only_slow(spawn):
    waiting = spawn("-c", "import time; time.sleep(600)")  # a peer waiting for it
    busy = spawn("-c", "while True: pass")
    time.sleep(0.5)
    # Twice the window: a group that computed nothing would have been confirmed by then.
    assert watch(StallCheck(confirm_seconds=0.8), [waiting.pid, busy.pid], seconds=1.6) is None


def test_a_rank_whose_reader_thread_computes_is_only_slow(spawn):
    reader = spawn("-c", READER_BUSY)
    time.sleep(0.3)
    assert watch(StallCheck(confirm_seconds=0.8), [reader.pid], seconds=1.6) is None


def test_nothing_is_confirmed_without_every_rank_in_view(spawn):
    blocked = spawn("-c", "import time; time.sleep(600)")
    time.sleep(0.3)
    check = StallCheck(confirm_seconds=0.3)
    # World of two, one pid visible (the other rank on another host): the cap decides.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert check.confirm(STALL, [blocked.pid], world_size=2) is None
        time.sleep(0.1)
