"""What the Checkpointer does when checkpoint storage times out, fills up or turns read-only
mid-save (issue 16), in one process through the fault-injecting file system (faultfs.py) on real
files: the failed save is reported (CHECKPOINT_FAILED with the errno), no partial checkpoint
becomes visible, the latest pointer keeps naming the last good checkpoint, retention never
deletes it (nor fails a commit when a delete is refused), `on_save_failure` is honoured, and a
save that hangs past `checkpoint.save_timeout_seconds` stops the checkpointer, whatever the
policy says. The same faults on real torchrun runs: tests/control/test_storage_faults_live.py."""

import errno
import threading
import time
from pathlib import Path

import pytest
from ckpt_helpers import make_state, params, same_params

from runwright.ckpt import (
    Checkpointer,
    CheckpointStorageError,
    MemorySink,
    SaveStatus,
    faultfs,
    scan,
    start_generation,
)
from runwright.ckpt.faultfs import Fault
from runwright.ckpt.fence import open_fence
from runwright.ckpt.inventory import inventory
from runwright.ckpt.manifest import COMMIT_FILE
from runwright.ckpt.storage import CheckpointStorage
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec


@pytest.fixture
def drill(tmp_path, monkeypatch):
    """(checkpoint root URL, control file): a `faulty+file://` root with nothing armed."""
    control = tmp_path / "faults.json"
    monkeypatch.setenv(faultfs.CONTROL_ENV, str(control))
    return f"faulty+file://{tmp_path}/ckpt", control


def saver(root: str, sink: MemorySink, **policy) -> Checkpointer:
    fence = open_fence(root)
    start_generation(fence, CheckpointStorage(root))
    return Checkpointer(root, policy=CheckpointSpec(**policy), fence=fence, events=sink)


def folder(root: str) -> Path:
    return Path(faultfs.inner_url(root).removeprefix("file://"))


def committed_steps(root: str) -> list[int]:
    return sorted(c.record.step for c in scan(CheckpointStorage(root))[0])


def failures(sink: MemorySink) -> dict[int, dict]:
    return {e.step: e.attributes for e in sink.of_type(EventType.CHECKPOINT_FAILED)}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_skip_trains_past_a_timeout_a_full_volume_and_a_read_only_commit(drill, mode):
    root, control = drill
    sink = MemorySink()
    ckpt = saver(root, sink, mode=mode, on_save_failure="skip", keep_last=1)
    ckpt.save(1, make_state(seed=1))
    ckpt.wait()
    faultfs.arm(
        control,
        Fault(kind="timeout", seconds=0.2, path="*/0000000002-*", times=1),
        Fault(kind="full", path="*/0000000003-*", times=1),
        # mid-save: the volume turns read-only once the shards are written, so DCP's metadata
        # rename, the manifest, the commit marker and the cleanup of the folder are refused
        Fault(kind="read_only", path="*/0000000004-*", operations=["put", "mutate"]),
    )
    for step in (2, 3, 4):
        result = ckpt.save(step, make_state(seed=step))
        ckpt.wait()
        assert result.status == (SaveStatus.FAILED if mode == "sync" else SaveStatus.QUEUED)
    failed = failures(sink)
    assert {step: failed[step]["errno"] for step in failed} == {
        2: errno.ETIMEDOUT, 3: errno.ENOSPC, 4: errno.EROFS,
    }  # fmt: skip
    assert all(f["on_save_failure"] == "skip" and f["mode"] == mode for f in failed.values())
    assert "Read-only file system (injected" in failed[4]["cause"]
    # nothing of the failed saves became a checkpoint; keep_last=1 kept the last good one
    assert committed_steps(root) == [1] and open_fence(root).latest().step == 1
    folders = {p.name[:10] for p in folder(root).iterdir()}
    assert "0000000002" not in folders and "0000000003" not in folders  # removed at once
    (leftover,) = folder(root).glob("0000000004-*")
    assert not (leftover / COMMIT_FILE).exists() and list(leftover.glob("__0_*.distcp"))
    listed = inventory(root)  # what `runwright ckpt list` shows of a drill's root
    assert listed.latest.step == 1 and [c.step for c in listed.committed] == [1]
    assert leftover.name in {u.folder for u in listed.uncommitted}
    faultfs.disarm(control)
    assert ckpt.save(5, make_state(seed=5)).status != SaveStatus.FAILED
    ckpt.close()
    assert committed_steps(root) == [5] and open_fence(root).latest().step == 5
    # the read-only residue is GC's once its generation is fenced by the next start
    _, report = start_generation(open_fence(root), CheckpointStorage(root))
    assert leftover.name in report.removed


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stop_raises_and_a_restart_restores_the_last_good_checkpoint(drill, mode):
    root, control = drill
    sink = MemorySink()
    ckpt = saver(root, sink, mode=mode)
    ckpt.save(1, make_state(seed=1))
    ckpt.wait()
    faultfs.arm(control, Fault(kind="full", times=1))
    with pytest.raises(CheckpointStorageError, match="No space left on device") as raised:
        ckpt.save(2, make_state(seed=2))
        ckpt.wait()
    assert raised.value.failure.errno == errno.ENOSPC and raised.value.failure.volume_full
    assert failures(sink)[2]["on_save_failure"] == "stop"
    ckpt.close()
    assert committed_steps(root) == [1]
    restarted = saver(root, MemorySink())
    fresh = make_state(seed=9)
    assert restarted.restore(fresh).step == 1
    assert same_params(fresh, params(make_state(seed=1)))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_save_past_its_timeout_stops_the_checkpointer_whatever_the_policy(drill, mode):
    """The write blocks 1.5 s and the save may take 0.3 s: the save raises ETIMEDOUT at 0.3 s
    under `skip`, reports once, and every later call raises it again; the pointer never moved."""
    root, control = drill
    sink = MemorySink()
    ckpt = saver(root, sink, mode=mode, on_save_failure="skip", save_timeout_seconds=0.3)
    ckpt.save(1, make_state(seed=1))
    ckpt.wait()
    faultfs.arm(control, Fault(kind="timeout", seconds=1.5, times=1))
    started = time.monotonic()
    with pytest.raises(CheckpointStorageError, match=r"past checkpoint\.save_timeout_seconds=0\.3"):
        ckpt.save(2, make_state(seed=2))
        ckpt.wait()
    assert 0.3 <= time.monotonic() - started < 1.5
    for later in (lambda: ckpt.save(3, make_state(seed=3)), ckpt.wait, ckpt.close):
        with pytest.raises(CheckpointStorageError, match=r"\[Errno 110\] Connection timed out"):
            later()
    # the stuck write fails at last, on its daemon thread; it adds no second report
    for thread in threading.enumerate():
        if thread.name.startswith("runwright-ckpt"):
            thread.join(timeout=30)
    (only,) = sink.of_type(EventType.CHECKPOINT_FAILED)
    assert only.step == 2 and only.attributes["errno"] == errno.ETIMEDOUT
    assert only.attributes["on_save_failure"] == "stop"
    assert committed_steps(root) == [1] and open_fence(root).latest().step == 1


