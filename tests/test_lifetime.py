"""Parent-death signals (runwright/lifetime.py) on real processes."""

import os
import signal
import subprocess
import sys
import time

from runwright.control.processes import descendants, is_alive
from runwright.lifetime import die_with_parent, environ_of, has_tags

SLEEPER = "import time; print('up', flush=True); time.sleep(60)"


def test_a_child_whose_parent_is_already_gone_dies_at_once():
    # The check after setting the signal: a parent that is not the expected one means the real
    # parent exited before the signal was armed.
    child = subprocess.run(
        [sys.executable, "-c", SLEEPER],
        preexec_fn=lambda: die_with_parent(lambda _ppid: False),
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL and child.stdout == b""


def test_torchrun_dies_with_a_sigkilled_supervisor(tmp_path):
    """The supervisor's preexec_fn arms torchrun's parent-death signal (here a sleeper stands
    in for torchrun): nothing else is there to end it."""
    sleeper = [sys.executable, "-c", SLEEPER]
    started = time.monotonic()
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "runwright.control.supervise", str(tmp_path / "x"), "--", *sleeper],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert supervisor.stdout.readline() == b"up\n"
        startup_seconds = time.monotonic() - started
        (child,) = descendants(supervisor.pid)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(timeout=60)
        # Dying is one kernel signal; starting took an interpreter: the child gets that long
        # (at least a second, as a warm interpreter starts in tens of milliseconds).
        deadline = time.monotonic() + max(startup_seconds, 1.0)
        while is_alive(child) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not is_alive(child), f"still alive {startup_seconds:.2f} s after its supervisor"
        assert not (tmp_path / "x").exists()
    finally:
        for pid in descendants(supervisor.pid):
            os.kill(pid, signal.SIGKILL)


def test_launch_tags_are_read_from_proc():
    child = subprocess.Popen(
        [sys.executable, "-c", SLEEPER],
        env={**os.environ, "RUNWRIGHT_GENERATION": "7"},
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout.readline() == b"up\n"
        assert environ_of(child.pid)["RUNWRIGHT_GENERATION"] == "7"
        assert has_tags(child.pid, {"RUNWRIGHT_GENERATION": "7"})
        assert not has_tags(child.pid, {"RUNWRIGHT_GENERATION": "6"})
    finally:
        child.kill()
        child.wait()
    assert environ_of(child.pid) is None  # gone
