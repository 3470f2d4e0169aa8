"""The reference trainer under plain torchrun (no control plane): it trains, checkpoints, and a
second launch with the same run folder resumes from the newest committed checkpoint."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from runwright.data import build_dataset
from runwright.spec import spec_from_mapping
from runwright.train.model import GPT
from runwright.train.schedule import lr_multiplier

EXAMPLES = Path(__file__).parents[2] / "examples"
TINY_GPT = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "tiny_gpt.yaml"


def test_schedule_warms_up_then_decays_to_the_floor():
    spec = spec_from_mapping(
        {**yaml.safe_load(TINY_GPT.read_text()), "data": {"sequence_length": 16}}
    )
    schedule = spec.training.schedule  # warm-up 5, cosine to 0.1
    values = [lr_multiplier(s, 60, schedule) for s in range(60)]
    assert values[:5] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert values[5] == 1.0 and all(a >= b for a, b in itertools.pairwise(values[5:]))
    assert lr_multiplier(60, 60, schedule) == pytest.approx(0.1)


def test_document_mask_isolates_packed_documents():
    spec = spec_from_mapping(
        {**yaml.safe_load(TINY_GPT.read_text()), "data": {"sequence_length": 16}}
    )
    torch.manual_seed(0)
    model = GPT(spec.model, max_positions=16).eval()
    doc_a, doc_b = torch.randint(0, 100, (1, 5)), torch.randint(0, 100, (1, 6))
    packed = torch.cat([doc_a, doc_b], dim=1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5]])
    segments = torch.tensor([[1] * 5 + [2] * 6])
    alone = model(doc_b, torch.arange(6).unsqueeze(0), torch.ones(1, 6, dtype=torch.long))
    together = model(packed, positions, segments)[:, 5:]
    assert torch.allclose(alone, together, atol=1e-5)


@pytest.mark.integration
def test_plain_torchrun_trains_and_resumes(tmp_path):
    built = build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path)
    data = yaml.safe_load(TINY_GPT.read_text())
    data["model"]["vocab_size"] = built.manifest.tokenizer.vocab_size
    data["data"].update(
        dataset=str(built.folder),
        sequence_length=32,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=4, micro_batch_size=2)
    data["checkpoint"]["interval"]["every_steps"] = 3
    run_dir = tmp_path / "run"

    def launch(steps: int) -> list[dict]:
        data["training"]["steps"] = steps
        spec_file = tmp_path / f"spec{steps}.yaml"
        spec_file.write_text(yaml.safe_dump(data))
        env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(run_dir)}
        env.pop("RUNWRIGHT_RUN_ID", None)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "2",
                "-m",
                "runwright.train",
                "--spec",
                str(spec_file),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        lines = (run_dir / "channel" / "gen00000-rank00000.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    first = launch(4)
    steps = [m["step"] for m in first if m["type"] == "STEP_HEALTHY"]
    assert steps == [1, 2, 3, 4]
    assert all(m["attributes"]["loss_tokens"] > 0 for m in first if m["type"] == "STEP_HEALTHY")
    second = launch(7)[len(first) :]
    restored = [m for m in second if m["type"] == "RESTORED"]
    assert restored and restored[0]["step"] == 4
    assert [m["step"] for m in second if m["type"] == "STEP_HEALTHY"] == [5, 6, 7]
    assert (run_dir / "final_parameters.json").exists()
