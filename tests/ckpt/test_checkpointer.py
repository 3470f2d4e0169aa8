"""Checkpointer in one process: round trips, async back-pressure, fencing, corruption, refusal."""

import hashlib
import random

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckpt_helpers import CountingLoader, make_state, params, same_params

from runwright.ckpt import (
    BackgroundSaveError,
    Checkpointer,
    HealthVerdict,
    IncompatibleCheckpointError,
    LocalFence,
    MemorySink,
    NoUsableCheckpointError,
    RestoreMode,
    SaveStatus,
    scan,
)
from runwright.ckpt.storage import CheckpointStorage
from runwright.events import EventType
from runwright.spec.policies import CheckpointIntervalSpec, CheckpointSpec


def _ckpt(root, sink=None, **policy) -> Checkpointer:
    return Checkpointer(str(root), policy=CheckpointSpec(**policy), events=sink or MemorySink())


def test_sync_round_trip_restores_every_stream(tmp_path):
    state = make_state(seed=1, steps=2)
    random.seed(5)
    np.random.seed(6)
    expected = params(state)
    saver = _ckpt(tmp_path)
    result = saver.save(2, state, loss=0.25, health=HealthVerdict.HEALTHY)
    assert result.status == SaveStatus.COMMITTED and result.total_bytes > 0
    draws = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    fresh = make_state(seed=99, steps=0)
    fresh.data_loader = CountingLoader(0)
    restored = _ckpt(tmp_path).restore(fresh, smoke_check=lambda: 0.25)
    assert restored is not None and restored.step == 2 and restored.mode == RestoreMode.EXACT
    assert same_params(fresh, expected)
    assert fresh.data_loader.position == 16 and fresh.counters == state.counters
    assert fresh.scheduler.state_dict()["last_epoch"] == 2
    assert fresh.optimizer.state_dict()["state"][0]["step"] == 2
    assert restored.rng_restored and restored.smoke is not None and restored.smoke.passed
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == draws


def test_manifest_records_keys_files_and_run_facts(tmp_path):
    state = make_state()
    saver = Checkpointer(
        str(tmp_path),
        policy=CheckpointSpec(),
        spec_hash="s" * 64,
        data_manifest_id="d1",
        tokenizer_hash="t1",
        events=MemorySink(),
    )
    saver.save(1, state, loss=1.0)
    (found,) = scan(CheckpointStorage(str(tmp_path)))[0]
    manifest = found.manifest
    assert manifest.logical_keys["model.0.weight"].shape == [64, 64]
    assert manifest.logical_keys["model.0.weight"].dtype == "torch.float32"
    assert "ranks.r0.rng.torch_cpu" in manifest.logical_keys
    assert {f.name for f in manifest.files} >= {".metadata", "__0_0.distcp", "__0_files.json"}
    assert manifest.checksum_algorithm == "xxh3-128"
    assert all(len(f.checksum) == 32 for f in manifest.files)  # 128-bit hex digests
    assert (manifest.spec_hash, manifest.data_manifest_id, manifest.tokenizer_hash) == (
        "s" * 64,
        "d1",
        "t1",
    )
    assert manifest.data_cursor == {"position": 8} and manifest.loss_at_save == 1.0
    assert manifest.world_size == 1 and manifest.parallel_layout == {"dp": 1}


def test_plain_dcp_loads_model_state_without_runwright(tmp_path):
    state = make_state(seed=3)
    _ckpt(tmp_path).save(1, state)
    (found,) = scan(CheckpointStorage(str(tmp_path)))[0]
    target = {"model": {k: torch.zeros_like(v) for k, v in state.model.state_dict().items()}}
    dcp.load(target, checkpoint_id=found.path, no_dist=True)
    for key, value in state.model.state_dict().items():
        assert torch.equal(target["model"][key], value)


def test_async_save_stages_then_commits_and_reports_lag(tmp_path):
    state = make_state()
    saver = _ckpt(tmp_path, mode="async", max_inflight=2)
    queued = saver.save(1, state)
    assert queued.status == SaveStatus.QUEUED and queued.stall_seconds > 0
    with torch.no_grad():
        for p in state.model.parameters():
            p.add_(1.0)  # training continues; the staged copy must not see this
    saver.wait()
    lag = saver.durability_lag()
    assert lag.lag_steps == 0 and lag.inflight == 0 and lag.committed_step == 1
    fresh = make_state(seed=42)
    _ckpt(tmp_path).restore(fresh)
    reference = make_state()
    assert same_params(fresh, params(reference))
    saver.close()


