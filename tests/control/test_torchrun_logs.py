"""Reading what several torchrun agents left, by global rank: the rank map (pure, with its
properties), torchrun's failure summary, the ranks' own WORKER_STARTED, and the evidence of a
two-node group whose error files are real ones written by torch's `@record`
(scripts/error_files.py)."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.control.executors.torchrun_logs import (
    AgentLogs,
    global_rank_map,
    group_evidence,
    reported_placements,
    summary_ranks,
)
from runwright.control.failures import classify
from runwright.control.supervise import AgentExit, GroupExit
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.protocol import ChannelMessage, encode_message
from runwright.spec import FailureClass

SCRIPT = Path(__file__).parent / "scripts" / "error_files.py"

# The end of a real torchrun agent's log (torch 2.13) after one of its ranks failed.
SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
small_train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_04:32:42
  host      : vm
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 11014)
  error_file: /run/attempts/gen00001/nodes/node00000/ranks/r-g1_x/attempt_0/1/error.json
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_04:32:42
  host      : vm
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 11013)
  error_file: /run/attempts/gen00001/nodes/node00000/ranks/r-g1_x/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
============================================================
"""


def test_torchruns_failure_summary_names_global_and_local_ranks():
    assert summary_ranks(SUMMARY) == {0: 2, 1: 3}
    assert summary_ranks("") == {}


def test_without_any_word_from_the_ranks_launch_order_stands_in():
    assert global_rank_map([0, 1], 2, {}) == {0: {0: 0, 1: 1}, 1: {0: 2, 1: 3}}


def test_one_known_rank_places_its_node_and_the_last_node_takes_what_is_left():
    # c10d made the agent started as node 1 the group's node rank 0.
    assert global_rank_map([0, 1], 2, {1: {1: 1}}) == {0: {0: 2, 1: 3}, 1: {0: 0, 1: 1}}
    three = global_rank_map([0, 1, 2], 1, {2: {0: 0}, 0: {0: 2}})
    assert three == {0: {0: 2}, 1: {0: 1}, 2: {0: 0}}


@st.composite
def placements(draw):
    nodes = draw(st.integers(1, 6))
    per_node = draw(st.integers(1, 4))
    node_ranks = draw(st.permutations(range(nodes)))  # what the rendezvous decided
    truth = {
        n: {loc: node_ranks[n] * per_node + loc for loc in range(per_node)} for n in range(nodes)
    }
    known = {
        n: {loc: g for loc, g in truth[n].items() if draw(st.booleans())} for n in range(nodes)
    }
    return nodes, per_node, truth, known


@given(placements())
def test_the_rank_map_keeps_what_is_known_and_is_a_bijection(case):
    nodes, per_node, truth, known = case
    mapping = global_rank_map(list(range(nodes)), per_node, known)
    ranks = [g for node in mapping.values() for g in node.values()]
    assert sorted(ranks) == list(range(nodes * per_node))
    for node, pairs in known.items():
        assert pairs.items() <= mapping[node].items()
    if sum(1 for pairs in known.values() if not pairs) <= 1:
        assert mapping == truth  # one known rank per node (but one) pins every rank


