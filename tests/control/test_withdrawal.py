"""A dataset withdrawn under a real run, then deleted (issue 25): the reference trainer on one
CPU rank under torchrun, driven by the controller into a real SQLite store.

Withdrawn while the run trains: the lineage query lists the run and its checkpoints, the run is
alerted and stops at a step boundary with a committed checkpoint (its spec's `stop`), a release
of its checkpoint is refused, and its report says the data was withdrawn. Deleted: the folder
and a cached copy are gone, a tombstone stays, the old report still renders and says the data
was deleted, and a new run on it is refused. A run whose spec says `continue` is alerted and
flagged but not stopped."""

import json
import threading
import time

import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt
from typer.testing import CliRunner

from runwright.access.base import local_actor
from runwright.access.datasets import PolicyRefused
from runwright.access.service import Access
from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.control.ingest import Ingestor
from runwright.control.journal import Journal
from runwright.control.withdrawal import WithdrawalWatch
from runwright.data import build_dataset
from runwright.data.format.dataset import cache_copy
from runwright.data.policy import Standing
from runwright.events import EventType
from runwright.govern.release import request_release
from runwright.govern.report import collect_report, render_report
from runwright.layout import run_paths
from runwright.runtime import ChannelWriter
from runwright.spec import spec_from_mapping
from runwright.store import Store
from runwright.store.releases import ReleaseStatus

runner = CliRunner()


def withdraw_once_trained(root, run_id, dataset_id, done: threading.Event, said: list):
    """From outside the controller: once the run has reported its dataset and committed a
    checkpoint, withdraw the dataset (the command's own code path)."""
    store = Store.open(root)
    try:
        deadline = time.monotonic() + 600
        while not done.is_set() and time.monotonic() < deadline:
            if store.inputs.of_run(run_id) and store.checkpoints.list(run_id, "COMMITTED"):
                access = Access(store, root, local_actor())
                said.append(access.dataset_withdraw(dataset_id, reason="licence revoked"))
                return
            time.sleep(0.1)
    finally:
        store.close()


