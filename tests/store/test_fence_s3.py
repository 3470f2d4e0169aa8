"""The store's fence projection when a run's checkpoints live on S3 (a real moto server): the
generation bump raises the run's ObjectFence inside its transaction, `latest` reads the fence's
pointer from the store, and an unreachable fence is an outage the controller rides out
(StoreUnavailableError, the database unchanged), not a crash mid-transition."""

import pytest

from runwright.ckpt import PublishOutcome
from runwright.ckpt.manifest import CommitRecord
from runwright.ckpt.object_fence import ObjectFence
from runwright.errors import StoreUnavailableError
from runwright.store import Outcome, Store
from runwright.store.fence import run_checkpoint_root

pytestmark = pytest.mark.integration


def make_run(store, tmp_path, location):
    run, _ = store.create_run(
        run_id="run-s3",
        name="t",
        spec={"name": "t", "checkpoint": {"location": location}},
        spec_hash="h" * 64,
        plan={},
        workdir=str(tmp_path),
        root=str(tmp_path),
        state="QUEUED",
    )
    return run


def test_the_bump_raises_the_object_fence_and_latest_reads_it(own_s3_server, tmp_path, monkeypatch):
    from runwright_tests_s3_server import new_bucket

    location = f"s3://{new_bucket()}/checkpoints"
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    run = make_run(store, tmp_path, location)
    root = run_checkpoint_root(run)
    assert root == f"{location}/run-s3"
    moved = store.transition("run-s3", "STARTING", allowed_from=["QUEUED"], bump_generation=True)
    assert moved.outcome is Outcome.APPLIED and moved.run.generation == 1
    fence = ObjectFence(root)
    assert fence.current_generation() == 1
    assert store.checkpoints.latest("run-s3") is None
    record = CommitRecord(
        checkpoint_id="g000001-0123456789ab",
        step=4,
        generation=1,
        folder="0000000004-g000001-0123456789ab",
        manifest_sha256="0" * 64,
        committed_unix_seconds=1.0,
    )
    assert fence.publish(record, 1) == PublishOutcome.APPLIED
    latest = store.checkpoints.latest("run-s3")
    assert latest.step == 4 and latest.path == f"{root}/{record.folder}"
    assert not (tmp_path / "runs" / "run-s3" / "checkpoints").exists()

    own_s3_server.stop()
    monkeypatch.setenv("RUNWRIGHT_S3_MAX_ATTEMPTS", "1")
    with pytest.raises(StoreUnavailableError, match="checkpoint fence of run run-s3"):
        store.transition("run-s3", "STARTING", allowed_from=["STARTING"], bump_generation=True)
    assert store.get_run("run-s3").generation == 1, "the transaction rolled back"
    store.close()
