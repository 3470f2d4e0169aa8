"""Hang attribution on real processes (issue 24): two gloo ranks with runwright's dumper, blocked
the two ways a group hangs, asked for their dumps with the signal the controller sends
(control/hang_dumps.py), and attributed (control/attribution.py).

- a rank sits in a data wait (on a shard) while its peer entered a recorded all-reduce: the
  attribution names it, the all-reduce and the data wait;
- the ranks issue different collectives at one sequence number (rank 1 an all-reduce of another
  dtype, the same bytes, which gloo completes): a desync, not a hang.

The ranks are plain processes (init over tcp), as in tests/control/test_stall.py; the full
controller path (the watchdog's verdict, FAILURE_CLASSIFIED) is tests/control/test_hang_live.py.
"""

import socket
import subprocess
import sys
import time

import pytest

from runwright.control.hang_dumps import attribute_hang
from runwright.layout import RunPaths

pytestmark = pytest.mark.integration

RANK = """
import sys, threading, time
import torch, torch.distributed as dist
from runwright.runtime import collective_hooks
from runwright.runtime.collective_log import doing
rank, port, folder, case = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
collective_hooks.install_dumper(__import__("pathlib").Path(folder), 1, rank)
for _ in range(3):  # steps that went well: #1..#3 on both ranks
    collective_hooks.all_reduce(torch.ones(4), label="loss_tokens")
open(f"{folder}/ready{rank}", "w").close()
if case == "data_wait" and rank == 1:
    with doing("data_wait", shard="00017"):
        threading.Event().wait()  # a read that never returns
# Rank 1's desync: the same bytes in another dtype, which gloo sums without noticing.
dtype = torch.int32 if case == "desync" and rank == 1 else torch.float32
collective_hooks.all_reduce(torch.ones(4, dtype=dtype), label="loss_tokens")
open(f"{folder}/after{rank}", "w").close()
threading.Event().wait()  # stay, as a group past a desync hangs or fails later
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_pair(tmp_path, case: str):
    port = str(free_port())
    ranks = [
        subprocess.Popen([sys.executable, "-c", RANK, str(r), port, str(tmp_path), case])
        for r in (0, 1)
    ]
    try:
        deadline = time.monotonic() + 120  # imports and rendezvous on a busy 2-core machine
        while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline, "the ranks did not start"
            assert all(p.poll() is None for p in ranks), "a rank exited"
            time.sleep(0.05)
        time.sleep(0.5)  # both past their last good collective: into the block
        pids = {r: p.pid for r, p in enumerate(ranks)}
        return attribute_hang(RunPaths(tmp_path), 1, pids, 2, wait_seconds=30)
    finally:
        for process in ranks:
            process.kill()
            process.wait()


@pytest.mark.slow  # the default suite covers it through the controller: test_hang_live.py
def test_the_rank_in_a_data_wait_is_named_with_the_collective_its_peer_waits_in(tmp_path):
    found, dumps, seconds = run_pair(tmp_path, "data_wait")
    assert sorted(dumps) == [0, 1] and all(d["reason"] == "signal" for d in dumps.values())
    assert found.kind == "hang" and found.culprits == (1,), found.sentence
    assert found.sentence.startswith("rank 0 wait in all_reduce #4 (label loss_tokens, 16 B)")
    assert "rank 1 never entered it: data wait" in found.sentence
    assert "on shard 00017" in found.sentence
    # faulthandler's stack of the wedged main thread: the frame it blocks in.
    assert "in wait" in " ".join(dumps[1]["main_frames"]), dumps[1]["main_frames"]
    assert seconds < 30


def test_different_collectives_at_one_sequence_number_are_a_desync(tmp_path):
    found, _, _ = run_pair(tmp_path, "desync")
    assert found.kind == "desync", found.sentence
    assert found.facts["seq"] == 4 and found.culprits == (1,)
    assert "rank 0 issued all_reduce float32 [4]; rank 1 issued all_reduce int32 [4]" in (
        found.sentence
    )
