"""Silent-data-corruption checks (training.integrity; issue 24) in the reference trainer under
plain torchrun, 2 gloo ranks, one launch pair shared by every assertion: rank 1 flips one bit of
a parameter after step 5 (--flip-bit); the replica check at step 8 finds the two replicas
differ, names both (two replicas: no majority), marks the step-6 checkpoint suspect while
retention kept the step-4 one (the last passing check) despite keep_last 1, and the group stops
with SilentDataCorruptionError before step 8 is reported; a restore would pick step 4, not the
suspect step 6. The controller's side (class sdc, quarantine, the rollback itself, SUCCEEDED, the
report) is tests/control/test_sdc_recovery.py (slow: two generations)."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from runwright_tests_tiny import TINY_DATA, tiny_gpt

from runwright.ckpt import restore_candidates, scan
from runwright.ckpt.storage import CheckpointStorage
from runwright.data import build_dataset

pytestmark = pytest.mark.integration


def launch(tmp_path, data, *args: str) -> subprocess.CompletedProcess:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    env = {**os.environ, "RUNWRIGHT_RUN_DIR": str(tmp_path / "run")}
    env.pop("RUNWRIGHT_RUN_ID", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", "-m", "runwright.train", "--spec", str(spec_file),
               "--fault-generation", "0", *args]  # fmt: skip
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def messages(tmp_path) -> list[dict]:
    lines = (tmp_path / "run" / "channel" / "gen00000-rank00000.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_flipped_bit_is_found_and_the_checkpoints_since_the_last_check_suspected(tmp_path):
    dataset = build_dataset(TINY_DATA, tmp_path / "data")
    data = tiny_gpt(dataset, steps=8, every_steps=2)
    data["checkpoint"]["keep_last"] = 1
    data["training"]["integrity"] = {"every_steps": 4}
    failed = launch(tmp_path, data, "--flip-bit", "blocks.0.fc.weight:1@5")
    assert failed.returncode != 0
    assert "SilentDataCorruptionError" in failed.stderr, failed.stderr[-3000:]
    first = messages(tmp_path)
    (found,) = [m for m in first if m["type"] == "SDC_DETECTED"]
    facts = found["attributes"]
    assert found["step"] == 8 and facts["kind"] == "replica_digest"
    assert facts["ranks"] == [0, 1]  # two replicas that differ: either may be the bad one
    assert facts["tensors"] == ["blocks.0.fc.weight"]
    assert facts["known_good_step"] == 4 and len(facts["suspect_checkpoints"]) == 1
    assert facts["hosts"]  # what recovery quarantines
    healthy = [m["step"] for m in first if m["type"] == "STEP_HEALTHY"]
    assert max(healthy) == 7  # stopped at the boundary: step 8 was never reported

    storage = CheckpointStorage(str(tmp_path / "run" / "checkpoints"))
    committed, _ = scan(storage)
    by_step = {c.record.step: c for c in committed}
    assert sorted(by_step) == [4, 6]  # keep_last 1, yet the known-good step 4 was kept
    assert by_step[6].suspect and "replica_digest" in by_step[6].suspect
    assert by_step[6].folder == facts["suspect_checkpoints"][0]
    assert by_step[4].suspect is None
    assert [c.record.step for c in restore_candidates(storage, None)] == [4]
