"""Many nodes without Slurm: the local executor runs `resources.nodes: 2` as two torchrun agents
on this host meeting through a real c10d rendezvous (gloo, CPU), through the real controller.

One host is a faithful test of what multi-node adds: the rendezvous, per-node agents and logs,
node ranks the rendezvous (not launch order) assigns, and a node lost while its peers survive.
"""

import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from runwright_tests_leftovers import assert_nothing_left
from runwright_tests_tiny import tiny_gpt

from runwright.control.cancel import request_cancel
from runwright.control.controller import Controller
from runwright.control.executors.local_group import generation_processes, generation_tags, node_tags
from runwright.control.processes import environs, processes_tagged, signal_all
from runwright.control.supervise import read_group_exit
from runwright.data import build_dataset
from runwright.govern.compare import compare_runs
from runwright.layout import run_paths
from runwright.observe.rank_steps import per_rank
from runwright.protocol import ENV_NODE
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
SKELETON = REPO / "src" / "runwright" / "demo" / "skeleton.yaml"
SMALL_TRAIN = Path(__file__).parent / "scripts" / "small_train.py"
HOST = socket.gethostname()


def of_type(store, run_id, type_):
    """Events of `type_`, a step row unfolded into its ranks' reports (observe/rank_steps.py)."""
    return list(per_rank(store.events(run_id, types=[type_])))


def wait_for(condition, process, what, timeout_seconds=300):
    """Poll `condition` until it holds; fail if `process` ends first or the time runs out."""
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        assert process.poll() is None, f"the controller ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_seconds} s"
        time.sleep(0.1)


def no_process_left(root, run_id):
    return generation_processes(root, run_id) == {}


def small_train_spec(nodes, per_node, steps, args=("--step-sleep", "0.2")):
    return spec_from_mapping(
        {
            "name": "multinode",
            "code": {"entrypoint": str(SMALL_TRAIN), "args": list(args)},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"nodes": nodes, "devices_per_node": per_node},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 4}, "keep_last": 5},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": 30,
                "progress_timeout_seconds": 120,
            },
        }
    )


def test_two_nodes_meet_through_c10d_and_the_manifest_says_where_each_rank_ran(tmp_path):
    data = yaml.safe_load(SKELETON.read_text())
    data["training"]["steps"] = 5
    data["resources"].update(nodes=2, devices_per_node=1)
    spec = spec_from_mapping(data)
    store = Store.open(tmp_path)
    seen = {}

    def observe(event):
        # Where each rank really runs, read from its own launch environment: the agent that
        # started it (RUNWRIGHT_NODE) and the node rank the rendezvous gave it (GROUP_RANK).
        if event.type == "STEP_HEALTHY" and not seen:
            tags = generation_tags(tmp_path, event.run_id, 1).items()
            for _pid, env in environs():
                if tags <= env.items() and "RANK" in env:
                    seen[int(env["RANK"])] = (int(env[ENV_NODE]), int(env["GROUP_RANK"]))

    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=observe)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED" and final.last_step == 5, store.events(run.run_id)[-5:]
    assert sorted(seen) == [0, 1]
    # c10d's node rank decides the global rank (one rank per node: global = node rank).
    assert all(rank == group_rank for rank, (_, group_rank) in seen.items())
    manifest = {e["rank"]: (e["node"], e["host"]) for e in final.rank_manifest}
    assert manifest == {rank: (node, HOST) for rank, (node, _) in seen.items()}
    started = of_type(store, run.run_id, "WORKER_STARTED")
    assert {(e.attributes["rank"], e.attributes["node"]) for e in started} == {
        (rank, node) for rank, (node, _) in seen.items()
    }
    attempt = run_paths(tmp_path, run.run_id).attempt(1)
    for node in (0, 1):
        assert attempt.node(node).torchrun_log.exists()
        assert list(attempt.node(node).rank_logs.glob("*/attempt_0/0/stdout.log"))
    ended = read_group_exit(attempt.node_exits_file)
    assert ended.exit_code == 0 and sorted(a.node for a in ended.agents) == [0, 1]
    (launched,) = of_type(store, run.run_id, "WORKER_GROUP_LAUNCHED")
    assert launched.attributes["log"] == str(attempt.nodes)
    assert no_process_left(tmp_path, run.run_id)


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    return build_dataset(REPO / "examples" / "data" / "tiny.yaml", root)


