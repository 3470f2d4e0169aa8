"""Trainer layouts, precision and the loss-spike guard on real torchrun groups (gloo, CPU, the
test-size GPT; issue 18): FSDP2 (bf16) and tensor-parallel (fp32, `-m slow`) runs train,
checkpoint real DTensor shards, skip the update of a step whose loss is made to spike, are
SIGKILLed after a commit and, relaunched, end bitwise where an unkilled run of the same layout
ends; an FSDP2 checkpoint of 2 ranks restores into DDP on 1 rank (DCP resharding). Layouts and
precisions that cannot run are refused when the spec is read."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.ckpt.manifest import CheckpointManifest
from runwright.data import build_dataset
from runwright.errors import SpecError
from runwright.layout import RunPaths
from runwright.spec import spec_from_mapping

pytestmark = pytest.mark.integration

STEPS = 6
LAUNCH_SECONDS = 240
"""A launch here takes 10-20 s (three interpreters importing torch on a busy 2-core machine);
the bound only ends a hung group."""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_dataset(TINY_DATA, tmp_path_factory.mktemp("layouts") / "data")


def spec_file(folder: Path, dataset, name: str, devices: int = 2, **sections) -> Path:
    data = tiny_gpt(dataset, steps=STEPS, name=name, devices=devices, every_steps=2)
    data["training"]["schedule"] = {"warmup_steps": 2, "decay": "constant"}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def torchrun(spec: Path, run_dir: Path, devices: int, *args: str) -> subprocess.Popen:
    env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(run_dir)}
    env.pop("RUNWRIGHT_RUN_ID", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(devices), "-m", "runwright.train", "--spec", str(spec),
               *args]  # fmt: skip
    log = open(run_dir.parent / f"{run_dir.name}.log", "a")  # noqa: SIM115 (closed with the run)
    return subprocess.Popen(command, cwd=spec.parent, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


def finish(proc: subprocess.Popen, run_dir: Path) -> list[dict]:
    code = proc.wait(timeout=LAUNCH_SECONDS)
    assert code == 0, (run_dir.parent / f"{run_dir.name}.log").read_text()[-4000:]
    return messages(run_dir)


def messages(run_dir: Path, rank: int = 0) -> list[dict]:
    channel = run_dir / "channel" / f"gen00000-rank{rank:05d}.jsonl"
    if not channel.exists():
        return []
    return [json.loads(line) for line in channel.read_text().splitlines() if line.endswith("}")]


def kill_after_commit(proc: subprocess.Popen, run_dir: Path, step: int, ranks: int = 2) -> None:
    """SIGKILL torchrun and every rank (each in a session of its own: torchrun starts them so)
    as soon as rank 0 reports the commit of `step`."""
    deadline = time.monotonic() + LAUNCH_SECONDS
    while not any(m["type"] == "CHECKPOINT_COMMITTED" and m["step"] == step
                  for m in messages(run_dir)):  # fmt: skip
        assert proc.poll() is None and time.monotonic() < deadline, "no commit to kill after"
        time.sleep(0.05)
    pids = [m["attributes"]["pid"] for r in range(ranks) for m in messages(run_dir, r)
            if m["type"] == "WORKER_STARTED"]  # fmt: skip
    assert len(pids) == ranks
    for pid in [*pids, proc.pid]:
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def digests(run_dir: Path) -> dict[str, str]:
    return json.loads((run_dir / "final_parameters.json").read_text())


def manifests(run_dir: Path) -> list[CheckpointManifest]:
    found = sorted((run_dir / "checkpoints").glob("*/manifest.json"))
    return [CheckpointManifest.model_validate_json(p.read_text()) for p in found]


LAYOUTS = {
    # name: (parallelism, precision, the manifests' parallel_layout)
    "fsdp2": ({"dp_mode": "fsdp2"}, "bf16", {"dp": 2, "dp_shard": 2, "tp": 1, "pp": 1}),
    "tp": ({"tp": 2}, "fp32", {"dp": 1, "dp_shard": 1, "tp": 2, "pp": 1}),
}
SPIKE = ["--spike-at-step", "4", "--spike-factor", "100", "--fault-generation", "0"]
"""Every run's loss is made to spike at step 4 (plain torchrun is generation 0)."""
CONSTANT = {"warmup_steps": 2, "decay": "constant"}
"""The same learning rate at every step whatever training.steps says (6, or 8 resumed)."""


