"""Recovery on a machine whose CPUs are oversubscribed (issue 20): spinning processes at the
workers' own priority hold every core, so ranks run several times slower than their steps need.
A slow run must still succeed with no failure recorded, and a stopped rank must still be found
as a hang and recovered. (Three recovery tests once failed this way: a slow worker was called
hung.)"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"


def usable_cores() -> int:
    """Cores this process may run on: its affinity, capped by a cgroup CPU quota. os.cpu_count()
    names the host's cores, which in a container limited to two can be dozens: twice that many
    spinners would slow the ranks sixty-fold instead of threefold."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, round(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


@pytest.fixture
def oversubscribed():
    """Twice as many busy loops as usable cores, for the duration of the test. Each in a session
    of its own, as each rank is: with the kernel's autogroup scheduling on, spinners sharing the
    test's session would share one session's slice and barely slow the ranks."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * usable_cores())
    ]
    try:
        yield len(spinners)
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def _spec(steps):
    return spec_from_mapping(
        {
            "name": "oversubscribed",
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-sleep", "0.2"]},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 3}},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": 4,
                "progress_timeout_seconds": 60,
            },
        }
    )


def _failures(store, run_id):
    return store.events(run_id, types=["FAILURE_CLASSIFIED"])


def test_a_slow_run_on_a_busy_machine_succeeds_without_a_failure(tmp_path, oversubscribed):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(_spec(steps=8), tmp_path)
    final = controller.drive(run.run_id)
    failures = [f.attributes for f in _failures(store, run.run_id)]
    assert final.state == "SUCCEEDED", (final.state_detail, failures)
    assert failures == []
    assert [a.generation for a in store.attempts(run.run_id)] == [1]
    store.close()


# A minute of CI time: the default suite has the hang itself (test_recovery's SIGSTOP on a quiet
# machine, test_liveness's stopped process) and the busy machine without a hang (above).
@pytest.mark.slow
def test_a_stopped_rank_on_a_busy_machine_is_still_a_hang(tmp_path, oversubscribed):
    store = Store.open(tmp_path)
    frozen: list[int] = []

    def freeze(event):
        if frozen or event.type != "STEP_HEALTHY" or event.generation != 1 or event.step < 4:
            return
        (pid,) = [
            int(e.attributes["pid"])
            for e in store.events(run_id, types=["WORKER_STARTED"])
            if e.generation == 1 and e.attributes["rank"] == 1
        ]
        os.kill(pid, signal.SIGSTOP)
        frozen.append(pid)

    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=freeze)
    run, _ = controller.submit(_spec(steps=10), tmp_path)
    run_id = run.run_id
    started = time.monotonic()
    try:
        final = controller.drive(run_id)
    finally:
        for pid in frozen:
            subprocess.run(["kill", "-CONT", str(pid)], check=False)
    failures = _failures(store, run_id)
    assert final.state == "SUCCEEDED", (final.state_detail, [f.attributes for f in failures])
    assert len(failures) == 1, [f.attributes for f in failures]
    (failure,) = failures
    assert failure.attributes["failure_class"] == "hang" and failure.attributes["rank"] == 1
    assert store.events(run_id, types=["RECOVERY_SUCCEEDED"])
    assert time.monotonic() - started < 600
    store.close()