def tiny_gpt_spec(built, steps=12, every=4, step_sleep=None):
    """The reference trainer at its smallest: one layer, 32-wide, 4 rows of 32 tokens a step;
    `step_sleep` seconds of pause after each step."""
    data = tiny_gpt(built, steps=steps, devices=1, every_steps=every)
    if step_sleep is not None:
        data["code"]["args"] = ["--step-sleep", str(step_sleep)]
    data["data"]["manifest_id"] = built.dataset_id
    data["training"]["schedule"]["warmup_steps"] = 2
    data["checkpoint"]["keep_every_steps"] = None
    data["resources"]["nodes"] = 2
    data["recovery"].update(heartbeat_timeout_seconds=30, progress_timeout_seconds=120)
    return spec_from_mapping(data)


@pytest.mark.timeout(600)  # three groups of four processes: give a busy machine room
def test_a_lost_node_is_classified_restarted_and_the_run_is_bitwise_the_same(
    tmp_path, tiny_dataset
):
    """Node 0 (which hosts the rendezvous) loses its agent and its ranks to SIGKILL at a random
    step after the first committed checkpoint: node_lost naming it, a new generation from the
    checkpoint, and the same parameters, sample ledger and losses as a run never killed.
    Paced: unpaced, the 12 steps take well under a second, and a controller that read them late
    on a busy machine killed the node after the last step (nothing left to recover)."""
    spec = tiny_gpt_spec(tiny_dataset, steps=16, step_sleep=0.25)
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    store = Store.open(tmp_path)
    plan = {}

    def kill_a_node(event):
        if event.generation != 1 or "killed" in plan:
            return
        if event.type == "CHECKPOINT_COMMITTED" and "at" not in plan:
            plan["at"] = int(event.step) + rng.randint(1, 2)  # before the next one (every 4)
        elif event.type == "STEP_HEALTHY" and event.step >= plan.get("at", 10**9):
            pids = processes_tagged(node_tags(tmp_path, event.run_id, 1, 0))
            signal_all(pids, signal.SIGKILL)
            plan["killed"] = (event.step, pids)

    faulted = Controller(store, tmp_path, poll_seconds=0.05, on_event=kill_a_node)
    run, _ = faulted.submit(spec, tmp_path)
    final = faulted.drive(run.run_id)
    context = f"seed {seed}, plan {plan}"
    assert final.state == "SUCCEEDED", (context, store.events(run.run_id)[-5:])
    assert plan["killed"][1], context
    assert plan["killed"][0] < 16, f"killed after the last step: nothing to recover ({context})"
    (failure,) = of_type(store, run.run_id, "FAILURE_CLASSIFIED")
    attrs = failure.attributes
    assert attrs["failure_class"] == "node_lost", (context, attrs)
    assert (attrs["node"], attrs["host"]) == (0, HOST)
    assert attrs["message"].startswith(f"node 0 (host {HOST}) was lost"), attrs
    # Node 1's ranks either meet the closed connection (an error record: victims) or are stopped
    # by their agent first (none): a race the evidence reports either way.
    assert (
        "other nodes failed after it (victims" in attrs["evidence"]
        or "no rank of the other nodes left an error record" in attrs["evidence"]
    ), attrs
    # The newest checkpoint generation 1 committed: the planned step 4, or a later one when the
    # workers ran ahead of the events the kill waited for (a busy machine ingests late).
    committed = [
        int(e.step) for e in of_type(store, run.run_id, "CHECKPOINT_COMMITTED") if e.generation == 1
    ]
    (recovered,) = of_type(store, run.run_id, "RECOVERY_SUCCEEDED")
    assert recovered.attributes["restored_step"] == max(committed) >= 4, (context, committed)
    # Generation 2 reproduced what generation 1 reported for the steps it replayed (or there
    # were none to replay, when the kill came right after a commit).
    (verified,) = of_type(store, run.run_id, "RECOVERY_VERIFIED")
    assert verified.attributes["complete"], (context, verified.attributes)
    assert [a.generation for a in store.attempts(run.run_id)] == [1, 2]
    ended = read_group_exit(run_paths(tmp_path, run.run_id).attempt(1).node_exits_file)
    assert (ended.agents[0].node, ended.agents[0].exit_code) == (0, -signal.SIGKILL)

    reference = Controller(store, tmp_path, poll_seconds=0.2)
    ref, _ = reference.submit(spec, tmp_path)
    assert reference.drive(ref.run_id).state == "SUCCEEDED"
    comparison = compare_runs(store, run.run_id, ref.run_id)
    assert comparison.equivalence == "bitwise-equal", (context, comparison)
    assert comparison.restored_steps == [max(committed)]
    assert no_process_left(tmp_path, run.run_id) and no_process_left(tmp_path, ref.run_id)


