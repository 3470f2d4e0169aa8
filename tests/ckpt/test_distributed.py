"""Real torchrun (gloo, CPU): save from 2 FSDP2 ranks, restore into 2 (exact, per-rank RNG),
4 (resharded) and 1 (plain model in this process); plain DCP reads the model state."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from runwright.ckpt import Checkpointer, LocalFence, MemorySink, RestoreMode, TrainState, scan
from runwright.ckpt.storage import CheckpointStorage
from runwright.spec.policies import CheckpointSpec

CHILD = Path(__file__).with_name("dist_child.py")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _torchrun(nproc: int, mode: str, out: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(nproc),
            "--master-port",
            str(_free_port()),
            str(CHILD),
            mode,
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(CHILD.parent)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _torchrun(2, "save", out)
    return out


@pytest.mark.integration
def test_each_rank_gets_its_own_rng_back(saved):
    first, second = (json.loads((saved / f"rng_rank{r}.json").read_text()) for r in (0, 1))
    assert first != second, "ranks must have had different RNG streams for this to prove anything"
    _torchrun(2, "restore", saved)
    for rank in (0, 1):
        result = json.loads((saved / f"ok_restore_2_{rank}.json").read_text())
        assert result["mode"] == "exact" and result["rng_restored"]


@pytest.mark.integration
def test_restore_into_four_ranks_reshards(saved):
    _torchrun(4, "restore", saved)
    for rank in range(4):
        result = json.loads((saved / f"ok_restore_4_{rank}.json").read_text())
        assert result["mode"] == "reshard" and result["step"] == 3


@pytest.mark.integration
def test_restore_into_one_plain_process(saved):
    torch.manual_seed(9)
    model = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.Linear(12, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    state = TrainState(model=model, optimizer=optimizer)
    root = str(saved / "checkpoints")
    restorer = Checkpointer(
        root, policy=CheckpointSpec(), fence=LocalFence(root), events=MemorySink()
    )
    result = restorer.restore(state)
    assert result.mode == RestoreMode.RESHARD and not result.rng_restored
    expected = torch.load(saved / "expected.pt", weights_only=False)
    for key, value in expected["model"].items():
        assert torch.equal(model.state_dict()[key], value), key
    names = [n for n, _ in model.named_parameters()]
    for index, name in enumerate(names):
        for slot in ("exp_avg", "exp_avg_sq"):
            got = optimizer.state_dict()["state"][index][slot]
            assert torch.equal(got, expected["optim"]["state"][name][slot]), (name, slot)


@pytest.mark.integration
def test_plain_dcp_reads_sharded_model_state(saved):
    (found,) = scan(CheckpointStorage(str(saved / "checkpoints")))[0]
    expected = torch.load(saved / "expected.pt", weights_only=False)["model"]
    target = {"model": {k: torch.zeros_like(v) for k, v in expected.items()}}
    dcp.load(target, checkpoint_id=found.path, no_dist=True)
    for key, value in expected.items():
        assert torch.equal(target["model"][key], value), key
