"""The Slurm executor against a real Slurm (conftest.py's three-node cluster on this host).

The reference trainer (`module:runwright.train`, tiny shapes) at 2 nodes x 1 rank: a run that
waits for busy nodes and then succeeds on real nodes; one that loses a node mid-run and finishes
bitwise-equal to the one that did not; one whose controller is killed and whose successor (in a
pid namespace of its own, so it cannot see a single rank) adopts the job through Slurm; one
preempted with SIGTERM and one cancelled, both saving at a step boundary; a spec larger than the
cluster refused at submit; and a run folder a node cannot see, refused at launch with the path.
After every run the Slurm queue is empty.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.cancel import request_cancel
from runwright.control.controller import Controller
from runwright.control.states import TERMINAL
from runwright.control.summary import describe_run, run_summary
from runwright.control.supervise import read_group_exit
from runwright.data import build_dataset
from runwright.govern.compare import compare_runs
from runwright.layout import run_paths
from runwright.spec import load_spec
from runwright.store import Store

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("slurm"),  # one Slurm cluster per session (conftest.py)
]

REPO = Path(__file__).resolve().parents[3]
TINY_GPT = REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml"
RUN_SECONDS = 420.0
"""Upper bound for one run, restarts included, on a loaded 2-core machine (a hang fails)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory, slurm_cluster):
    """One root (store, pools file, dataset) shared by the module's runs, so they compare."""
    root = tmp_path_factory.mktemp("slurm-root")
    built = build_dataset(REPO / "examples" / "data" / "tiny.yaml", root / "data")
    pools = root / "pools.yaml"
    pools.write_text(
        yaml.safe_dump(
            {
                "pools": {
                    "default": {"executor": "local"},
                    "cluster": {"executor": "slurm", "partition": "debug"},
                    "island": {"executor": "slurm", "partition": "island"},
                }
            }
        )
    )
    store = Store.open(root)
    yield {"root": root, "pools": pools, "dataset": built, "store": store, "cluster": slurm_cluster}
    store.close()