def test_a_delete_storage_refuses_is_reported_and_the_commit_stands(drill):
    root, control = drill
    sink = MemorySink()
    ckpt = saver(root, sink, keep_last=1)
    ckpt.save(1, make_state(seed=1))
    faultfs.arm(control, Fault(kind="read_only", path="*/0000000001-*"))
    assert ckpt.save(2, make_state(seed=2)).status == SaveStatus.COMMITTED
    (refused,) = sink.of_type(EventType.RETENTION_FAILED)
    assert refused.attributes["folder"].startswith("0000000001-")
    assert refused.attributes["committed"] and "Read-only" in refused.attributes["error"]
    assert committed_steps(root) == [1, 2] and open_fence(root).latest().step == 2
    faultfs.disarm(control)
    ckpt.save(3, make_state(seed=3))  # the next commit's retention tries again
    assert committed_steps(root) == [3]
    assert len(sink.of_type(EventType.CHECKPOINT_DELETED)) == 2
    ckpt.close()


@pytest.mark.slow
@pytest.mark.integration
def test_the_drill_wraps_an_object_store_too(s3_bucket, tmp_path, monkeypatch):
    """`faulty+s3://` on a real S3-compatible server (moto): the fence is the bucket's
    FENCE.json, never faulted; a refused COMMITTED put leaves no checkpoint behind."""
    control = tmp_path / "faults.json"
    monkeypatch.setenv(faultfs.CONTROL_ENV, str(control))
    root = f"faulty+{s3_bucket}/runs/drill"
    sink = MemorySink()
    ckpt = saver(root, sink, on_save_failure="skip")
    ckpt.save(1, make_state(seed=1))
    faultfs.arm(control, Fault(kind="read_only", path="*/COMMITTED"))
    assert ckpt.save(2, make_state(seed=2)).status == SaveStatus.FAILED
    assert failures(sink)[2]["errno"] == errno.EROFS
    assert committed_steps(root) == [1] and open_fence(root).latest().step == 1
    assert not CheckpointStorage(root).exists(f"{root}/{folder_of(sink, 2)}")
    faultfs.disarm(control)
    assert ckpt.save(3, make_state(seed=3)).status == SaveStatus.COMMITTED
    ckpt.close()
    assert committed_steps(f"{s3_bucket}/runs/drill") == [1, 3]


def folder_of(sink: MemorySink, step: int) -> str:
    (staged,) = [e for e in sink.of_type(EventType.CHECKPOINT_STAGED) if e.step == step]
    return f"{step:010d}-{staged.checkpoint_id}"
