"""A checkpoint volume that fills up (issue 28), on a real 12 MB tmpfs.

A save that does not fit ends in `CheckpointStorageError` naming bytes needed and free, leaves no
staging folder and no tmp file, and leaves the pointer where it was; `on_save_failure` decides
whether training stops or goes on; a restart frees what GC may before it writes, fails cleanly
while the volume is still full, and restores the last good checkpoint once space is freed.
"""

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ckpt_helpers import make_state, params, same_params

from runwright.ckpt import (
    Checkpointer,
    CheckpointStorageError,
    LocalFence,
    MemorySink,
    SaveStatus,
    scan,
    start_generation,
)
from runwright.ckpt.storage import CheckpointStorage
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec

VOLUME = "12m"
WIDTH = 256  # 256x256 + 256x4 float32 params, x3 with AdamW moments: about 0.8 MB a checkpoint
ROOM_BYTES = 256 << 10  # what a "full" volume leaves: room for small files, not for a save


def unavailable(reason: str) -> None:
    """Skip where a tmpfs cannot be mounted; fail instead under RUNWRIGHT_REQUIRE_TMPFS=1 (CI),
    so the full-volume tests never pass there by checking nothing."""
    if os.environ.get("RUNWRIGHT_REQUIRE_TMPFS") == "1":
        pytest.fail(f"RUNWRIGHT_REQUIRE_TMPFS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture
def volume(tmp_path) -> Iterator[Path]:
    """A fresh 12 MB tmpfs, unmounted afterwards. Needs root (CI runs as root)."""
    mount_point = tmp_path / "volume"
    mount_point.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={VOLUME}", "tmpfs", str(mount_point)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except FileNotFoundError:
        unavailable("no `mount` binary: the full-volume tests mount a 12 MB tmpfs")
    if done.returncode != 0:
        unavailable(
            f"mounting a {VOLUME} tmpfs is not permitted here ({done.stderr.strip()}); the "
            "full-volume tests need root, as in CI"
        )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True, timeout=30)


