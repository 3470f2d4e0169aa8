"""The reference trainer under the controller with its dataset and checkpoints on S3 (a real moto
server, tests/s3_server.py): it trains from an `s3://` dataset, checkpoints to
`checkpoint.location: s3://...`, loses a rank to SIGKILL at a random step after its first commit,
resumes from the object store, and ends bitwise-equal to an uninterrupted run of the same spec.
A worker that cannot reach its store fails with class `storage`, within the bounded retries."""

import random
import threading
from pathlib import Path

import pytest
import yaml

from runwright.ckpt import inventory as inv
from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.layout import run_paths
from runwright.remote import open_filesystem
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2] / "examples"
TINY_GPT = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "tiny_gpt.yaml"
EVERY = 4


@pytest.fixture
def s3_dataset(s3_bucket, tmp_path, monkeypatch):
    """The tiny example dataset, built locally and uploaded to `<bucket>/datasets/<id>`; each
    node's cache of it goes under tmp_path."""
    monkeypatch.setenv("RUNWRIGHT_DATA_CACHE", str(tmp_path / "node-cache"))
    built = build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path / "built")
    url = f"{s3_bucket}/datasets/{built.manifest.dataset_id}"
    fs, path = open_filesystem(url)
    for item in sorted(built.folder.iterdir()):
        if item.is_file():
            fs.put_file(str(item), f"{path}/{item.name}")
    return url, built.manifest


def spec_for(dataset_url, manifest, location, *, steps=10, env=None, storage_retries=None):
    data = yaml.safe_load(TINY_GPT.read_text())
    data["model"]["vocab_size"] = manifest.tokenizer.vocab_size
    data["data"].update(
        dataset=dataset_url,
        manifest_id=manifest.dataset_id,
        sequence_length=32,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=4, micro_batch_size=2, steps=steps)
    data["training"]["schedule"]["warmup_steps"] = 2
    data["code"]["args"] = ["--step-sleep", "0.3"]
    data["checkpoint"].update(
        location=location, interval={"policy": "steps", "every_steps": EVERY}, keep_last=2
    )
    data["checkpoint"].pop("keep_every_steps", None)
    if env:
        data["environment"] = {"env": env}
    if storage_retries is not None:
        data["recovery"]["policies"] = {"storage": {"max_retries": storage_retries}}
    return spec_from_mapping(data)


def rank_pid(store, run_id, rank, generation):
    for event in store.events(run_id, types=[EventType.WORKER_STARTED]):
        if event.generation == generation and event.attributes["rank"] == rank:
            return int(event.attributes["pid"])
    raise AssertionError(f"no WORKER_STARTED for rank {rank} of generation {generation}")


def kill_after_first_commit(store, rng):
    """An on_event hook: after generation 1's first commit at step c, SIGKILL rank 1 once when
    rank 0 reports a step drawn from (c, c + EVERY/2], so recovery replays real steps."""
    import os
    import signal

    plan: dict[str, int] = {}

    def on_event(event) -> None:
        if event.generation != 1 or "done" in plan:
            return
        if event.type == EventType.CHECKPOINT_COMMITTED and "at" not in plan:
            plan["at"] = int(event.step or 0) + rng.randint(1, EVERY // 2)
        elif (
            event.type == EventType.STEP_HEALTHY
            and "at" in plan
            and event.attributes.get("rank") == 0
            and (event.step or 0) >= plan["at"]
        ):
            os.kill(rank_pid(store, event.run_id, 1, 1), signal.SIGKILL)
            plan["done"] = int(event.step or 0)

    return on_event, plan


def test_trains_from_s3_checkpoints_to_s3_survives_a_kill_bitwise(s3_dataset, s3_bucket, tmp_path):
    url, manifest = s3_dataset
    location = f"{s3_bucket}/checkpoints"
    spec = spec_for(url, manifest, location)
    store = Store.open(tmp_path)
    reference, _ = Controller(store, tmp_path).submit(spec, tmp_path, idempotency_key="reference")
    uninterrupted = threading.Thread(
        target=Controller(Store.open(tmp_path), tmp_path, poll_seconds=0.1).drive,
        args=(reference.run_id,),
        daemon=True,
    )
    uninterrupted.start()
    hook, plan = kill_after_first_commit(store, random.Random())
    controller = Controller(store, tmp_path, poll_seconds=0.05, on_event=hook)
    run, _ = controller.submit(spec, tmp_path, idempotency_key="killed")
    final = controller.drive(run.run_id)
    uninterrupted.join(timeout=600)

    assert final.state == "SUCCEEDED", store.events(run.run_id)[-5:]
    assert "done" in plan, "the fault was never injected"
    (failure,) = store.events(run.run_id, types=[EventType.FAILURE_CLASSIFIED])
    assert failure.attributes["failure_class"] == "node_lost"
    (recovered,) = store.events(run.run_id, types=[EventType.RECOVERY_SUCCEEDED])
    assert recovered.attributes["restored_step"] % EVERY == 0
    assert recovered.attributes["restored_step"] < plan["done"]
    assert store.get_run(reference.run_id).state == "SUCCEEDED"
    verdict = compare_runs(store, reference.run_id, run.run_id)
    assert verdict.equivalence == "bitwise-equal", verdict

    # The checkpoints are on S3, where the run's resolution says; nothing went to the run folder.
    root = f"{location}/{run.run_id}"
    latest = store.checkpoints.latest(run.run_id)
    assert latest.step == 10 and latest.path == f"{root}/{latest.path.rsplit('/', 1)[-1]}"
    assert not run_paths(tmp_path, run.run_id).checkpoints.exists()
    assert inv.checkpoint_root(run.run_id, tmp_path) == root
    listed = inv.inventory(root)
    assert [row.step for row in listed.committed] == [10, 8]
    assert listed.committed[0].latest and listed.generation == final.generation + 1
    assert inv.verify(root, "latest", "full").ok


def test_a_worker_that_cannot_reach_its_store_fails_as_storage(
    s3_dataset, s3_bucket, tmp_path, time_bound
):
    """The ranks get an endpoint where nothing listens (the controller keeps the real one):
    their first read of the dataset gives up after the bounded retries, and the run ends FAILED
    with failure class `storage` and a message naming the endpoint, not a hang."""
    url, manifest = s3_dataset
    dead = "http://127.0.0.1:9"  # the discard port: nothing answers there
    env = {"AWS_ENDPOINT_URL": dead, "RUNWRIGHT_S3_MAX_ATTEMPTS": "2"}
    spec = spec_for(url, manifest, f"{s3_bucket}/checkpoints", env=env, storage_retries=0)
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    with time_bound(300):
        final = controller.drive(run.run_id)
    assert final.state == "FAILED", store.events(run.run_id)[-5:]
    (failure,) = store.events(run.run_id, types=[EventType.FAILURE_CLASSIFIED])
    assert failure.attributes["failure_class"] == "storage", failure.attributes
    assert "DataStorageError" in failure.attributes["message"]
    assert dead in failure.attributes["message"]
