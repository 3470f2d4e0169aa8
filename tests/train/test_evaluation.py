"""Evaluation bound to checkpoints (issue 17): the eval set is the same rows every time, taken
from the dataset's isolated eval split; the reference trainer under plain torchrun reports an
EVALUATED every K steps naming the checkpoint saved at that step, and evaluating leaves the
training bitwise the same as a run that never evaluates."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from runwright.data import build_dataset
from runwright.spec import spec_from_mapping
from runwright.train.evaluate import eval_rows, evaluate
from runwright.train.model import GPT

EXAMPLES = Path(__file__).parents[2] / "examples"
TINY_GPT = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "tiny_gpt.yaml"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path_factory.mktemp("eval-data"))


def test_the_eval_set_is_fixed_and_split_across_ranks(tiny):
    whole = eval_rows(str(tiny.folder), 16, 6, 0, 1)
    assert whole is not None and whole.shape == (6, 17)
    assert torch.equal(whole, eval_rows(str(tiny.folder), 16, 6, 0, 1))  # the same every time
    halves = [eval_rows(str(tiny.folder), 16, 6, r, 2) for r in (0, 1)]
    assert torch.equal(torch.cat([halves[0], halves[1]]).sort(dim=0).values,
                       whole.sort(dim=0).values)  # fmt: skip
    spec = spec_from_mapping(
        {**yaml.safe_load(TINY_GPT.read_text()), "model": {
            "n_layers": 1, "d_model": 32, "n_heads": 2,
            "vocab_size": tiny.manifest.tokenizer.vocab_size}},
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT(spec.model, max_positions=16)
    loss, tokens = evaluate(model, whole, 4, torch.device("cpu"))
    assert tokens == 6 * 16 and math.isfinite(loss)
    # Untrained, the loss is near log(vocabulary): nothing learnt, nothing broken.
    assert abs(loss - math.log(spec.model.vocab_size)) < 1.0
    assert model.training  # left as it was found


def test_the_trainer_evaluates_every_k_steps_and_trains_the_same(tiny, tmp_path):
    data = yaml.safe_load(TINY_GPT.read_text())
    data["model"]["vocab_size"] = tiny.manifest.tokenizer.vocab_size
    data["data"].update(
        dataset=str(tiny.folder),
        sequence_length=32,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=4, micro_batch_size=2, steps=4)
    data["checkpoint"]["interval"]["every_steps"] = 2

    def launch(name: str, every: int | None) -> tuple[list[dict], dict]:
        data["training"]["eval_every_steps"] = every
        data["training"]["eval_sequences"] = 8
        spec_file = tmp_path / f"{name}.yaml"
        spec_file.write_text(yaml.safe_dump(data))
        run_dir = tmp_path / name
        env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(run_dir)}
        env.pop("RUNWRIGHT_RUN_ID", None)
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        argv = [
            *torchrun,
            "--nproc-per-node",
            "2",
            "-m",
            "runwright.train",
            "--spec",
            str(spec_file),
        ]
        done = subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        lines = (run_dir / "channel" / "gen00000-rank00000.jsonl").read_text().splitlines()
        final = json.loads((run_dir / "final_parameters.json").read_text())
        return [json.loads(line) for line in lines], final

    messages, with_eval = launch("evaluating", 2)
    evaluated = [m for m in messages if m["type"] == "EVALUATED"]
    assert [m["step"] for m in evaluated] == [2, 4]
    staged = {m["step"]: m["checkpoint_id"] for m in messages if m["type"] == "CHECKPOINT_STAGED"}
    assert [m["checkpoint_id"] for m in evaluated] == [staged[2], staged[4]]
    assert all(math.isfinite(m["attributes"]["eval_loss"]) for m in evaluated)
    assert all(m["attributes"]["tokens"] == 8 * 32 for m in evaluated)
    _, without = launch("plain", None)
    assert with_eval == without  # evaluating changed nothing the training computes