def _started(run, generation, rank, node, local):
    path = run.channel_file(generation, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    message = ChannelMessage(
        event_id=f"g{generation}-r{rank}-started",
        type=EventType.WORKER_STARTED,
        generation=generation,
        rank=rank,
        time_unix_s=time.time(),
        attributes={"pid": 1, "local_rank": local, "host": "vm", "node": node},
    )
    heartbeat = message.model_copy(update={"type": "HEARTBEAT", "event_id": "hb"})
    path.write_text(encode_message(message) + encode_message(heartbeat))


def test_the_ranks_own_word_says_where_they_ran(tmp_path):
    run = run_paths(tmp_path, "r1")
    _started(run, 2, 0, node=1, local=0)
    _started(run, 2, 1, node=0, local=0)
    _started(run, 1, 2, node=0, local=0)  # another generation
    assert reported_placements(run, 2, 3) == {0: (1, 0), 1: (0, 0)}


@pytest.fixture(scope="module")
def real_errors(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("errors")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def two_nodes(tmp_path, real_errors, cases):
    """A generation of two one-rank nodes whose agents left `cases[node]`'s error file (None:
    nothing), rank 0 having run on node 1 (the rendezvous swapped them)."""
    run = run_paths(tmp_path, "r1")
    attempt = run.attempt(1)
    agents = []
    for node in (0, 1):
        paths = attempt.node(node)
        paths.folder.mkdir(parents=True)
        if cases[node]:
            shutil.copytree(real_errors / cases[node], paths.rank_logs)
        paths.torchrun_log.write_text(f"agent of node {node}\n")
        agents.append(AgentLogs(node, f"host{node}", paths.torchrun_log, paths.rank_logs))
    _started(run, 1, 0, node=1, local=0)
    _started(run, 1, 1, node=0, local=0)
    return run, agents


def test_error_files_are_mapped_to_global_ranks(tmp_path, real_errors):
    run, agents = two_nodes(tmp_path, real_errors, ["user_oserror", "checkpoint_error"])
    ended = GroupExit(
        exit_code=1,
        agents=[
            AgentExit(node=1, exit_code=1, stopped=False),
            AgentExit(node=0, exit_code=1, stopped=False),
        ],
    )
    found = group_evidence(
        agents, ranks_per_node=1, started=reported_placements(run, 1, 2), ended=ended
    )
    by_rank = {e.rank: e.message for e in found.error_records}
    assert by_rank[1].startswith("FileNotFoundError") and "my-data" in by_rank[1]
    assert by_rank[0].startswith("NoUsableCheckpointError")
    assert [(n.node, n.host, n.ranks) for n in found.node_exits] == [
        (1, "host1", (0,)),
        (0, "host0", (1,)),
    ]
    assert {"node0/torchrun", "node1/torchrun"} <= found.log_tails.keys()
    # The agent that ended first leads the launcher log, whose summary the classifier reads.
    assert found.launcher_log.index("node 1 (host1)") < found.launcher_log.index("node 0 (host0)")


def test_a_killed_node_is_node_lost_and_its_peers_errors_are_victims(tmp_path, real_errors):
    run, agents = two_nodes(tmp_path, real_errors, ["user_oserror", None])
    args = {
        "watchdog_class": None,
        "watchdog_detail": "",
        "watchdog_rank": None,
        "nan_rank_step": None,
        "preempted": False,
        "last_step": 7,
        "ranks_started": 2,
        "world_size": 2,
    }

    def verdict(ended):
        evidence = group_evidence(
            agents, ranks_per_node=1, started=reported_placements(run, 1, 2), ended=ended
        )
        return classify(exit_code=ended.exit_code, evidence=evidence, **args)

    killed = GroupExit(
        exit_code=-9,
        agents=[
            AgentExit(node=1, exit_code=-9, stopped=False),
            AgentExit(node=0, exit_code=1, stopped=False),
        ],
    )
    lost = verdict(killed)
    assert lost.failure_class is FailureClass.NODE_LOST
    assert (lost.node, lost.host, lost.rank) == (1, "host1", 0)
    assert lost.message.startswith("node 1 (host host1) was lost") and "SIGKILL" in lost.message
    assert "ranks [1] of the other nodes failed after it" in lost.evidence
    # The same survivor's error without a lost node is the user's own.
    failed = GroupExit(exit_code=1, agents=[AgentExit(node=0, exit_code=1, stopped=False)])
    assert verdict(failed).failure_class is FailureClass.USER_CODE
    # Agents the supervisor itself killed (a forwarded stop, or a failed peer's grace) are not
    # lost nodes.
    stopped = GroupExit(
        exit_code=1,
        agents=[
            AgentExit(node=0, exit_code=1, stopped=False),
            AgentExit(node=1, exit_code=-9, stopped=True),
        ],
    )
    assert verdict(stopped).failure_class is FailureClass.USER_CODE


def test_a_killed_node_whose_peers_left_no_error_record_says_so(tmp_path, real_errors):
    """The survivor's agent stopped its rank before the rank met the closed connection: no
    victim's error to quote, and the evidence says that instead of staying silent."""
    run, agents = two_nodes(tmp_path, real_errors, [None, None])
    killed = GroupExit(
        exit_code=-9,
        agents=[
            AgentExit(node=1, exit_code=-9, stopped=False),
            AgentExit(node=0, exit_code=1, stopped=False),
        ],
    )
    evidence = group_evidence(
        agents, ranks_per_node=1, started=reported_placements(run, 1, 2), ended=killed
    )
    lost = classify(
        exit_code=-9, evidence=evidence, watchdog_class=None, watchdog_detail="",
        watchdog_rank=None, nan_rank_step=None, preempted=False, last_step=7, ranks_started=2,
        world_size=2,
    )  # fmt: skip
    assert lost.failure_class is FailureClass.NODE_LOST and lost.node == 1
    assert lost.evidence == (
        "agent exit statuses in the order they ended: node 1: -9, node 0: 1; "
        "no rank of the other nodes left an error record"
    )