@pytest.mark.parametrize("when_full", ["skip", "block", "sync"])
def test_full_backlog_applies_declared_policy(tmp_path, when_full):
    sink = MemorySink()
    saver = _ckpt(tmp_path, sink, mode="async", max_inflight=1, when_full=when_full)
    state = make_state(width=256)
    gate = __import__("threading").Event()
    original = saver._persist

    def slow_persist(snap, started_perf):
        gate.wait(10)
        return original(snap, started_perf)

    saver._persist = slow_persist
    first = saver.save(1, state)
    assert first.status == SaveStatus.QUEUED
    if when_full == "block":
        __import__("threading").Timer(0.3, gate.set).start()
    else:
        gate.set() if when_full == "sync" else None
    second = saver.save(2, state)
    if when_full == "skip":
        assert second.status == SaveStatus.SKIPPED
        assert sink.of_type(EventType.CHECKPOINT_SKIPPED)
        gate.set()
    elif when_full == "block":
        assert second.status == SaveStatus.QUEUED
    else:
        assert second.status == SaveStatus.COMMITTED
    saver.close()
    steps = {c.record.step for c in scan(CheckpointStorage(str(tmp_path)))[0]}
    assert steps == ({1} if when_full == "skip" else {1, 2})


def test_background_failure_surfaces_at_next_call(tmp_path):
    sink = MemorySink()
    saver = _ckpt(tmp_path, sink, mode="async")
    state = make_state()

    def broken(snap, started_perf):
        raise OSError("disk full")

    saver._persist = broken
    saver.save(1, state)
    with pytest.raises(BackgroundSaveError, match="disk full"):
        saver.wait()
    assert sink.of_type(EventType.CHECKPOINT_FAILED)
    saver.close()


def test_stale_generation_is_rejected_and_recorded(tmp_path):
    fence = LocalFence(str(tmp_path))
    old_generation = fence.advance_generation()
    old_sink, new_sink = MemorySink(), MemorySink()
    old = Checkpointer(str(tmp_path), policy=CheckpointSpec(), fence=fence, events=old_sink)
    new_generation = fence.advance_generation()
    new = Checkpointer(str(tmp_path), policy=CheckpointSpec(), fence=fence, events=new_sink)
    assert (old.generation, new.generation) == (old_generation, new_generation)
    assert new.save(5, make_state(seed=5)).status == SaveStatus.COMMITTED
    stale = old.save(9, make_state(seed=9))
    assert stale.status == SaveStatus.REJECTED_STALE
    assert old_sink.of_type(EventType.STALE_WRITE_REJECTED)
    latest = fence.latest()
    assert latest is not None and latest.step == 5 and latest.generation == new_generation
    fresh = make_state(seed=0)
    assert _ckpt(tmp_path).restore(fresh).step == 5
    assert same_params(fresh, params(make_state(seed=5)))


def test_corrupt_shard_named_by_verify_and_restore_falls_back(tmp_path):
    sink = MemorySink()
    saver = _ckpt(tmp_path)
    saver.save(1, make_state(seed=1))
    saver.save(2, make_state(seed=2))
    committed, _ = scan(CheckpointStorage(str(tmp_path)))
    newest = committed[0]
    shard = tmp_path / newest.folder / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    from runwright.ckpt import verify_checkpoint

    report = verify_checkpoint(CheckpointStorage(str(tmp_path)), newest.path, newest.manifest)
    assert not report.ok and report.problems[0].file == "__0_0.distcp"
    assert "checksum mismatch" in report.problems[0].reason
    fresh = make_state(seed=7)
    restored = _ckpt(tmp_path, sink).restore(fresh)
    assert restored.step == 1 and restored.fallbacks[0].checkpoint_id == newest.record.checkpoint_id
    assert "__0_0.distcp" in restored.fallbacks[0].reason
    assert sink.of_type(EventType.RESTORE_FALLBACK)
    assert same_params(fresh, params(make_state(seed=1)))


def test_truncated_shard_never_loads(tmp_path):
    saver = _ckpt(tmp_path)
    saver.save(1, make_state(seed=1))
    (only,) = scan(CheckpointStorage(str(tmp_path)))[0]
    shard = tmp_path / only.folder / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(NoUsableCheckpointError, match="truncated"):
        _ckpt(tmp_path).restore(make_state(seed=2))


def test_incompatible_model_is_refused_naming_the_mismatch(tmp_path):
    _ckpt(tmp_path).save(1, make_state(width=64))
    with pytest.raises(IncompatibleCheckpointError, match=r"model\.0\.weight"):
        _ckpt(tmp_path).restore(make_state(width=32))