@pytest.mark.integration
def test_a_withdrawn_then_deleted_dataset_reaches_its_run_release_and_report(tmp_path):
    dataset = build_dataset(TINY_DATA, tmp_path)
    dataset_id = dataset.manifest.dataset_id
    data = tiny_gpt(dataset, steps=3000, name="withdrawn", devices=1, every_steps=5)
    data["usage"] = {"purpose": "research", "on_withdrawal": "stop"}
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec_from_mapping(data), tmp_path)
    done, said = threading.Event(), []
    outside = threading.Thread(
        target=withdraw_once_trained, args=(tmp_path, run.run_id, dataset_id, done, said)
    )
    outside.start()
    try:
        ended = controller.drive(run.run_id)
    finally:
        done.set()
        outside.join(timeout=60)
    # The withdrawal's answer: the lineage of every run on the data, with its checkpoints.
    (answer,) = said
    assert answer["policy"]["standing"] == "withdrawn"
    (use,) = answer["lineage"]["runs"]
    assert use["run_id"] == run.run_id and use["checkpoints"]
    # The run: alerted, stopped at a boundary with a save, ended by the alert.
    assert (ended.state, ended.terminal_reason) == ("CANCELLED", "ALERT"), ended.state_detail
    assert ended.state_detail.startswith("alert data_withdrawn: dataset ")
    assert ended.last_step < 3000
    saved = store.checkpoints.list(run.run_id, status="COMMITTED")
    assert saved[-1].step == ended.last_step
    (flag,) = store.events(run.run_id, types=[EventType.DATA_WITHDRAWN])
    assert flag.attributes["dataset_id"] == dataset_id and flag.attributes["reason"] == (
        "licence revoked"
    )
    (alert,) = store.events(run.run_id, types=[EventType.ALERT_FIRED])
    assert (alert.attributes["kind"], alert.attributes["action"]) == ("data_withdrawn", "stop")
    # A release of its checkpoint is refused before anything is exported.
    row = request_release(store, ended, requested_by="local:test")
    assert row.status is ReleaseStatus.BLOCKED
    (gate,) = [g for g in row.gates if g["name"] == "data.policy"]
    assert gate["verdict"] == "fail" and "licence revoked" in gate["evidence"]
    report, _ = collect_report(store, run.run_id)
    (standing,) = report.data_standing
    assert standing.standing is Standing.WITHDRAWN
    # Deleted: the folder and a cached copy go, the tombstone and the evidence stay.
    cache = tmp_path / "node-cache"
    cached = cache_copy(dataset_id, cache)
    cached.mkdir(parents=True)
    (cached / "manifest.json").write_text("{}")
    args = ["data", "delete", dataset_id, "--reason", "retention over", "--cache", str(cache)]
    deleted = runner.invoke(app, [*args, "--root", str(tmp_path), "--json"])
    assert deleted.exit_code == 0, deleted.output
    result = json.loads(deleted.output)
    assert result["tombstone"]["standing"] == "deleted"
    assert result["tombstone"]["reason"] == "retention over"
    assert not dataset.folder.exists() and not cached.exists()
    assert str(dataset.folder) in result["removed"]
    report, html = render_report(store, run.run_id)
    (standing,) = report.data_standing
    assert standing.standing is Standing.DELETED and standing.reason == "retention over"
    assert "deleted by local:" in html and "its shards are gone" in html
    shown = runner.invoke(app, ["report", run.run_id, "--root", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    with pytest.raises(PolicyRefused, match=r"`standing`.*deleted"):
        Access(store, tmp_path, local_actor()).submit(spec_from_mapping(data), workdir=tmp_path)
    store.close()


def test_a_run_that_continues_on_withdrawn_data_is_alerted_and_flagged_once(tmp_path):
    """The watch on a stored run whose rank reported the dataset through the real channel and
    ingest: `continue` raises the alert and the flag once, and never asks for a stop."""
    store = Store.open(tmp_path)
    dataset_id = "a" * 64
    spec = spec_from_mapping(
        {"name": "flagged", "code": {"entrypoint": "train.py"},
         "training": {"global_batch_samples": 4, "steps": 10},
         "usage": {"on_withdrawal": "continue"}}
    )  # fmt: skip
    store.create_run(
        run_id="flagged", name="flagged", spec=spec.model_dump(mode="json"),
        spec_hash=spec.spec_hash, plan={}, workdir=str(tmp_path), root=str(tmp_path),
        state="RUNNING",
    )  # fmt: skip
    store.transition("flagged", "RUNNING", allowed_from=["RUNNING"], bump_generation=True)
    writer = ChannelWriter(run_paths(tmp_path, "flagged").channel, 1, 0, False)
    writer.send(EventType.DATA_STAGE_READY, attributes={"dataset_id": dataset_id})
    writer.close()
    Ingestor(store, store.get_run("flagged")).poll()
    watch = WithdrawalWatch(store, Journal(store))
    run = store.get_run("flagged")
    assert watch.check(run, spec) is False
    assert not store.events("flagged", types=[EventType.ALERT_FIRED])
    said = runner.invoke(
        app, ["data", "withdraw", dataset_id[:12], "--reason", "opt-out", "--root", str(tmp_path)]
    )
    assert said.exit_code == 0, said.output
    assert "withdrawn (policy v1)" in said.output and "run flagged (RUNNING)" in said.output
    watch.forget("flagged")  # look again now, not after CHECK_SECONDS
    assert watch.check(run, spec) is False
    watch.forget("flagged")
    assert watch.check(run, spec) is False  # a new watch records nothing twice
    (alert,) = store.events("flagged", types=[EventType.ALERT_FIRED])
    assert alert.attributes["action"] == "continue" and "opt-out" in alert.attributes["summary"]
    (flag,) = store.events("flagged", types=[EventType.DATA_WITHDRAWN])
    assert flag.attributes["on_withdrawal"] == "continue"
    store.close()


def test_a_queued_run_whose_dataset_is_withdrawn_fails_before_any_allocation(tmp_path):
    """Submit and preflight passed; the dataset is withdrawn while the run waits in the queue:
    the next controller pass fails it (FAILED_PERMANENT) naming the dataset and the field, and
    nothing was admitted, allocated or launched."""
    dataset = build_dataset(TINY_DATA, tmp_path)
    dataset_id = dataset.manifest.dataset_id
    data = tiny_gpt(dataset, steps=10, name="queued", devices=1, every_steps=5)
    data["usage"] = {"purpose": "research"}
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec_from_mapping(data), tmp_path)
    controller.reconcile(run.run_id)  # CREATED -> QUEUED: preflight and the policy pass
    assert store.get_run(run.run_id).state == "QUEUED"
    Access(store, tmp_path, local_actor()).dataset_withdraw(dataset_id, reason="consent revoked")

    controller.reconcile(run.run_id)
    ended = store.get_run(run.run_id)
    assert (ended.state, ended.terminal_reason) == ("FAILED", "FAILED_PERMANENT")
    (finished,) = store.events(run.run_id, types=[EventType.RUN_FINISHED])
    detail = finished.attributes["detail"]
    assert dataset_id[:16] in detail and "`standing`" in detail and "consent revoked" in detail
    states = [e.attributes["to_state"] for e in store.events(run.run_id, types=["STATE_CHANGED"])]
    assert states == ["QUEUED", "FAILED"]
    assert not store.events(run.run_id, types=[EventType.RUN_ADMITTED, EventType.WORKER_STARTED])
    store.close()
