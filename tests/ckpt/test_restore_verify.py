"""Restore verifies checksums while DCP loads (restore.py, `load_verified`): a flipped byte is
still refused, and nothing but tensor bytes is applied before the checksums are in."""

import pytest
from ckpt_helpers import make_state

from runwright.ckpt import Checkpointer, MemorySink, NoUsableCheckpointError, scan
from runwright.ckpt.storage import CheckpointStorage
from runwright.spec.policies import CheckpointSpec


def _only_checkpoint_with_byte_flipped(tmp_path, where: str):
    Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink()).save(
        3, make_state(seed=1, steps=3)
    )
    (only,) = scan(CheckpointStorage(str(tmp_path)))[0]
    shard = tmp_path / only.folder / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    # middle: a tensor's payload, which DCP loads without noticing; start: the first item's
    # zip header, which makes DCP's own read fail before the checksums are in
    data[len(data) // 2 if where == "payload" else 0] ^= 0xFF
    shard.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["payload", "header"])
def test_a_flipped_byte_is_refused_and_nothing_else_is_applied(tmp_path, where):
    _only_checkpoint_with_byte_flipped(tmp_path, where)
    fresh = make_state(seed=2, steps=1)
    counters, position = dict(fresh.counters), fresh.data_loader.position
    lr = fresh.scheduler.get_last_lr()
    reader = Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink())
    with pytest.raises(NoUsableCheckpointError, match=r"__0_0\.distcp: checksum mismatch"):
        reader.restore(fresh, verify="full")
    # the checksums were checked before anything but tensors was applied
    assert fresh.counters == counters and fresh.data_loader.position == position
    assert fresh.scheduler.get_last_lr() == lr


def test_sampled_verification_overlaps_too(tmp_path):
    _only_checkpoint_with_byte_flipped(tmp_path, "payload")
    reader = Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink())
    # the shard is under 1 MiB, and `sampled` hashes every small file
    with pytest.raises(NoUsableCheckpointError, match="checksum mismatch"):
        reader.restore(make_state(seed=2), verify="sampled")