def killed_and_straight(folder: Path, dataset, name: str, then=None) -> dict:
    """An unkilled run of layout `name` beside one SIGKILLed after its step-2 commit and then
    relaunched (side by side: the machine's cores are the limit, not the order). `then(straight
    run folder)` starts one more group beside the relaunch and returns it."""
    parallelism, precision, _ = LAYOUTS[name]
    guard = {"threshold_ratio": 4.0, "window_steps": 2, "action": "skip"}
    training = {**tiny_gpt(dataset, steps=STEPS)["training"], "precision": precision,
                "loss_spike": guard, "schedule": CONSTANT}  # fmt: skip
    spec = spec_file(folder, dataset, name, parallelism=parallelism, training=training)
    found = {kind: folder / f"{name}-{kind}" for kind in ("straight", "killed")}
    straight = torchrun(spec, found["straight"], 2, *SPIKE)
    killed = torchrun(spec, found["killed"], 2, *SPIKE)
    kill_after_commit(killed, found["killed"], step=2)
    found["straight_sent"] = finish(straight, found["straight"])
    relaunched = torchrun(spec, found["killed"], 2, *SPIKE)
    extra = then(found["straight"]) if then is not None else None
    found["resumed_sent"] = finish(relaunched, found["killed"])
    if extra is not None:
        found["extra_sent"] = finish(*extra)
    return found


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory, dataset):
    """FSDP2 in bf16, and a 1-rank DDP fp32 run that resumes the unkilled run's step-6
    checkpoint and trains to step 8."""
    folder = tmp_path_factory.mktemp("fsdp2")

    def one_rank(source: Path) -> tuple[subprocess.Popen, Path]:
        training = {**tiny_gpt(dataset, steps=8)["training"], "schedule": CONSTANT}
        resume = {"resume_from": str(source / "checkpoints")}
        spec = spec_file(folder, dataset, "one", devices=1, training=training, checkpoint=resume)
        return torchrun(spec, folder / "one-run", 1), folder / "one-run"

    found = killed_and_straight(folder, dataset, "fsdp2", then=one_rank)
    found["one"] = folder / "one-run"
    return found


@pytest.fixture(scope="module")
def tp(tmp_path_factory, dataset):
    return killed_and_straight(tmp_path_factory.mktemp("tp"), dataset, "tp")


def recovers_bitwise(run: dict, layout: str) -> None:
    restored = [m for m in run["resumed_sent"] if m["type"] == "RESTORED"]
    assert [m["step"] for m in restored] == [0, 2]  # the first launch's fresh start, then step 2
    assert digests(run["killed"]) == digests(run["straight"])  # bit for bit (rank 0's shards)
    saved = manifests(run["killed"])
    assert saved and all(m.parallel_layout == LAYOUTS[layout][2] for m in saved)
    # Real shards: a sharded weight is stored as one chunk per rank, not one whole tensor.
    assert len(saved[-1].logical_keys["model.blocks.0.fc.weight"].shards) == 2
    # Both runs skipped step 4's update, the relaunched one with the guard's window restored
    # from the step-2 checkpoint (an empty window would not have caught it: digests differ).
    for sent in (run["straight_sent"], run["resumed_sent"]):
        (skipped,) = [m for m in sent if m["type"] == "LOSS_SPIKE_SKIPPED"]
        assert skipped["step"] == 4 and skipped["attributes"]["action"] == "skip"
        assert skipped["attributes"]["loss"] > 4.0 * skipped["attributes"]["mean"]


