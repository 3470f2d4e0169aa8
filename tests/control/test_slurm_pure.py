"""The Slurm executor's pure parts, without a cluster: node lists, what the clients print, the
`sbatch` command, the state and reason tables, and a generation's exit status."""

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from runwright.control.executors import slurm_cli as cli
from runwright.control.executors import slurm_states as states
from runwright.control.executors.slurm_allocation import job_name, sbatch_argv
from runwright.control.executors.slurm_job import combine
from runwright.control.pools import Pool
from runwright.layout import run_paths
from runwright.spec import spec_from_mapping

SKELETON = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"


def spec(**resources):
    data = yaml.safe_load(SKELETON.read_text())
    data["resources"].update(resources)
    data["training"]["global_batch_samples"] = 16 * resources.get("nodes", 1)
    return spec_from_mapping(data)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n1", ["n1"]),
        ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
        ("gpu-[01-02],cpu7", ["gpu-01", "gpu-02", "cpu7"]),
        ("rack[8-10]a", ["rack8a", "rack9a", "rack10a"]),
        ("", []),
    ],
)
def test_node_lists_expand_as_scontrol_show_hostnames(text, names):
    assert cli.expand_nodelist(text) == names


def test_an_unreadable_node_list_is_an_error():
    with pytest.raises(ValueError, match="n\\[a-b\\]"):
        cli.expand_nodelist("n[a-b]")


@given(st.lists(st.integers(0, 500), min_size=1, max_size=30, unique=True).map(sorted))
def test_compressed_ranges_expand_back_to_the_same_nodes(numbers):
    ranges, start = [], numbers[0]
    for previous, current in zip(numbers, [*numbers[1:], None], strict=True):
        if current != previous + 1:
            ranges.append(f"{start}-{previous}" if previous != start else f"{start}")
            start = current
    assert cli.expand_nodelist(f"node[{','.join(ranges)}]") == [f"node{n}" for n in numbers]


def test_squeue_scontrol_and_sacct_lines_read_as_jobs():
    (pending, running) = cli.parse_squeue(
        "12|PENDING|Resources||debug|2\n13|RUNNING|None|n[1-2]|debug|2\n"
    )
    assert (pending.state, pending.reason, pending.nodes, pending.node_count) == (
        "PENDING", "Resources", (), 2,
    )  # fmt: skip
    assert running.nodes == ("n1", "n2")
    job = cli.parse_scontrol_job(
        "JobId=14 JobName=rw-x JobState=NODE_FAIL Reason=NodeDown Partition=debug "
        "NodeList=n[2-3] NumNodes=2 NumCPUs=2"
    )
    assert job is not None and job.state == "NODE_FAIL" and job.nodes == ("n2", "n3")
    ended = cli.parse_sacct("15|CANCELLED by 0|None|n1|debug|1\n")
    assert ended is not None and ended.state == "CANCELLED" and ended.nodes == ("n1",)
    assert cli.parse_scontrol_job("no job here") is None


def test_gres_counts_read_sinfo_fields():
    assert cli.gres_count("gpu:a100:4(S:0-1),nic:1", "gpu") == 4
    assert cli.gres_count("gpu:8", "gpu") == 8 and cli.gres_count("(null)", "gpu") == 0


def test_sbatch_asks_for_the_whole_gang_with_the_pools_settings(tmp_path):
    paths = run_paths(tmp_path, "run-a").allocation(3)
    pool = Pool(
        executor="slurm",
        partition="debug",
        account="ml",
        qos="high",
        time_limit_minutes=90,
        signal_lead_seconds=300,
        extra_sbatch_args=("--constraint=ib",),
    )
    argv = sbatch_argv(
        spec=spec(nodes=2, devices_per_node=1),
        pool=pool,
        run_id="run-a",
        paths=paths,
        workdir=tmp_path,
        exclude_hosts=("n2",),
        python="/opt/py/bin/python",
    )
    assert argv[:2] == ["sbatch", "--parsable"]
    for flag in (
        f"--job-name={job_name('run-a', 3)}", "--nodes=2", "--ntasks-per-node=1",
        "--cpus-per-task=1", "--partition=debug", "--account=ml", "--qos=high", "--time=90",
        "--signal=TERM@300", "--exclude=n2", "--no-requeue", "--constraint=ib",
        f"--output={paths.agent_log}", f"--chdir={tmp_path}",
    ):  # fmt: skip
        assert flag in argv, flag
    assert argv[-1] == (
        f"--wrap=exec /opt/py/bin/python -m runwright.control.executors.slurm_job {paths.folder} 3"
    )
    # runwright's admission placed the gang: Slurm is held to those nodes (no exclusion then).
    placed = sbatch_argv(
        spec=spec(nodes=2, devices_per_node=1),
        pool=pool,
        run_id="run-a",
        paths=paths,
        workdir=tmp_path,
        exclude_hosts=("n2",),
        placed_hosts=("n3", "n4"),
    )
    assert "--nodelist=n3,n4" in placed and not any(a.startswith("--exclude") for a in placed)


def test_devices_become_gres_on_a_gpu_pool(tmp_path):
    argv = sbatch_argv(
        spec=spec(nodes=1, devices_per_node=4, device_type="cuda"),
        pool=Pool(executor="slurm", gres="gpu", signal_lead_seconds=0),
        run_id="r",
        paths=run_paths(tmp_path, "r").allocation(1),
        workdir=tmp_path,
    )
    assert "--gres=gpu:4" in argv and not any(a.startswith("--cpus-per-task") for a in argv)
    assert not any(a.startswith(("--signal", "--partition", "--time")) for a in argv)


def test_pending_reasons_read_as_words():
    assert states.pending_words("debug", "PENDING", "Resources", 2) == (
        "waiting in Slurm partition debug: Resources (the nodes are busy), 2 nodes requested"
    )
    assert "ReqNodeNotAvail (a node it needs is down" in states.pending_words(
        "debug", "PENDING", "ReqNodeNotAvail", 1
    )
    assert "1 node requested" in states.pending_words("", "CONFIGURING", "None", 1)
    assert states.is_hopeless("PENDING", "InvalidAccount")
    assert not states.is_hopeless("PENDING", "Priority")


@pytest.mark.parametrize(
    ("state", "pending", "running"),
    [
        ("PENDING", True, False), ("REQUEUED", True, False), ("CONFIGURING", True, False),
        ("RUNNING", False, True), ("COMPLETING", False, False), ("NODE_FAIL", False, False),
        ("TIMEOUT", False, False), ("PREEMPTED", False, False), ("CANCELLED", False, False),
    ],
)  # fmt: skip
def test_job_states_map_to_allocation_states(state, pending, running):
    assert states.is_pending(state) is pending and states.is_running(state) is running
    if not (pending or running):
        assert states.ended_words("9", state, "").startswith("Slurm job 9 ")


def test_lost_node_states():
    assert all(map(states.is_lost_node_state, ["down*", "down", "idle*", "fail", "unknown*"]))
    assert not any(map(states.is_lost_node_state, ["idle", "alloc", "mixed", "drain"]))


def test_a_generation_exits_zero_only_if_every_node_did():
    assert combine({"n1": 0, "n2": 0}, 0, False) == 0
    assert combine({"n1": 0, "n2": 1}, 1, False) == 1
    assert combine({"n1": 0, "n2": None}, 0, False) == 1  # a node that left no status failed
    assert combine({"n1": None, "n2": None}, 137, True) == -15  # srun killed it on SIGTERM
    assert combine({"n1": None, "n2": None}, 137, False) == 137