def write_spec(site, name: str, *, steps: int = 8, nodes: int = 2, pool: str = "cluster") -> Path:
    data = yaml.safe_load(TINY_GPT.read_text())
    built = site["dataset"]
    data["name"] = name
    data["model"]["vocab_size"] = built.manifest.tokenizer.vocab_size
    data["data"].update(
        dataset=str(built.folder),
        sequence_length=32,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=2 * nodes, micro_batch_size=2, steps=steps)
    data["checkpoint"]["interval"]["every_steps"] = 2
    data["resources"].update(nodes=nodes, devices_per_node=1, pool=pool)
    # Slow enough steps that a kill, a preemption or a cancel lands mid-run.
    data["code"]["args"] = ["--step-sleep", "0.5"]
    data["recovery"].update(heartbeat_timeout_seconds=60, progress_timeout_seconds=180)
    path = site["root"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def flat(text: str) -> str:
    """CLI output with rich's error box and line wrapping taken out, for substring checks."""
    for ch in "│╭╮╰╯─":
        text = text.replace(ch, " ")
    return " ".join(text.split())


def submit(site, spec_path: Path) -> str:
    controller = Controller(site["store"], site["root"], pools_file=site["pools"])
    run, created = controller.submit(load_spec(spec_path), spec_path.parent)
    assert created
    return run.run_id


def controller_process(site, run_id: str, *prefix: str) -> subprocess.Popen[bytes]:
    logs = site["root"] / "controller-logs"
    logs.mkdir(exist_ok=True)
    log = open(logs / f"{run_id}.log", "ab")  # noqa: SIM115 (the child keeps it)
    argv = [sys.executable, "-m", "runwright.cli.main", "controller", run_id,
            "--root", str(site["root"]), "--pools", str(site["pools"])]  # fmt: skip
    return subprocess.Popen(
        [*prefix, *argv], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_for(what: str, check, timeout_seconds: float = RUN_SECONDS, every: float = 0.2):
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_seconds:g} s")
        time.sleep(every)


def finished(site, run_id: str):
    """The run once it is terminal and its log is closed (RUN_FINISHED)."""
    store = site["store"]

    def done():
        run = store.get_run(run_id)
        closed = run.state in TERMINAL and events_of(site, run_id, "RUN_FINISHED")
        return run if closed else None

    return wait_for(f"run {run_id} finished", done, every=0.5)


def events_of(site, run_id: str, type_: str):
    return [e for e in site["store"].events(run_id) if e.type == type_]


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def reference(site):
    """A 2-node run that first waits in the queue behind a job holding every node, then runs
    uninterrupted: the run the others are compared with."""
    cluster = site["cluster"]
    hold = cluster.client(
        "sbatch", "--parsable", "-N3", "-J", "hold", "-o", "/dev/null", "--wrap", "sleep 600"
    )
    hold = hold.strip()
    wait_for("holding job running", lambda: cluster.job_state(hold) == "RUNNING")
    run_id = submit(site, write_spec(site, "reference"))
    controller = controller_process(site, run_id)
    store = site["store"]
    try:
        wait_for(
            "the run waits for the busy nodes",
            lambda: "Resources" in (store.get_run(run_id).state_detail or ""),
        )
        waiting = describe_run(run_summary(store, run_id))
        cluster.client("scancel", hold)
        run = finished(site, run_id)
    finally:
        stop(controller)
    cluster.wait_queue_empty()
    return {"run_id": run_id, "run": run, "waiting": waiting}


def test_run_waits_for_busy_nodes_then_succeeds_on_real_nodes(site, reference):
    store, run_id = site["store"], reference["run_id"]
    assert (
        "waiting in Slurm partition debug: Resources (the nodes are busy), 2 nodes requested"
        in (reference["waiting"])
    )
    assert reference["run"].state == "SUCCEEDED", reference["run"].state_detail
    pending = events_of(site, run_id, "ALLOCATION_PENDING")
    assert "Resources" in [e.attributes["code"] for e in pending]
    (ready,) = events_of(site, run_id, "ALLOCATION_READY")
    started = {
        e.attributes["rank"]: e.attributes for e in events_of(site, run_id, "WORKER_STARTED")
    }
    # The manifest names the nodes the ranks really ran on: the slot of the node whose agent
    # started each rank, named by the allocation's hosts (the local executor's way).
    manifest = store.get_run(run_id).rank_manifest
    hosts = ready.attributes["hosts"]
    assert len(set(hosts)) == 2 and {e["host"] for e in manifest} == set(hosts)
    for entry in manifest:
        assert entry["node"] == started[entry["rank"]]["node"]
        assert entry["host"] == hosts[entry["node"]]
    (placed,) = events_of(site, run_id, "RANKS_PLACED")
    assert [(p["node"], p["host"]) for p in placed.attributes["placements"]] == [
        (e["node"], e["host"]) for e in manifest
    ]
    # Each node's agent kept its files where every executor's do, and its exit was recorded.
    attempt = run_paths(site["root"], run_id).attempt(1)
    ended = read_group_exit(attempt.node_exits_file)
    assert ended is not None and sorted((a.node, a.exit_code) for a in ended.agents) == [
        (0, 0),
        (1, 0),
    ]
    assert all(attempt.node(n).torchrun_log.exists() for n in (0, 1))
    launched = events_of(site, run_id, "WORKER_GROUP_LAUNCHED")
    assert launched[0].attributes["engine_id"] == ready.attributes["engine_id"]
    assert events_of(site, run_id, "ALLOCATION_RELEASED")


@pytest.mark.slow
def test_lost_node_restarts_without_it_and_matches_the_uninterrupted_run(site, reference):
    cluster, store = site["cluster"], site["store"]
    run_id = submit(site, write_spec(site, "node-loss"))
    controller = controller_process(site, run_id)
    try:
        wait_for(
            "a checkpoint before the kill", lambda: (store.get_run(run_id).last_step or 0) >= 3
        )
        run = store.get_run(run_id)
        victim = run.rank_manifest[-1]["host"]
        cluster.kill_node(victim)
        run = finished(site, run_id)
    finally:
        stop(controller)
    try:
        assert run.state == "SUCCEEDED", run.state_detail
        (failure,) = events_of(site, run_id, "FAILURE_CLASSIFIED")
        assert failure.attributes["failure_class"] == "node_lost"
        assert failure.attributes["lost_hosts"] == [victim]
        assert victim in failure.attributes["message"]
        requests = events_of(site, run_id, "ALLOCATION_REQUESTED")
        assert [r.attributes["request"] for r in requests] == [1, 2]
        assert requests[1].attributes["exclude_hosts"] == [victim]
        assert victim not in {e["host"] for e in run.rank_manifest}
        result = compare_runs(store, run_id, reference["run_id"])
        assert result.equivalence == "bitwise-equal", result.first_difference
        cluster.wait_queue_empty()
    finally:
        cluster.start_node(victim)


@pytest.mark.slow
def test_a_new_controller_adopts_the_job_through_slurm(site):
    cluster, store = site["cluster"], site["store"]
    run_id = submit(site, write_spec(site, "adopted"))
    first = controller_process(site, run_id)
    wait_for("the group running", lambda: (store.get_run(run_id).last_step or 0) >= 2)
    stop(first)  # SIGKILL: no goodbye
    job = store.get_run(run_id).allocation["engine_id"]
    assert cluster.job_state(job) == "RUNNING"
    assert not list(run_paths(site["root"], run_id).attempts.glob("*/pid"))  # no pid to adopt by
    # The successor sees no process of the run: its own pid namespace, its own /proc.
    isolated = ["unshare", "--pid", "--fork", "--mount-proc"] if shutil.which("unshare") else []
    second = controller_process(site, run_id, *isolated)
    try:
        run = finished(site, run_id)
    finally:
        stop(second)
    assert run.state == "SUCCEEDED", run.state_detail
    assert len(events_of(site, run_id, "WORKER_GROUP_LAUNCHED")) == 1
    assert len(events_of(site, run_id, "ALLOCATION_REQUESTED")) == 1
    adopted = events_of(site, run_id, "WORKER_GROUP_ADOPTED")
    assert adopted and all(e.attributes["engine_id"] == job for e in adopted)
    assert all(e.attributes["pid"] == int(job) for e in adopted)
    assert not events_of(site, run_id, "FAILURE_CLASSIFIED")
    cluster.wait_queue_empty()


def _stop_step_checkpoint(site, run_id: str) -> int:
    """The step the group stopped at, once its checkpoint at that step is committed. (A cancel's
    stop is acknowledged under the generation the cancel handed over.)"""
    acks = events_of(site, run_id, "STOP_ACKNOWLEDGED")
    assert acks, "the group never acknowledged the stop"
    step = acks[0].step
    committed = [e.step for e in events_of(site, run_id, "CHECKPOINT_COMMITTED")]
    assert step in committed, (step, committed)
    return step


@pytest.mark.slow
def test_sigterm_preemption_saves_at_a_step_boundary_and_requeues(site, reference):
    cluster, store = site["cluster"], site["store"]
    run_id = submit(site, write_spec(site, "preempted"))
    controller = controller_process(site, run_id)
    try:
        wait_for("steps before the preemption", lambda: (store.get_run(run_id).last_step or 0) >= 3)
        job = store.get_run(run_id).allocation["engine_id"]
        # What Slurm sends a preempted job's steps (and `--signal` before a time limit).
        cluster.client("scancel", "--signal=TERM", job)
        run = finished(site, run_id)
    finally:
        stop(controller)
    assert run.state == "SUCCEEDED", run.state_detail
    step = _stop_step_checkpoint(site, run_id)
    assert all(
        e.attributes["reason"] == "preemption" for e in events_of(site, run_id, "STOP_ACKNOWLEDGED")
    )
    (failure,) = events_of(site, run_id, "FAILURE_CLASSIFIED")
    assert failure.attributes["failure_class"] == "preemption"
    restored = [e.step for e in events_of(site, run_id, "RESTORED") if e.generation == 2]
    assert restored and restored[0] == step  # nothing lost: resumed at the stop step
    assert [r.attributes["request"] for r in events_of(site, run_id, "ALLOCATION_REQUESTED")] == [
        1,
        2,
    ]
    assert compare_runs(store, run_id, reference["run_id"]).equivalence == "bitwise-equal"
    cluster.wait_queue_empty()


@pytest.mark.slow
def test_a_lost_rank_restarts_in_the_same_job_and_a_cancel_saves_at_a_step_boundary(site):
    cluster, store = site["cluster"], site["store"]
    run_id = submit(site, write_spec(site, "cancelled", steps=40))
    controller = controller_process(site, run_id)
    try:
        wait_for("steps before the kill", lambda: (store.get_run(run_id).last_step or 0) >= 3)
        (rank1,) = [
            e for e in events_of(site, run_id, "WORKER_STARTED")
            if e.generation == 1 and e.attributes["rank"] == 1
        ]  # fmt: skip
        os.kill(rank1.attributes["pid"], signal.SIGKILL)
        wait_for("the restarted group past its restored step",
                 lambda: events_of(site, run_id, "RECOVERY_SUCCEEDED"))  # fmt: skip
        request_cancel(store, run_id, "test cancel")
        run = finished(site, run_id)
    finally:
        stop(controller)
    # Restart in place: a new generation in the job the run already held, no queueing.
    launched = events_of(site, run_id, "WORKER_GROUP_LAUNCHED")
    assert [e.generation for e in launched] == [1, 2]
    assert len({e.attributes["engine_id"] for e in launched}) == 1
    assert len(events_of(site, run_id, "ALLOCATION_REQUESTED")) == 1
    assert run.state == "CANCELLED" and run.terminal_reason == "USER_CANCELLED"
    step = _stop_step_checkpoint(site, run_id)
    assert step < 40
    assert events_of(site, run_id, "ALLOCATION_RELEASED")
    cluster.wait_queue_empty()


def test_a_request_reaches_slurm_once_whoever_asks(site):
    """A controller that died between `sbatch` and recording the job id: the next one finds the
    job by its name instead of submitting a second."""
    from runwright.control.executors.slurm import SlurmExecutor
    from runwright.control.pools import load_pools

    pool = load_pools(site["pools"]).pools["cluster"]
    spec = load_spec(write_spec(site, "twice"))
    ask = {"spec": spec, "run_id": "twice", "root": site["root"], "request": 1}
    first = SlurmExecutor("cluster", pool).request_allocation(**ask)
    run_paths(site["root"], "twice").allocation(1).job_file.unlink()
    second = SlurmExecutor("cluster", pool).request_allocation(**ask)
    assert first.engine_id is not None and second.engine_id == first.engine_id
    named = site["cluster"].client("squeue", "-h", "--states=all", "-n", "rw-twice-r1", "-o", "%i")
    assert named.split() == [first.engine_id]
    released = SlurmExecutor("cluster", pool).release_allocation(site["root"], "twice", 1)
    assert released.state == "released"
    site["cluster"].wait_queue_empty()


def test_a_spec_larger_than_the_cluster_is_refused_at_submit(site):
    """In process (Typer's runner): the refusal comes from asking this cluster's slurmctld, not
    from the CLI's start-up, which tests/cli covers."""
    spec = write_spec(site, "too-big", nodes=4)
    before = len(site["store"].list_runs(limit=1000))
    runner = CliRunner()
    submitted = runner.invoke(
        app, ["submit", str(spec), "--root", str(site["root"]), "--pools", str(site["pools"])]
    )
    assert submitted.exit_code == 2, submitted.output
    message = flat(submitted.output)
    assert "resources.nodes=4" in message and "has 3 node(s)" in message
    assert "Traceback" not in submitted.output
    assert len(site["store"].list_runs(limit=1000)) == before
    checked = runner.invoke(app, ["spec", "validate", str(spec), "--pools", str(site["pools"])])
    assert checked.exit_code == 2 and "resources.nodes=4" in flat(checked.output)


@pytest.mark.slow
def test_a_node_that_cannot_see_the_run_folder_fails_the_run_with_the_path(site):
    cluster = site["cluster"]
    run_id = submit(site, write_spec(site, "island", pool="island"))
    with cluster.island(site["root"]) as node:
        controller = controller_process(site, run_id)
        try:
            run = finished(site, run_id)
        finally:
            stop(controller)
    assert run.state == "FAILED" and run.terminal_reason == "FAILED_PERMANENT"
    detail = run.state_detail or ""
    assert node in detail and str(run_paths(site["root"], run_id).folder) in detail
    assert "filesystem every node mounts" in detail
    (failed,) = events_of(site, run_id, "ALLOCATION_FAILED")
    assert failed.attributes["permanent"] is True
    assert not events_of(site, run_id, "WORKER_GROUP_LAUNCHED")
    cluster.wait_queue_empty()


def test_pending_reason_and_pool_survive_a_controller_without_the_pools_file(site, reference):
    """A controller started without --pools still drives a Slurm run through Slurm: the pool is
    in the run's allocation record."""
    store = site["store"]
    latest = store.get_run(reference["run_id"])
    controller = Controller(store, site["root"])  # no pools file: only a local `default`
    assert controller.executor_of(latest).name == "slurm"
    assert json.loads(json.dumps(latest.allocation))["pool"] == "cluster"