def test_a_killed_bf16_fsdp2_run_skips_the_spike_and_recovers_bitwise(fsdp2):
    recovers_bitwise(fsdp2, "fsdp2")
    healthy = {m["step"]: m["attributes"] for m in fsdp2["straight_sent"]
               if m["type"] == "STEP_HEALTHY"}  # fmt: skip
    assert sorted(healthy) == list(range(1, STEPS + 1))
    assert healthy[4].get("skipped") is True and not healthy[5].get("skipped")
    assert any(m["type"] == "TRAINING_COMPLETE" for m in fsdp2["straight_sent"])


@pytest.mark.slow  # three more 2-rank groups: the default suite covers the same path with FSDP2
def test_a_killed_tensor_parallel_run_recovers_bitwise(tp):
    recovers_bitwise(tp, "tp")


def test_an_fsdp2_checkpoint_restores_into_ddp_on_one_rank(fsdp2):
    """2 FSDP2 ranks' sharded step-6 checkpoint into 1 DDP rank through DCP resharding."""
    sent = fsdp2["extra_sent"]
    (restored,) = [m for m in sent if m["type"] == "RESTORED"]
    assert (restored["step"], restored["attributes"]["mode"]) == (6, "reshard")
    assert [m["step"] for m in sent if m["type"] == "STEP_HEALTHY"] == [7, 8]
    assert manifests(fsdp2["one"])[-1].parallel_layout == {"dp": 1, "dp_shard": 1, "tp": 1, "pp": 1}


def test_every_collective_of_a_step_is_in_the_ranks_collective_logs(fsdp2):
    """What the ranks' logs held when their contexts closed (runtime/collective_log.py): FSDP2's
    all-gathers and reduce-scatters, the trainer's labelled all-reduces, DDP's buckets."""
    for rank in (0, 1):
        dump = json.loads(RunPaths(fsdp2["straight"]).collective_dump(0, rank).read_text())
        assert dump["reason"] == "exit" and dump["rank"] == rank
        done = [r for r in dump["records"] if r["exit_wall"] is not None]
        assert len(done) == len(dump["records"])  # a finished run waits in nothing
        ops = {(r["op"], (r.get("detail") or {}).get("label")) for r in done}
        assert {("all_gather", None), ("reduce_scatter", None)} <= ops, ops
        assert {("all_reduce", "loss_tokens"), ("all_reduce", "loss")} <= ops, ops
    one = json.loads(RunPaths(fsdp2["one"]).collective_dump(0, 0).read_text())
    buckets = [r for r in one["records"] if "bucket" in (r.get("detail") or {})]
    assert buckets and buckets[0]["op"] == "all_reduce" and buckets[0]["bytes"] > 0


def test_layouts_that_cannot_run_are_refused_with_the_reason(dataset):
    def refused(**sections) -> str:
        data = tiny_gpt(dataset, steps=STEPS)
        for section, values in sections.items():
            data[section] = {**data[section], **values}
        with pytest.raises(SpecError) as caught:
            spec_from_mapping(data)
        return str(caught.value) + " ".join(caught.value.problems)

    fp16 = refused(training={"precision": "fp16"})
    assert "training.precision=fp16 needs resources.device_type: cuda" in fp16
    assert "precision: bf16" in fp16
    heads = refused(model={"n_heads": 2, "d_model": 32}, parallelism={"tp": 4},
                    resources={"devices_per_node": 4})  # fmt: skip
    assert "parallelism.tp=4 must divide model.n_heads=2" in heads and "[1, 2]" in heads
    ddp = refused(parallelism={"tp": 2}, resources={"devices_per_node": 4})
    assert "needs parallelism.dp_mode: fsdp2" in ddp
    assert "must divide the world size" in refused(
        parallelism={"tp": 2}, resources={"devices_per_node": 3}
    )
