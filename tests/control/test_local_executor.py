"""The local executor's plan for a generation of several nodes, before anything runs: one agent
per node, meeting at one c10d endpoint hosted by node 0, each with its own logs, tag and (on
CUDA) its own devices."""

import socket

import pytest

from runwright.control.executors.local import LocalExecutor, agent_argv, node_devices
from runwright.errors import LaunchError
from runwright.layout import run_paths
from runwright.protocol import ENV_NODE
from runwright.spec import spec_from_mapping

HOST = socket.gethostname()


def spec(nodes, device_type="cpu", env=None):
    return spec_from_mapping(
        {
            "name": "plan",
            "code": {"entrypoint": "module:runwright.demo.skeleton_worker"},
            "training": {"steps": 1, "global_batch_samples": 12},
            "resources": {"nodes": nodes, "devices_per_node": 2, "device_type": device_type},
            "environment": {"env": env or {}},
        },
        "test",
    )


def option(argv, name):
    return argv[argv.index(name) + 1]


def test_several_nodes_are_agents_meeting_at_node_0(tmp_path):
    executor = LocalExecutor()
    hosts = executor.hosts(3)
    assert hosts == [HOST] * 3
    attempt = run_paths(tmp_path, "r-1").attempt(4)
    agents, rendezvous = executor.plan_agents(spec(3), tmp_path, "r-1", attempt, hosts)
    assert rendezvous.rdzv_id == "r-1-g4" and rendezvous.nodes == 3
    assert [a.node for a in agents] == [0, 1, 2]
    assert {option(a.argv, "--rdzv-endpoint") for a in agents} == {rendezvous.endpoint}
    assert [option(a.argv, "--rdzv-conf").split(",")[0] for a in agents] == [
        "is_host=1",
        "is_host=0",
        "is_host=0",
    ]
    assert [option(a.argv, "--log-dir") for a in agents] == [
        str(attempt.node(n).rank_logs) for n in range(3)
    ]
    assert [a.log for a in agents] == [str(attempt.node(n).torchrun_log) for n in range(3)]
    # Each node agent's temporary files lie in the run's node folder, so the cleaner owns them.
    assert [a.env for a in agents] == [
        {ENV_NODE: str(n), "TMPDIR": str(attempt.node(n).tmp)} for n in range(3)
    ]


def test_one_node_stays_standalone(tmp_path):
    attempt = run_paths(tmp_path, "r-1").attempt(1)
    (agent,), rendezvous = LocalExecutor().plan_agents(spec(1), tmp_path, "r-1", attempt, [HOST])
    assert rendezvous is None and "--standalone" in agent.argv


def test_cuda_nodes_sharing_a_host_get_devices_of_their_own(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    attempt = run_paths(tmp_path, "r-1").attempt(1)
    agents, _ = LocalExecutor().plan_agents(spec(2, "cuda"), tmp_path, "r-1", attempt, [HOST] * 2)
    assert [a.env["CUDA_VISIBLE_DEVICES"] for a in agents] == ["0,1", "2,3"]
    pinned = spec(2, "cuda", env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    agents, _ = LocalExecutor().plan_agents(pinned, tmp_path, "r-1", attempt, [HOST] * 2)
    assert [a.env["CUDA_VISIBLE_DEVICES"] for a in agents] == ["4,5", "6,7"]
    # The scheduler's placement wins over what the environment shows.
    agents, _ = LocalExecutor().plan_agents(
        pinned, tmp_path, "r-1", attempt, [HOST] * 2, pinned="2,3,0,1"
    )
    assert [a.env["CUDA_VISIBLE_DEVICES"] for a in agents] == ["2,3", "0,1"]
    assert node_devices("0, 1,2 ,3", 1, 2) == "2,3"
    with pytest.raises(LaunchError, match="CUDA_VISIBLE_DEVICES='0,1,2' shows 3"):
        node_devices("0,1,2", 1, 2)


def test_a_node_on_another_host_is_refused_by_name():
    assert agent_argv(HOST, ["torchrun"]) == ["torchrun"]
    with pytest.raises(LaunchError, match=r"'elsewhere'.*on this host"):
        agent_argv("elsewhere", ["torchrun"])
