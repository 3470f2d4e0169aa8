"""Trainer layouts, precision and the loss-spike guard on real torchrun groups (gloo, CPU, the
test-size GPT; issue 18): FSDP2 and tensor-parallel runs train, checkpoint real DTensor shards,
are SIGKILLed after a commit and, relaunched, end bitwise where an unkilled run of the same layout
ends; an FSDP2 checkpoint of 2 ranks restores into DDP on 1 rank (DCP resharding); a bf16 run
whose loss is made to spike skips that step's update and succeeds. Layouts and precisions that
cannot run are refused when the spec is read."""

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
    "fsdp2": ({"dp_mode": "fsdp2"}, "fp32", {"dp": 2, "dp_shard": 2, "tp": 1, "pp": 1}),
    "tp": ({"tp": 2}, "bf16", {"dp": 1, "dp_shard": 1, "tp": 2, "pp": 1}),
}
SPIKE = ["--spike-at-step", "4", "--spike-factor", "100", "--fault-generation", "0"]
"""Every tp run's loss is made to spike at step 4 (plain torchrun is generation 0)."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dataset):
    """Per layout, an unkilled run and one SIGKILLed after its step-2 commit and relaunched; and
    a 1-rank DDP run that resumes the unkilled FSDP2 run's step-6 checkpoint to step 8. The
    groups of each phase run side by side (the machine's cores are the limit, not the order)."""
    folder = tmp_path_factory.mktemp("runs")
    guard = {"threshold_ratio": 4.0, "window_steps": 2, "action": "skip"}
    found: dict[str, dict] = {}
    started = {}
    for name, (parallelism, precision, _) in LAYOUTS.items():
        training = {**tiny_gpt(dataset, steps=STEPS)["training"], "precision": precision,
                    "loss_spike": guard}  # fmt: skip
        training["schedule"] = {"warmup_steps": 2, "decay": "constant"}
        spec = spec_file(folder, dataset, name, parallelism=parallelism, training=training)
        args = SPIKE if name == "tp" else []
        runs_of = {"spec": spec, "args": args}
        for kind in ("straight", "killed"):
            runs_of[kind] = folder / f"{name}-{kind}"
            started[(name, kind)] = torchrun(spec, runs_of[kind], 2, *args)
        found[name] = runs_of
    for name in LAYOUTS:
        kill_after_commit(started[(name, "killed")], found[name]["killed"], step=2)
    for name in LAYOUTS:
        found[name]["straight_sent"] = finish(started[(name, "straight")], found[name]["straight"])
    relaunched = {name: torchrun(found[name]["spec"], found[name]["killed"], 2,
                                 *found[name]["args"]) for name in LAYOUTS}  # fmt: skip
    steps8 = {**tiny_gpt(dataset, steps=8)["training"],
              "schedule": {"warmup_steps": 2, "decay": "constant"}}  # fmt: skip
    one = spec_file(
        folder,
        dataset,
        "one",
        devices=1,
        training=steps8,
        checkpoint={"resume_from": str(found["fsdp2"]["straight"] / "checkpoints")},
    )
    found["ddp"] = {"killed": folder / "one-run"}
    restore = torchrun(one, found["ddp"]["killed"], 1)
    for name, proc in relaunched.items():
        found[name]["resumed_sent"] = finish(proc, found[name]["killed"])
    found["ddp"]["resumed_sent"] = finish(restore, found["ddp"]["killed"])
    return found


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_killed_run_recovers_bitwise(runs, layout):
    run = runs[layout]
    restored = [m for m in run["resumed_sent"] if m["type"] == "RESTORED"]
    assert [m["step"] for m in restored] == [0, 2]  # the first launch's fresh start, then step 2
    assert digests(run["killed"]) == digests(run["straight"])  # bit for bit (rank 0's shards)
    saved = manifests(run["killed"])
    assert saved and all(m.parallel_layout == LAYOUTS[layout][2] for m in saved)
    # Real shards: a sharded weight is stored as one chunk per rank, not one whole tensor.
    assert len(saved[-1].logical_keys["model.blocks.0.fc.weight"].shards) == 2


def test_a_bf16_tp_run_skips_a_spiked_step_and_succeeds(runs):
    """Both tp runs skipped step 4's update, the relaunched one with the guard's window restored
    from the step-2 checkpoint (an empty window would not have caught it, and the digests above
    would differ)."""
    for sent in (runs["tp"]["straight_sent"], runs["tp"]["resumed_sent"]):
        (skipped,) = [m for m in sent if m["type"] == "LOSS_SPIKE_SKIPPED"]
        assert skipped["step"] == 4 and skipped["attributes"]["action"] == "skip"
        assert skipped["attributes"]["loss"] > 4.0 * skipped["attributes"]["mean"]
    healthy = {m["step"]: m["attributes"] for m in runs["tp"]["straight_sent"]
               if m["type"] == "STEP_HEALTHY"}  # fmt: skip
    assert sorted(healthy) == list(range(1, STEPS + 1))
    assert healthy[4].get("skipped") is True and not healthy[5].get("skipped")
    assert any(m["type"] == "TRAINING_COMPLETE" for m in runs["tp"]["straight_sent"])
    assert not any(m["type"] == "LOSS_SPIKE_SKIPPED" for m in runs["fsdp2"]["straight_sent"])


def test_an_fsdp2_checkpoint_restores_into_ddp_on_one_rank(runs):
    """2 FSDP2 ranks' sharded step-6 checkpoint into 1 DDP rank through DCP resharding."""
    sent = runs["ddp"]["resumed_sent"]
    (restored,) = [m for m in sent if m["type"] == "RESTORED"]
    assert (restored["step"], restored["attributes"]["mode"]) == (6, "reshard")
    assert [m["step"] for m in sent if m["type"] == "STEP_HEALTHY"] == [7, 8]
    saved = manifests(runs["ddp"]["killed"])
    assert saved[-1].parallel_layout == {"dp": 1, "dp_shard": 1, "tp": 1, "pp": 1}


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
