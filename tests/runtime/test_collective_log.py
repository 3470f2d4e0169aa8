"""The collective log (runtime/collective_log.py): bounded, numbered per group, the phase a rank
is in, and a dump that leaves the process on SIGUSR1 even while the main thread is blocked in a
C call (here: a lock acquire), through faulthandler and the dumper thread."""

import json
import os
import threading
import time

import torch

from runwright.layout import RunPaths
from runwright.protocol import DUMP_SIGNAL
from runwright.runtime.collective_log import CollectiveLog, Dumper, main_thread_frames


def test_the_buffer_is_bounded_and_numbers_each_group_on_its_own():
    log = CollectiveLog(capacity=3)
    tensor = torch.ones(2, 3)
    for _ in range(4):
        log.exit(log.enter("all_reduce", tensor))
    side = log.enter("all_gather", tensor, group=None)
    assert len(log.records) == 3  # the oldest two went
    assert [r.seq for r in log.records] == [3, 4, 5]
    assert side is not None and side.exit_wall is None and side.bytes == 24
    assert side.shape == (2, 3) and side.dtype == "float32"


def test_sequence_numbers_are_per_group():
    log = CollectiveLog()

    class Group:
        group_name = "7"

    log.enter("all_reduce", torch.ones(1))
    log.enter("broadcast", torch.ones(1), group=Group())
    log.enter("all_reduce", torch.ones(1))
    assert [(r.group, r.seq) for r in log.records] == [("0", 1), ("7", 1), ("0", 2)]


def test_a_phase_is_marked_for_its_block_and_nests():
    log = CollectiveLog()
    with log.doing("data_wait", shard="00017"):
        with log.doing("h2d"):
            assert log.phase[0] == "h2d"
        name, since_mono, _, detail = log.phase
        assert name == "data_wait" and detail == {"shard": "00017"}
        assert since_mono <= log.snapshot()["now_mono"]
    assert log.phase is None and log.snapshot()["phase"] is None


def test_off_when_the_flight_recorder_keeps_the_record():
    log = CollectiveLog()
    log.recording = False
    assert log.enter("all_reduce", torch.ones(1)) is None and not log.records
    log.exit(None)  # what the hooks call with it: nothing happens


def test_the_main_thread_s_newest_stack_is_read_from_faulthandler_s_output():
    ident = threading.main_thread().ident
    older = f'Thread 0x{ident:016x} (most recent call first):\n  File "/a.py", line 1 in old\n'
    other = 'Thread 0x0000000000000001 (most recent call first):\n  File "/t.py", line 9 in run\n'
    newest = (
        f"Current thread 0x{ident:016x} (most recent call first):\n"
        '  File "/x/loader.py", line 12 in wait\n  File "/x/train.py", line 40 in main\n'
    )
    frames = main_thread_frames(older + "\n" + other + newest)
    assert frames == ["/x/loader.py:12 in wait", "/x/train.py:40 in main"]


def test_a_blocked_main_thread_still_dumps_on_the_signal(tmp_path):
    log = CollectiveLog()
    paths = RunPaths(tmp_path)
    dumper = Dumper(
        log, paths.collective_dump(2, 0), paths.stack_dump(2, 0), {"rank": 0, "generation": 2}
    )
    dumper.install()
    try:
        log.enter("all_reduce", torch.ones(4), bucket=3)
        blocker = threading.Lock()
        blocker.acquire()

        # The signal arrives while the main thread waits in C (no Python handler could run);
        # a timer thread sends it, and releases the main thread once the dump is there.
        def signal_then_release() -> None:
            os.kill(os.getpid(), DUMP_SIGNAL)
            deadline = time.monotonic() + 30
            while not paths.collective_dump(2, 0).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            blocker.release()

        threading.Thread(target=signal_then_release).start()
        assert blocker.acquire(timeout=60)
        dump = json.loads(paths.collective_dump(2, 0).read_text())
        assert dump["reason"] == "signal" and dump["rank"] == 0 and dump["generation"] == 2
        (record,) = dump["records"]
        assert record["op"] == "all_reduce" and record["detail"] == {"bucket": 3}
        assert record["exit_wall"] is None and record["bytes"] == 16
        assert any("test_collective_log.py" in f for f in dump["main_frames"]), dump
    finally:
        dumper.close()
    assert json.loads(paths.collective_dump(2, 0).read_text())["reason"] == "exit"