@pytest.mark.parametrize(
    "per_node", [1, pytest.param(2, marks=pytest.mark.slow, id="world4")], ids=str
)
@pytest.mark.timeout(600)  # two controller processes and a group: give a busy machine room
def test_a_restarted_controller_adopts_a_live_group_of_two_nodes(tmp_path, per_node):
    """The first controller is SIGKILLed while the group holds at step 4, a second one adopts the
    live group by its pid file, the group goes on, and the run finishes; `world4` runs 2 ranks
    on each node."""
    hold = tmp_path / "go-on"
    args = ("--step-sleep", "0.1", "--hold-at-step", "4", "--hold-file", str(hold))
    spec = small_train_spec(nodes=2, per_node=per_node, steps=8, args=args)
    store = Store.open(tmp_path)
    run, _ = Controller(store, tmp_path).submit(spec, tmp_path)
    argv = [sys.executable, "-m", "runwright.cli.main", "controller", run.run_id]
    argv += ["--root", str(tmp_path)]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: (store.get_run(run.run_id).last_step or 0) >= 4, first, "step 4")
    first.kill()
    first.wait()
    log = tmp_path / "second-controller.log"
    second = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)
    wait_for(lambda: of_type(store, run.run_id, "WORKER_GROUP_ADOPTED"), second, "the adoption")
    group = generation_processes(tmp_path, run.run_id)
    assert len(group.get(1, [])) >= 1 + 2 + 2 * per_node  # supervisor, agents, ranks: alive
    hold.write_text("")
    assert second.wait(timeout=300) == 0, log.read_text()[-2000:]
    final = store.get_run(run.run_id)
    assert final.state == "SUCCEEDED"
    assert len(of_type(store, run.run_id, "WORKER_GROUP_LAUNCHED")) == 1
    assert len(of_type(store, run.run_id, "WORKER_GROUP_ADOPTED")) == 1
    assert [
        e.step for e in of_type(store, run.run_id, "STEP_HEALTHY") if e.attributes["rank"] == 0
    ] == list(range(1, 9))
    started = of_type(store, run.run_id, "WORKER_STARTED")
    world = 2 * per_node
    assert sorted(e.attributes["rank"] for e in started) == list(range(world))
    # Each node runs `per_node` consecutive global ranks, from its node rank times per_node.
    nodes = {e.attributes["rank"]: e.attributes["node"] for e in started}
    assert [nodes[r] for r in range(0, world, per_node)] == [
        nodes[r] for r in range(per_node - 1, world, per_node)
    ]
    assert len(set(nodes.values())) == 2
    assert [(e["rank"], e["node"]) for e in final.rank_manifest] == sorted(nodes.items())
    assert no_process_left(tmp_path, run.run_id)


def test_a_cancelled_group_of_two_nodes_leaves_no_process(tmp_path):
    spec = small_train_spec(nodes=2, per_node=1, steps=200)
    store = Store.open(tmp_path)
    holder = {}

    def cancel_at_step_3(event):
        if event.type == "STEP_HEALTHY" and event.step >= 3 and "cancel" not in holder:
            holder["cancel"] = request_cancel(store, event.run_id, "test cancel")
            holder["nodes"] = {
                node: processes_tagged(node_tags(tmp_path, event.run_id, 1, node))
                for node in (0, 1)
            }

    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=cancel_at_step_3)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "CANCELLED" and final.terminal_reason == "USER_CANCELLED"
    # Each node had its agent and its rank, tagged with the node; none of them is left.
    assert all(len(pids) >= 2 for pids in holder["nodes"].values()), holder
    assert no_process_left(tmp_path, run.run_id)
    latest = store.checkpoints.latest(run.run_id)
    stop = of_type(store, run.run_id, "STOP_ACKNOWLEDGED")
    assert stop and latest is not None and latest.step == stop[0].step >= 3
    assert_nothing_left(store, tmp_path, run.run_id)
