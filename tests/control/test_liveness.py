"""Slow is not stopped: a silent rank's process confirms or clears a suspected hang.

Real processes in each state the kernel reports: blocked (sleeping without CPU), busy (a core's
worth of CPU, but late), stopped (SIGSTOP) and gone.
"""

import signal
import subprocess
import sys
import time

import pytest

from runwright.control.liveness import Liveness
from runwright.control.watchdog import Verdict
from runwright.spec import FailureClass

HANG = Verdict(FailureClass.HANG, 1, "rank 1 silent for 5.0 s (heartbeat timeout 4 s)")


@pytest.fixture
def child():
    started = []

    def start(code: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-c", code])
        started.append(process)
        time.sleep(0.3)  # past the interpreter's start-up, which uses CPU of its own
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def watch(liveness: Liveness, pid: int, seconds: float) -> Verdict | None:
    """Confirm every 0.1 s for `seconds` of real time; the last answer."""
    deadline = time.monotonic() + seconds
    verdict = liveness.confirm(HANG, pid)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        verdict = liveness.confirm(HANG, pid)
    return verdict


def test_a_blocked_process_is_hung_once_it_used_no_cpu_for_the_confirm_window(child):
    blocked = child("import time; time.sleep(600)")
    liveness = Liveness(grace_seconds=5, max_silent_seconds=60, confirm_seconds=0.5)
    assert liveness.confirm(HANG, blocked.pid) is None  # the window has just begun
    verdict = watch(liveness, blocked.pid, 0.8)
    assert verdict is not None and "used no CPU" in verdict.detail


def test_a_busy_process_is_only_slow_until_the_progress_timeout(child):
    busy = child("while True: pass")
    liveness = Liveness(grace_seconds=5, max_silent_seconds=60, confirm_seconds=0.5)
    assert watch(liveness, busy.pid, 1.5) is None
    late = liveness.confirm(HANG, busy.pid, now=time.monotonic() + 61)
    assert late is not None and "progress timeout" in late.detail


def test_a_stopped_process_is_hung_at_once(child):
    stopped = child("import time; time.sleep(600)")
    stopped.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    verdict = None
    while verdict is None and time.monotonic() < deadline:
        verdict = Liveness(grace_seconds=5, max_silent_seconds=60).confirm(HANG, stopped.pid)
    assert verdict is not None and "stopped" in verdict.detail
    stopped.send_signal(signal.SIGCONT)


def test_a_gone_process_waits_for_its_groups_exit_status_then_counts_as_hung(child):
    gone = child("pass")
    gone.wait()
    liveness = Liveness(grace_seconds=5, max_silent_seconds=60)
    began = time.monotonic()
    assert liveness.confirm(HANG, gone.pid, now=began) is None
    assert liveness.confirm(HANG, gone.pid, now=began + 4.9) is None
    verdict = liveness.confirm(HANG, gone.pid, now=began + 5.1)
    assert verdict is not None and "gone" in verdict.detail


def test_an_unknown_pid_or_rank_passes_the_verdict_through():
    liveness = Liveness(grace_seconds=5, max_silent_seconds=60)
    assert liveness.confirm(HANG, None) is HANG
    anonymous = Verdict(FailureClass.HANG, None, "silent")
    assert liveness.confirm(anonymous, 1) is anonymous


def test_a_rank_that_never_started_is_judged_by_its_generations_processes(child):
    """No pid yet (start-up outlasted its allowance): the generation's processes stand in, so a
    start-up that still computes is slow, and one that computes nothing is hung."""
    NEVER = Verdict(FailureClass.HANG, 1, "rank 1 never sent a heartbeat in 61 s after launch")
    busy, blocked = child("while True: pass"), child("import time; time.sleep(600)")
    starting = Liveness(grace_seconds=5, max_silent_seconds=60, confirm_seconds=0.5)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert starting.confirm(NEVER, None, members=lambda: [busy.pid, blocked.pid]) is None
        time.sleep(0.1)
    stuck = Liveness(grace_seconds=5, max_silent_seconds=60, confirm_seconds=0.5)
    verdict = stuck.confirm(NEVER, None, members=lambda: [blocked.pid])
    deadline = time.monotonic() + 10
    while verdict is None and time.monotonic() < deadline:
        time.sleep(0.1)
        verdict = stuck.confirm(NEVER, None, members=lambda: [blocked.pid])
    assert verdict is not None and "used no CPU" in verdict.detail
