"""Parent-death signals (runwright/lifetime.py) on real processes."""

import os
import signal
import subprocess
import sys
import time

from runwright.control.processes import descendants, is_alive
from runwright.control.supervise import Agent, AgentsPlan
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


def _plan(tmp_path, *argvs):
    """A supervisor plan running each argv as one node's agent, its output in agent<N>.log."""
    agents = [
        Agent(node=i, host="here", argv=argv, log=str(tmp_path / f"agent{i}.log"))
        for i, argv in enumerate(argvs)
    ]
    plan = AgentsPlan(
        agents=agents,
        tags={},
        exit_file=str(tmp_path / "exit_status"),
        node_exits_file=str(tmp_path / "node_exits.json"),
    )
    path = tmp_path / "agents.json"
    path.write_text(plan.model_dump_json())
    return path


def _wait_for_output(path, text, timeout_seconds=120):
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} never said {text!r}")


def test_agents_die_with_a_sigkilled_supervisor(tmp_path):
    """The supervisor's preexec_fn arms every agent's parent-death signal (here sleepers stand
    in for two nodes' torchrun agents): nothing else is there to end them."""
    sleeper = [sys.executable, "-c", SLEEPER]
    started = time.monotonic()
    supervisor = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runwright.control.supervise",
            str(_plan(tmp_path, sleeper, sleeper)),
        ],
        start_new_session=True,
    )
    try:
        for node in (0, 1):
            _wait_for_output(tmp_path / f"agent{node}.log", "up")
        startup_seconds = time.monotonic() - started
        children = descendants(supervisor.pid)
        assert len(children) == 2
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(timeout=60)
        # Dying is one kernel signal; starting took an interpreter: the children get that long
        # (at least a second, as a warm interpreter starts in tens of milliseconds).
        deadline = time.monotonic() + max(startup_seconds, 1.0)
        while any(is_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(is_alive(c) for c in children), (
            f"still alive {startup_seconds:.2f} s after their supervisor"
        )
        assert not (tmp_path / "exit_status").exists()
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
