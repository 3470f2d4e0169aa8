"""The reference trainer under plain torchrun, two ranks, two micro-batches a step: each rank's
STEP_HEALTHY carries its loss by source and by length bucket, and on every step the sources'
losses weighted by their loss tokens (summed over the ranks) equal the step's loss, as do the
length buckets'; merged on the run's time axis they give the same."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.data.read.test_loss_groups import labelled_dataset

from runwright.observe.timeline import build_timeline
from runwright.store import EventRecord

TINY_GPT = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "tiny_gpt.yaml"
STEPS = 4


@pytest.mark.integration
def test_source_losses_weighted_by_tokens_equal_the_step_loss(tmp_path):
    labelled_dataset(tmp_path / "ds")
    data = yaml.safe_load(TINY_GPT.read_text())
    data["model"].update(n_layers=1, d_model=32, n_heads=2, vocab_size=256)
    data["data"].update(
        dataset=str(tmp_path / "ds"),
        sequence_length=32,
        mixture={"sources": [{"name": "short", "weight": 1}, {"name": "long", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=8, micro_batch_size=2, steps=STEPS)
    data["observability"] = {"loss_length_buckets": [8, 24], "system_sample_seconds": None}
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    run_dir = tmp_path / "run"
    env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(run_dir)}
    env.pop("RUNWRIGHT_RUN_ID", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               "2", "-m", "runwright.train", "--spec", str(spec_file)]  # fmt: skip
    proc = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    channel = run_dir / "channel"
    reports = [
        json.loads(line)
        for rank in (0, 1)
        for line in (channel / f"gen00000-rank0000{rank}.jsonl").read_text().splitlines()
    ]
    steps = [m for m in reports if m["type"] == "STEP_HEALTHY"]
    assert len(steps) == 2 * STEPS
    for number in range(1, STEPS + 1):
        ranks = [m["attributes"] for m in steps if m["step"] == number]
        loss = ranks[0]["loss"]  # the all-reduced step loss: every rank reports the same
        loss_tokens = sum(a["loss_tokens"] for a in ranks)
        for key in ("source_loss", "length_loss"):
            sums: dict[str, list[float]] = {}
            for attributes in ranks:
                for name, (loss_sum, tokens) in attributes[key].items():
                    entry = sums.setdefault(name, [0.0, 0])
                    entry[0] += loss_sum
                    entry[1] += tokens
            assert sum(t for _, t in sums.values()) == loss_tokens
            weighted = sum((s / t) * t for s, t in sums.values()) / loss_tokens
            assert weighted == pytest.approx(loss, rel=1e-5), (number, key)
        assert set(ranks[0]["source_loss"]) <= {"short", "long"}
    # On the run's time axis: the merged means, weighted by their tokens, give the step's loss.
    events = [
        EventRecord(seq=i + 1, event_id=m["event_id"], run_id="r", generation=m["generation"],
                    type=m["type"], step=m["step"], time_unix_s=m["time_unix_s"],
                    attributes={**m["attributes"], "rank": m["rank"]})
        for i, m in enumerate(steps)
    ]  # fmt: skip
    points = build_timeline(events).steps
    assert len(points) == STEPS
    for point in points:
        for table in (point.source_loss, point.length_loss):
            tokens = sum(t for _, t in table.values())
            assert tokens == point.loss_tokens
            weighted = sum(loss * t for loss, t in table.values()) / tokens
            assert weighted == pytest.approx(point.loss, rel=1e-5)
    assert {name for p in points for name in p.source_loss} == {"short", "long"}
