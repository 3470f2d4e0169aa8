"""The two-line integration stops on real torchrun: SIGTERM to torchrun (a Slurm or Kubernetes
preemption), Ctrl-C to the whole group, and `runwright cancel` under the controller each end
every rank after the same step, at a step boundary, long before torchrun or the controller would
have to kill them."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runwright.control.cancel import request_cancel
from runwright.control.channel import ChannelReader
from runwright.control.controller import Controller
from runwright.layout import RunPaths
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "two_line.py"
TORCHRUN_KILL_GRACE_SECONDS = 30.0
"""torchrun's own grace between the SIGTERM it sends its workers and SIGKILL
(torch.distributed.elastic's `_close(timeout=30)`): a group gone well before it stopped itself."""


def messages(run_dir: Path, type_: str):
    return [m for m in ChannelReader(RunPaths(run_dir).channel).poll() if m.type == type_]


def wait_for_steps(run_dir: Path, step: int, process: subprocess.Popen) -> None:
    """Until both ranks report `step` (the group runs; no sleep decides it)."""
    reader = ChannelReader(RunPaths(run_dir).channel)
    newest: dict[int, int] = {}
    while min(newest.get(0, 0), newest.get(1, 0)) < step:
        assert process.poll() is None, "torchrun ended before the stop was sent"
        for m in reader.poll():
            if m.type == "STEP_HEALTHY":
                newest[m.rank] = max(newest.get(m.rank, 0), m.step or 0)
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("signum", "whole_group", "reason"),
    [(signal.SIGTERM, False, "preemption"), (signal.SIGINT, True, "cancel")],
    ids=["sigterm-to-torchrun", "ctrl-c-to-the-group"],
)
def test_plain_torchrun_stops_every_rank_after_the_same_step(tmp_path, signum, whole_group, reason):
    run_dir = tmp_path / "run"
    env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(run_dir), "OMP_NUM_THREADS": "1"}
    for name in ("RUNWRIGHT_RUN_ID", "RUNWRIGHT_SPEC_FILE", "RUNWRIGHT_RANK_MANIFEST"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(SCRIPT)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_steps(run_dir, 5, process)
        sent = time.monotonic()
        if whole_group:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
        output, _ = process.communicate(timeout=TORCHRUN_KILL_GRACE_SECONDS * 3)
        elapsed = time.monotonic() - sent
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    acks = messages(run_dir, "STOP_ACKNOWLEDGED")
    assert sorted(m.rank for m in acks) == [0, 1], output.decode()[-3000:]
    assert len({m.step for m in acks}) == 1, [(m.rank, m.step) for m in acks]
    assert {m.attributes["reason"] for m in acks} == {reason}
    last = {m.rank: m.step for m in messages(run_dir, "STEP_HEALTHY")}
    assert last == {0: acks[0].step, 1: acks[0].step}  # no rank went past the agreed step
    assert b"finished all" not in output
    assert elapsed < TORCHRUN_KILL_GRACE_SECONDS, f"{elapsed:.1f} s: torchrun had to kill them"


def test_cancel_under_the_controller_stops_the_two_line_script(tmp_path):
    spec = spec_from_mapping(
        {
            "name": "two-line-cancel",
            "code": {"entrypoint": str(SCRIPT)},
            "training": {"global_batch_samples": 2, "steps": 100_000},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"enabled": False},
            # Far longer than a stop at the next step takes: the group ends on its own.
            "recovery": {"stop_grace_seconds": 300, "heartbeat_interval_seconds": 1},
        }
    )
    store = Store.open(tmp_path)
    holder: dict = {}

    def cancel_at_step_five(event) -> None:
        if event.type == "STEP_HEALTHY" and (event.step or 0) >= 5 and "sent" not in holder:
            holder["sent"] = time.monotonic()
            request_cancel(store, event.run_id, "test: two-line cancel")

    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=cancel_at_step_five)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    elapsed = time.monotonic() - holder["sent"]
    assert final.state == "CANCELLED" and final.terminal_reason == "USER_CANCELLED"
    acks = store.events(run.run_id, types=["STOP_ACKNOWLEDGED"])
    assert sorted(e.attributes["rank"] for e in acks) == [0, 1]
    assert len({e.step for e in acks}) == 1
    (attempt,) = [a for a in store.attempts(run.run_id) if a.generation == 1]
    assert attempt.exit_code == 0  # every rank returned by itself; nothing was killed
    assert elapsed < spec.recovery.stop_grace_seconds
