"""The commit protocol on a real S3-compatible server (moto, tests/s3_server.py): no rename, so
shards go straight into `<step>-<id>/`, COMMITTED (one PUT, whole or absent) is the commit, and
the fenced pointer in FENCE.json is the publish. Save, list, verify, restore and GC work on an
`s3://` root as on a folder; a save killed before its COMMITTED object leaves residue that restore
ignores and GC removes; plain DCP loads the model state of a committed checkpoint."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckpt_helpers import differences, make_state, params, same_params

from runwright.ckpt import Checkpointer, CommitStep, MemorySink, SaveStatus, scan
from runwright.ckpt import inventory as inv
from runwright.ckpt.fence import FENCE_OBJECT, open_fence
from runwright.ckpt.manifest import COMMIT_FILE, MANIFEST_FILE
from runwright.ckpt.object_fence import ObjectFence
from runwright.ckpt.start import start_generation
from runwright.ckpt.storage import CheckpointStorage
from runwright.spec.policies import CheckpointSpec

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("crash_child.py")


def saver(root: str, **policy) -> Checkpointer:
    return Checkpointer(root, policy=CheckpointSpec(**policy), events=MemorySink())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_save_list_verify_restore_on_s3(s3_bucket, mode):
    root = f"{s3_bucket}/runs/run-1"
    storage = CheckpointStorage(root)
    generation, _ = start_generation(open_fence(root), storage)
    writer = saver(root, mode=mode, keep_last=2)
    assert isinstance(writer.fence, ObjectFence) and writer.generation == generation == 1
    states = {step: make_state(seed=step, steps=step) for step in (1, 2, 3)}
    for step, state in states.items():
        assert writer.save(step, state).status in (SaveStatus.COMMITTED, SaveStatus.QUEUED)
    writer.close()

    found = inv.inventory(root)
    assert [row.step for row in found.committed] == [3, 2], "retention keeps the newest 2"
    assert found.committed[0].latest and found.generation == 1 and not found.uncommitted
    names = {name for name, _ in storage.entries(root)}
    assert FENCE_OBJECT in names and "staging" not in names, "nothing is staged or renamed"
    report = inv.verify(root, None, "full")
    assert report.ok, report
    verified = [c.checkpoint_id for c in report.checkpoints]
    assert verified == [row.checkpoint_id for row in found.committed]

    collected = inv.collect(root, min_age_seconds=0.0, max_entries=64)
    assert collected.removed == {} and collected.failed == {}, "a clean root has no residue"

    fresh = make_state(seed=99, steps=0)
    restored = saver(root).restore(fresh)
    assert restored is not None and restored.step == 3
    assert same_params(fresh, params(states[3]))
    assert fresh.data_loader.position == states[3].data_loader.position


def test_verify_on_s3_finds_a_corrupted_shard_and_restore_falls_back(s3_bucket):
    root = f"{s3_bucket}/run-2"
    writer = saver(root)
    first, second = make_state(seed=1), make_state(seed=2, steps=2)
    writer.save(1, first)
    writer.save(2, second)
    newest = scan(CheckpointStorage(root))[0][0]
    shard = next(f for f in newest.manifest.files if f.name.endswith(".distcp"))
    path = f"{newest.path}/{shard.name}"
    data = bytearray(writer.storage.read_bytes(path))
    data[len(data) // 2] ^= 0xFF
    writer.storage.fs.pipe_file(path, bytes(data))
    report = inv.verify(root, newest.folder, "full")
    assert not report.ok
    assert any("checksum mismatch" in p.reason for p in report.checkpoints[0].problems)
    fresh = make_state(seed=9, steps=0)
    restored = saver(root).restore(fresh)
    assert restored.step == 1 and restored.fallbacks[0].step == 2
    assert same_params(fresh, params(first))


def test_plain_dcp_loads_the_model_state_of_an_s3_checkpoint(s3_bucket):
    """No runwright on the reading side: DCP picks its own fsspec reader for the URL."""
    root = f"{s3_bucket}/run-3"
    state = make_state(seed=5, steps=2)
    saver(root).save(2, state)
    (found,) = scan(CheckpointStorage(root))[0]
    assert found.path.startswith("s3://")
    target = {"model": {k: torch.zeros_like(v) for k, v in state.model.state_dict().items()}}
    dcp.load(target, checkpoint_id=found.path, no_dist=True)
    for key, value in state.model.state_dict().items():
        assert torch.equal(target["model"][key], value)


# Where the child dies during step 2's save, and what restore must then return: before the
# COMMITTED object exists the folder is residue; after it but before the pointer moved, it is a
# committed folder the pointer never named (a fenced writer's, for all restore can tell).
KILLS = [
    pytest.param(CommitStep.WRITE_SHARDS, 1, "no commit record", marks=pytest.mark.slow),
    pytest.param(CommitStep.WRITE_COMMIT, 0, "no commit record"),
    pytest.param(CommitStep.PUBLISH, 0, None),
]


@pytest.mark.parametrize(("kill_at", "kill_bytes", "reason"), KILLS)
def test_a_killed_save_leaves_residue_restore_ignores_and_gc_removes(
    s3_bucket, tmp_path, kill_at, kill_bytes, reason
):
    root = f"{s3_bucket}/run-kill"
    done = subprocess.run(
        [sys.executable, str(CHILD), root, kill_at.value, str(kill_bytes), str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(CHILD.parent)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -9, done.stdout + done.stderr
    storage = CheckpointStorage(root)
    committed, other = scan(storage)
    if reason is not None:
        # the interrupted step-2 folder (if any object of it was uploaded): never COMMITTED
        assert all(u.reason.startswith(reason) and not u.damaged for u in other), other
        assert [c.record.step for c in committed] == [1]
        if kill_at == CommitStep.WRITE_COMMIT:
            assert len(other) == 1, "shards and manifest were uploaded, only COMMITTED is missing"
    else:
        assert sorted(c.record.step for c in committed) == [1, 2]
        assert storage.exists(f"{committed[0].path}/{COMMIT_FILE}")
    fence = open_fence(root)
    assert fence.latest().step == 1
    generation, _ = start_generation(fence, storage, gc_min_age_seconds=3600.0)
    assert generation == 2
    fresh = make_state(seed=77, width=256, steps=0)
    restored = saver(root).restore(fresh)
    assert restored.step == 1
    assert differences(fresh, torch.load(tmp_path / "saved-1.pt")) == []
    # the fenced generation's residue is gone, the committed step 1 is untouched
    committed, other = scan(storage)
    assert [c.record.step for c in committed] == [1] and other == []
    assert storage.exists(f"{committed[0].path}/{MANIFEST_FILE}")
