"""The walking skeleton on real processes: torchrun, gloo, two ranks, a real SQLite store."""

from pathlib import Path

import pytest
import yaml
from runwright_tests_leftovers import assert_nothing_left

from runwright.control.controller import Controller
from runwright.layout import run_paths
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

SKELETON = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"


def skeleton_spec(**code):
    data = yaml.safe_load(SKELETON.read_text())
    data["training"]["steps"] = 5
    data["code"].update(code)
    return spec_from_mapping(data)


def drive(tmp_path, spec):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, created = controller.submit(spec, tmp_path)
    assert created
    return store, controller.drive(run.run_id)


def test_two_rank_job_succeeds_with_events_in_order(tmp_path):
    store, run = drive(tmp_path, skeleton_spec())
    assert run.state == "SUCCEEDED" and run.terminal_reason == "COMPLETED"
    assert run.generation == 1 and run.last_step == 5
    events = list(per_rank(store.events(run.run_id)))
    changes = [e.attributes["to_state"] for e in events if e.type == "STATE_CHANGED"]
    assert changes == ["QUEUED", "ALLOCATING", "STARTING", "RUNNING", "SUCCEEDED"]
    types = [e.type for e in events]
    assert types[0] == "JOB_SUBMITTED" and types[-1] == "RUN_FINISHED"
    assert types.index("ALLOCATION_READY") < types.index("WORKER_GROUP_LAUNCHED")
    started = {e.attributes["rank"] for e in events if e.type == "WORKER_STARTED"}
    assert started == {0, 1}
    for rank in (0, 1):
        steps = [
            e.step for e in events if e.type == "STEP_HEALTHY" and e.attributes["rank"] == rank
        ]
        assert steps == [1, 2, 3, 4, 5]
    assert all(e.generation == 1 for e in events if e.type == "STEP_HEALTHY")
    (attempt,) = store.attempts(run.run_id)
    assert attempt.exit_code == 0 and attempt.world_size == 2
    manifest = run.rank_manifest
    assert [(e["rank"], e["local_rank"], e["dp"]) for e in manifest] == [(0, 0, 0), (1, 1, 1)]
    assert run.last_heartbeat_unix_s is not None
    assert_nothing_left(store, tmp_path, run.run_id)


def test_failing_worker_is_retried_then_fails_permanently(tmp_path):
    """Exit code 3 at step 3 on rank 1, every time: one retry (user_code allows one), then the
    same signature again stops the run as FAILED_PERMANENT instead of a retry storm. (A raised
    exception takes the same path; its message as the cause is test_root_cause's.)"""
    store, run = drive(tmp_path, skeleton_spec(args=["--fail-at-step", "3", "--fail-rank", "1"]))
    assert run.state == "FAILED"
    assert run.terminal_reason == "FAILED_PERMANENT"
    attempts = store.attempts(run.run_id)
    assert [a.generation for a in attempts] == [1, 2]
    assert all(a.exit_code not in (0, None) for a in attempts)
    assert {a.failure_class for a in attempts} == {"user_code"}
    events = list(per_rank(store.events(run.run_id)))
    classified = [e for e in events if e.type == "FAILURE_CLASSIFIED"]
    assert [e.attributes["exit_code"] for e in classified] == [a.exit_code for a in attempts]
    assert classified[0].attributes["signature"] == classified[1].attributes["signature"]
    assert "injected failure at step 3" in _rank_logs(tmp_path, run.run_id)
    assert events[-1].type == "RUN_FINISHED"
    bundle = run_paths(tmp_path, run.run_id).diagnostics_bundle(2)
    assert "injected failure" in bundle.read_text()
    assert_nothing_left(store, tmp_path, run.run_id)


def test_idempotent_submit_starts_nothing(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path)
    first, created = controller.submit(skeleton_spec(), tmp_path, idempotency_key="k")
    again, created_again = controller.submit(skeleton_spec(), tmp_path, idempotency_key="k")
    assert created and not created_again and again.run_id == first.run_id
    assert again.state == "CREATED" and store.attempts(first.run_id) == []


def _rank_logs(root, run_id):
    logs = run_paths(root, run_id).attempts.rglob("*.log")
    return "".join(p.read_text(errors="replace") for p in logs)
