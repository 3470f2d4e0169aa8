"""The worker-group supervisor on real processes: stand-in agents (small Python programs) that
exit, fail or wait, the way torchrun agents do."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from runwright.control.processes import descendants
from runwright.control.supervise import (
    SPAWN_FAILED_EXIT,
    Agent,
    AgentExit,
    AgentsPlan,
    GroupExit,
    group_exit_code,
    read_group_exit,
)
from runwright.lifetime import environ_of

# Prints "up", then exits with the given code (`exit N`) or waits (`sleep`).
AGENT = """
import sys, time
mode = sys.argv[1]
print("up", flush=True)
if mode == "exit":
    sys.exit(int(sys.argv[2]))
time.sleep(600)
"""


def exits(*pairs, stopped=()):
    return [AgentExit(node=n, exit_code=c, stopped=n in stopped) for n, c in pairs]


@pytest.mark.parametrize(
    ("ended", "expected"),
    [
        (exits((0, 0), (1, 0)), 0),
        (exits((1, -9), (0, 1)), -9),  # a killed node first, its peer's failure after
        (exits((0, 0), (1, 3), (2, -9)), 3),  # a clean end first does not count
        (exits((0, 1), (1, -9), stopped=(1,)), 1),  # the peer the supervisor killed after
        (exits((0, -15), (1, -15), stopped=(0, 1)), -15),  # a forwarded stop
    ],
)
def test_the_group_exit_is_0_only_if_every_agent_exits_0_else_the_first_failure(ended, expected):
    assert group_exit_code(ended) == expected


def supervise(tmp_path, *modes, grace_seconds=0.5):
    """Start a supervisor over one stand-in agent per mode; (process, plan)."""
    agents = []
    for node, mode in enumerate(modes):
        argv = [sys.executable, "-c", AGENT, *mode] if mode else ["/nonexistent/agent"]
        log = str(tmp_path / f"agent{node}.log")
        env = {"RUNWRIGHT_TEST_NODE": str(node)}
        agents.append(Agent(node=node, host="here", argv=argv, env=env, log=log))
    plan = AgentsPlan(
        agents=agents,
        tags={"RUNWRIGHT_TEST_SUPERVISOR": str(tmp_path)},
        exit_file=str(tmp_path / "exit_status"),
        node_exits_file=str(tmp_path / "node_exits.json"),
        peer_grace_seconds=grace_seconds,
    )
    (tmp_path / "agents.json").write_text(plan.model_dump_json())
    process = subprocess.Popen(
        [sys.executable, "-m", "runwright.control.supervise", str(tmp_path / "agents.json")],
        start_new_session=True,
    )
    return process, plan


def wait_up(tmp_path, nodes, timeout_seconds=120):
    deadline = time.monotonic() + timeout_seconds
    for node in nodes:
        log = tmp_path / f"agent{node}.log"
        while not (log.exists() and "up" in log.read_text()):
            assert time.monotonic() < deadline, f"agent {node} never started"
            time.sleep(0.02)


def finish(process, tmp_path) -> GroupExit:
    code = process.wait(timeout=120)
    ended = read_group_exit(tmp_path / "node_exits.json")
    assert ended is not None
    assert int((tmp_path / "exit_status").read_text()) == ended.exit_code
    assert code == ended.exit_code & 0xFF  # sys.exit of a negative status wraps
    return ended


def test_every_agent_ending_cleanly_is_a_clean_group(tmp_path):
    process, _ = supervise(tmp_path, ("exit", "0"), ("exit", "0"))
    ended = finish(process, tmp_path)
    assert ended.exit_code == 0 and ended.stop_signal is None
    assert sorted(a.node for a in ended.agents) == [0, 1]
    assert not any(a.stopped for a in ended.agents)


def test_a_failed_agent_gives_its_peers_a_grace_then_they_are_killed(tmp_path):
    process, _ = supervise(tmp_path, ("sleep",), ("exit", "3"), grace_seconds=0.5)
    ended = finish(process, tmp_path)
    assert ended.exit_code == 3
    assert ended.agents == exits((1, 3), (0, -signal.SIGKILL), stopped=(0,))
    written = json.loads((tmp_path / "node_exits.json").read_text())
    assert written["agents"][0] == {"node": 1, "exit_code": 3, "stopped": False}


def test_a_stop_is_forwarded_to_every_agent(tmp_path):
    process, _ = supervise(tmp_path, ("sleep",), ("sleep",), ("sleep",))
    wait_up(tmp_path, (0, 1, 2))
    os.kill(process.pid, signal.SIGTERM)
    ended = finish(process, tmp_path)
    assert ended.stop_signal == signal.SIGTERM
    assert sorted(a.node for a in ended.agents) == [0, 1, 2]
    assert all(a.exit_code == -signal.SIGTERM and a.stopped for a in ended.agents)
    assert ended.exit_code == -signal.SIGTERM


def test_one_node_killed_from_outside_is_not_marked_stopped(tmp_path):
    process, _ = supervise(tmp_path, ("sleep",), ("sleep",), grace_seconds=0.5)
    wait_up(tmp_path, (0, 1))
    agents = {int(environ_of(pid)["RUNWRIGHT_TEST_NODE"]): pid for pid in descendants(process.pid)}
    # Each agent leads a process group of its own: a node can be killed alone.
    assert sorted(agents) == [0, 1] and all(os.getpgid(p) == p for p in agents.values())
    os.killpg(agents[1], signal.SIGKILL)
    ended = finish(process, tmp_path)
    assert ended.agents == exits((1, -signal.SIGKILL), (0, -signal.SIGKILL), stopped=(0,))
    assert ended.exit_code == -signal.SIGKILL


def test_an_agent_that_cannot_start_fails_the_group_and_stops_the_rest(tmp_path):
    process, _ = supervise(tmp_path, ("sleep",), None)
    ended = finish(process, tmp_path)
    assert ended.exit_code == SPAWN_FAILED_EXIT
    assert ended.agents[0] == AgentExit(node=1, exit_code=SPAWN_FAILED_EXIT, stopped=False)
    assert ended.agents[1].node == 0 and ended.agents[1].stopped
    assert "cannot start the agent" in (tmp_path / "agent1.log").read_text()