def test_tokenizer_change_is_refused(tmp_path):
    Checkpointer(str(tmp_path), policy=CheckpointSpec(), tokenizer_hash="a").save(1, make_state())
    other = Checkpointer(str(tmp_path), policy=CheckpointSpec(), tokenizer_hash="b")
    with pytest.raises(IncompatibleCheckpointError, match="tokenizer hash a at save, b now"):
        other.restore(make_state())


def test_failed_smoke_check_falls_back(tmp_path):
    saver = _ckpt(tmp_path)
    saver.save(1, make_state(seed=1), loss=1.0)
    saver.save(2, make_state(seed=2), loss=2.0)
    restored = _ckpt(tmp_path).restore(make_state(seed=3), smoke_check=lambda: 1.0)
    assert restored.step == 1 and "smoke check" in restored.fallbacks[0].reason


def test_retention_keeps_last_every_k_and_newest_healthy(tmp_path):
    saver = _ckpt(tmp_path, keep_last=2, keep_every_steps=4)
    state = make_state()
    saver.save(1, state, health=HealthVerdict.HEALTHY)
    for step in range(2, 8):
        saver.save(step, state, health=HealthVerdict.UNHEALTHY)
    steps = sorted(c.record.step for c in scan(CheckpointStorage(str(tmp_path)))[0])
    assert steps == [1, 4, 6, 7]


def test_maybe_save_follows_step_interval(tmp_path):
    saver = _ckpt(tmp_path, interval=CheckpointIntervalSpec(every_steps=3))
    state = make_state()
    saved = [s for s in range(1, 10) if saver.maybe_save(s, state) is not None]
    assert saved == [3, 6, 9]
    assert saver.maybe_save(10, state, stopping=True) is not None


def test_fsspec_object_store_round_trip(tmp_path):
    url = f"memory://rw-{tmp_path.name}/checkpoints"
    fence = LocalFence(str(tmp_path / "fence"))
    state = make_state(seed=4)
    saver = Checkpointer(url, policy=CheckpointSpec(), fence=fence, events=MemorySink())
    assert saver.save(1, state).status == SaveStatus.COMMITTED
    storage = CheckpointStorage(url)
    assert not storage.exists(storage.path("staging"))
    fresh = make_state(seed=8)
    reader = Checkpointer(url, policy=CheckpointSpec(), fence=fence, events=MemorySink())
    assert reader.restore(fresh).step == 1
    assert same_params(fresh, params(make_state(seed=4)))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_committed_event_carries_what_the_run_report_reads(tmp_path, mode):
    sink = MemorySink()
    saver = _ckpt(tmp_path, sink, mode=mode, keep_last=1)
    state = make_state()
    results = [saver.save(step, state) for step in (1, 2)]
    saver.close()
    committed = sink.of_type(EventType.CHECKPOINT_COMMITTED)
    assert [e.step for e in committed] == [1, 2]
    for event, result in zip(committed, results, strict=True):
        attrs = event.attributes
        assert len(attrs["manifest_sha256"]) == 64 and attrs["bytes"] > 0
        assert attrs["persist_seconds"] > 0 and attrs["stall_seconds"] > 0
        if mode == "async":  # the step waited for the host copy only, not for the write
            assert attrs["stall_seconds"] == result.stall_seconds
        else:  # the step waited for the whole commit; retention after it is not counted
            assert attrs["persist_seconds"] < attrs["stall_seconds"] <= result.stall_seconds
    (kept,) = scan(CheckpointStorage(str(tmp_path)))[0]
    latest = committed[-1].attributes
    assert latest["folder"] == kept.folder and latest["bytes"] == kept.manifest.total_bytes
    manifest_bytes = (tmp_path / kept.folder / "manifest.json").read_bytes()
    assert latest["manifest_sha256"] == hashlib.sha256(manifest_bytes).hexdigest()
    assert latest["manifest_sha256"] == kept.record.manifest_sha256
    (deleted,) = sink.of_type(EventType.CHECKPOINT_DELETED)
    assert deleted.attributes["folder"] == committed[0].attributes["folder"]
    assert deleted.attributes["bytes"] > 0 and deleted.attributes["seconds"] >= 0


def test_raise_to_never_lowers_the_generation(tmp_path):
    """The control plane's store raises the fence with every generation bump; a repeated or
    late raise (a crash between the fence write and the database commit, then a retry) is a
    no-op, never a step back that would let a fenced writer publish again."""
    fence = LocalFence(str(tmp_path))
    assert fence.raise_to(3) == 3
    assert fence.raise_to(3) == 3
    assert fence.raise_to(2) == 3
    assert fence.current_generation() == 3 and fence.advance_generation() == 4