def _free(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(volume: Path, leave_bytes: int) -> Path:
    """Write a ballast file beside the checkpoint root until `leave_bytes` (0: nothing) are free.
    Real writes: tmpfs allocates pages only for written bytes."""
    ballast = volume / "ballast"
    with open(ballast, "ab") as handle:
        for chunk in (1 << 20, 4096):
            while _free(volume) - leave_bytes >= chunk:
                try:
                    handle.write(b"\0" * chunk)
                    handle.flush()
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    if leave_bytes == 0:
        assert _free(volume) == 0
    return ballast


def _saver(root: Path, sink: MemorySink, **policy) -> Checkpointer:
    fence = LocalFence(str(root))
    start_generation(fence, CheckpointStorage(str(root)))
    return Checkpointer(str(root), policy=CheckpointSpec(**policy), fence=fence, events=sink)


def _no_residue(root: Path) -> None:
    assert list((root / "staging").iterdir()) == [], "the failed save's staging folder stayed"
    assert [p.name for p in root.rglob("*.tmp*")] == []
    (committed,) = scan(CheckpointStorage(str(root)))[0]
    latest = LocalFence(str(root)).latest()
    assert committed.record.step == 1 and latest is not None and latest.step == 1


def _restart_restores_step_1(root: Path) -> None:
    fence = LocalFence(str(root))
    start_generation(fence, CheckpointStorage(str(root)))
    restorer = Checkpointer(str(root), policy=CheckpointSpec(), fence=fence, events=MemorySink())
    fresh = make_state(seed=9, width=WIDTH)
    result = restorer.restore(fresh)
    assert result is not None and result.step == 1
    assert same_params(fresh, params(make_state(seed=1, width=WIDTH)))


def _names_the_full_volume(error: CheckpointStorageError, root: Path) -> None:
    failure = error.failure
    assert failure.volume_full and failure.errno == errno.ENOSPC, failure
    assert failure.bytes_needed is not None and failure.bytes_needed > 700_000
    assert failure.bytes_free is not None and failure.bytes_free < failure.bytes_needed
    assert failure.path.startswith(str(root))
    text = str(error)
    assert (
        "No space left on device" in text and f"needs {failure.bytes_needed / 1e6:.1f} MB" in text
    )
    assert f"{failure.bytes_free / 1e6:.1f} MB free" in text and "Free at least" in text


def _failed_event(sink: MemorySink) -> dict:
    (event,) = sink.of_type(EventType.CHECKPOINT_FAILED)
    attributes = event.attributes
    assert event.step == 2 and attributes["errno"] == errno.ENOSPC
    assert attributes["bytes_needed"] > attributes["bytes_free"] >= 0
    assert attributes["path"] and "No space left" in attributes["cause"]
    return attributes


@pytest.mark.integration
@pytest.mark.parametrize("on_save_failure", ["stop", "skip"])
def test_sync_save_that_does_not_fit(volume, on_save_failure):
    root = volume / "ckpt"
    sink = MemorySink()
    saver = _saver(root, sink, on_save_failure=on_save_failure)
    assert saver.save(1, make_state(seed=1, width=WIDTH)).status == SaveStatus.COMMITTED
    ballast = fill(volume, ROOM_BYTES)
    caught: Exception | None = None
    result = None
    try:  # what a training loop does: PyTorch's CheckpointException would fly past this
        result = saver.save(2, make_state(seed=2, width=WIDTH))
    except Exception as exc:
        caught = exc
    assert _failed_event(sink)["on_save_failure"] == on_save_failure
    if on_save_failure == "stop":
        assert isinstance(caught, CheckpointStorageError), caught
        _names_the_full_volume(caught, root)
    else:
        assert caught is None and result is not None and result.status == SaveStatus.FAILED
        assert result.failure is not None and result.failure.bytes_needed > 700_000
        assert "No space left" in (result.reason or "")
    _no_residue(root)
    ballast.unlink()
    if on_save_failure == "skip":  # training went on; the next save fits again
        assert saver.save(3, make_state(seed=1, width=WIDTH)).status == SaveStatus.COMMITTED
        return
    _restart_restores_step_1(root)


@pytest.mark.integration
@pytest.mark.parametrize("on_save_failure", ["stop", "skip"])
def test_async_save_that_does_not_fit(volume, on_save_failure):
    root = volume / "ckpt"
    sink = MemorySink()
    saver = _saver(root, sink, mode="async", on_save_failure=on_save_failure)
    saver.save(1, make_state(seed=1, width=WIDTH))
    saver.wait()
    ballast = fill(volume, ROOM_BYTES)
    assert saver.save(2, make_state(seed=2, width=WIDTH)).status == SaveStatus.QUEUED
    caught: Exception | None = None
    try:
        saver.wait()
    except Exception as exc:
        caught = exc
    assert _failed_event(sink)["mode"] == "async"
    if on_save_failure == "stop":
        assert isinstance(caught, CheckpointStorageError), caught
        _names_the_full_volume(caught, root)
        assert str(caught).startswith("async checkpoint save of step 2")
    else:
        assert caught is None
    _no_residue(root)
    ballast.unlink()
    if on_save_failure == "skip":
        assert saver.save(3, make_state(seed=1, width=WIDTH)).status == SaveStatus.QUEUED
        saver.close()
        latest = LocalFence(str(root)).latest()
        assert latest is not None and latest.step == 3
        return
    saver.close()
    _restart_restores_step_1(root)


@pytest.mark.integration
def test_restart_on_a_full_volume_fails_cleanly_then_restores(volume):
    root = volume / "ckpt"
    saver = _saver(root, MemorySink())
    saver.save(1, make_state(seed=1, width=WIDTH))
    saver.close()
    ballast = fill(volume, 0)
    with pytest.raises(CheckpointStorageError) as raised:
        start_generation(LocalFence(str(root)), CheckpointStorage(str(root)))
    failure = raised.value.failure
    assert failure.volume_full and failure.bytes_free == 0
    assert failure.path == str(root / "GENERATION")
    assert "Free space on that volume" in str(raised.value) and "0.0 MB free" in str(raised.value)
    assert [p.name for p in root.iterdir() if ".tmp" in p.name] == []
    assert (root / "GENERATION").read_text() == "1\n"
    # the constructor alone (no generation write) still works on the full volume
    Checkpointer(str(root), policy=CheckpointSpec(), events=MemorySink()).close()
    ballast.unlink()
    _restart_restores_step_1(root)


@pytest.mark.integration
def test_start_frees_a_killed_saves_staging_before_writing(volume):
    """A save killed mid-write leaves staging bytes that fill the volume; the next start
    removes them (their generation is fenced by that very start) before it writes."""
    root = volume / "ckpt"
    saver = _saver(root, MemorySink())
    saver.save(1, make_state(seed=1, width=WIDTH))
    saver.close()
    staged = root / "staging" / "g000001-00000000dead"
    staged.mkdir()
    fill(staged, 0)  # the killed writer's shard bytes, on the same volume
    (root / "LATEST.json.tmp-999999999").write_text("")  # an empty file still fits: no blocks
    generation, report = start_generation(LocalFence(str(root)), CheckpointStorage(str(root)))
    assert generation == 2 and "staging/g000001-00000000dead" in report.removed
    assert report.bytes_freed > 10_000_000 and "LATEST.json.tmp-999999999" in report.removed
    _restart_restores_step_1(root)


@pytest.mark.integration
def test_pointer_and_durable_writes_leave_no_tmp_on_a_full_volume(volume):
    root = volume / "ckpt"
    saver = _saver(root, MemorySink())
    saver.save(1, make_state(seed=1, width=WIDTH))
    saver.close()
    fill(volume, 0)
    fence = LocalFence(str(root))
    with pytest.raises(CheckpointStorageError, match="replacing GENERATION failed at"):
        fence.advance_generation()
    storage = CheckpointStorage(str(root))
    target = storage.path("0000000001-" + fence.latest().checkpoint_id, "note.json")
    with pytest.raises(CheckpointStorageError, match="No space left") as raised:
        storage.write_durable(target, b"{}" * 1000)
    assert raised.value.failure.bytes_needed == 2000 and raised.value.failure.bytes_free == 0
    assert [p.name for p in root.rglob("*.tmp*")] == []
    assert (root / "GENERATION").read_text() == "1\n"
