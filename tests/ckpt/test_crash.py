"""Crash consistency: SIGKILL the saving process at every protocol step and inside shard writes.

After each kill, restore must return step 1 or step 2 exactly (all parameters, optimizer state
and cursor of one of them, never a mixture), and GC must leave no staging residue behind.
"""

import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ckpt_helpers import differences, make_state

from runwright.ckpt import Checkpointer, CommitStep, LocalFence, MemorySink, scan
from runwright.ckpt.storage import STAGING, CheckpointStorage
from runwright.spec.policies import CheckpointSpec

CHILD = Path(__file__).with_name("crash_child.py")
SHARD_BYTES = 1_600_000  # 256x256 + 256x4 float32 params, x3 with AdamW moments


def _crash(root: Path, kill_at: str, kill_bytes: int = 0) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(CHILD.parent), "PATH": "/usr/bin:/bin"}
    _saved(root).mkdir()
    return subprocess.run(
        [sys.executable, str(CHILD), str(root), kill_at, str(kill_bytes), str(_saved(root))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _saved(root: Path) -> Path:
    """Where the child records what each save holds: beside the root, so GC never sees it."""
    return root.with_name(root.name + "-saved")


def _check_after_crash(root: Path, done: subprocess.CompletedProcess, kill_at: str) -> int:
    assert done.returncode == -9, done.stdout + done.stderr
    fence = LocalFence(str(root))
    generation = fence.advance_generation()
    restorer = Checkpointer(str(root), policy=CheckpointSpec(), fence=fence, events=MemorySink())
    fresh = make_state(seed=77, width=256, steps=0)
    result = restorer.restore(fresh)
    assert result is not None and result.step in (1, 2)
    saved = torch.load(_saved(root) / f"saved-{result.step}.pt")
    wrong = differences(fresh, saved)
    assert wrong == [], f"restored step {result.step} differs from its save in {wrong}: a mixture"
    report = restorer.collect_garbage(min_age_seconds=0)
    storage = CheckpointStorage(str(root))
    assert storage.list_names(storage.path(STAGING)) == []
    assert scan(storage)[1] == [], f"residue left: {scan(storage)[1]} after {report}"
    assert generation == 2
    return result.step


# Step 2 becomes the restore target only once the fence has published it: a kill between the
# commit record and the publish leaves a committed folder the pointer never named, which restore
# skips (it cannot tell it from a fenced writer's) and GC removes once the generation moved on.
EXPECTED_STEP = {
    CommitStep.ALLOCATE: 1,
    CommitStep.STAGE: 1,
    CommitStep.WRITE_SHARDS: 1,
    CommitStep.VERIFY: 1,
    CommitStep.WRITE_MANIFEST: 1,
    CommitStep.MOVE: 1,
    CommitStep.WRITE_COMMIT: 1,
    CommitStep.PUBLISH: 1,
    CommitStep.DONE: 2,
}


@pytest.mark.integration
@pytest.mark.parametrize("kill_at", list(CommitStep))
def test_kill_at_every_protocol_step(tmp_path, kill_at):
    done = _crash(tmp_path, kill_at.value)
    assert _check_after_crash(tmp_path, done, kill_at) == EXPECTED_STEP[kill_at]


@pytest.mark.integration
@pytest.mark.parametrize("kill_bytes", [1, SHARD_BYTES // 2, SHARD_BYTES - 70_000])
def test_kill_inside_shard_write(tmp_path, kill_bytes):
    done = _crash(tmp_path, CommitStep.WRITE_SHARDS.value, kill_bytes)
    assert _check_after_crash(tmp_path, done, CommitStep.WRITE_SHARDS) == 1


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("seed", range(25))
def test_kill_at_random_byte_offsets(tmp_path, seed):
    kill_bytes = random.Random(seed).randrange(1, SHARD_BYTES)
    done = _crash(tmp_path, CommitStep.WRITE_SHARDS.value, kill_bytes)
    assert _check_after_crash(tmp_path, done, CommitStep.WRITE_SHARDS) == 1
