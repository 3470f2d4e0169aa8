"""The controller under a store outage, with real torchrun worker groups (gloo, CPU): another
process holds SQLite's exclusive lock past the busy timeout, or the PostgreSQL server is stopped
and restarted, mid-run. The controller keeps going, the run ends SUCCEEDED, every step the
workers reported is stored exactly once, and the outage is recorded."""

import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.control.summary import run_summary
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store
from runwright.store.engine import SQLITE_BUSY_TIMEOUT_MS

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"
STEPS = 30
BUSY_TIMEOUT_SECONDS = SQLITE_BUSY_TIMEOUT_MS / 1000
# Longer than two busy timeouts, so at least two passes fail before the lock goes: 12 s.
LOCK_SECONDS = 2 * BUSY_TIMEOUT_SECONDS + 2
POSTGRES_DOWN_SECONDS = 8.0

# Holds SQLite's exclusive lock for argv[2] seconds, as a backup or a migration would.
LOCK_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("UPDATE runs SET updated_unix_s = updated_unix_s")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
print("released", flush=True)
"""


def spec(steps=STEPS):
    # 30 steps x 0.3 s: the workers train on, and mostly finish, while the store is away.
    return spec_from_mapping(
        {
            "name": "store-outage",
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-sleep", "0.3"]},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 10}, "keep_last": 5},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": 4,
                "progress_timeout_seconds": 60,
            },
        }
    )


def on_first_step(action):
    """Call `action()` once, when the controller has stored the first STEP_HEALTHY."""
    fired = []

    def on_event(event):
        if not fired and event.type == "STEP_HEALTHY":
            fired.append(event)
            action()

    return on_event


def drive_through_outage(tmp_path, store_url, start_outage):
    store = Store(store_url)
    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=on_first_step(start_outage))
    run, _ = controller.submit(spec(), tmp_path)
    return store, controller.drive(run.run_id)


def check_every_step_stored_once(store, run):
    assert run.state == "SUCCEEDED", store.events(run.run_id)[-5:]
    healthy = list(per_rank(store.events(run.run_id, types=["STEP_HEALTHY"])))
    for rank in (0, 1):
        steps = [e.step for e in healthy if e.attributes["rank"] == rank]
        assert steps == list(range(1, STEPS + 1))
    assert run.last_step == STEPS
    assert store.checkpoints.latest(run.run_id).step == STEPS
    (outage,) = store.events(run.run_id, types=["STORE_UNAVAILABLE"])
    types = [e.type for e in store.events(run.run_id)]
    assert types[-1] == "RUN_FINISHED"
    incidents = run_summary(store, run.run_id)["incidents"]
    assert [i["outage_seconds"] for i in incidents if i["type"] == "STORE_UNAVAILABLE"] == [
        outage.attributes["outage_seconds"]
    ]
    return outage, healthy


def test_sqlite_locked_by_another_process_mid_run(tmp_path, caplog):
    holder = {}

    def lock():
        proc = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(tmp_path / "state.db"), str(LOCK_SECONDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout.readline().strip() == "locked"
        holder["proc"], holder["locked_at"] = proc, time.time()

    caplog.set_level(logging.WARNING, logger="runwright.control.outage")
    store, run = drive_through_outage(tmp_path, f"sqlite:///{tmp_path / 'state.db'}", lock)
    proc = holder["proc"]
    assert proc.stdout.readline().strip() == "released" and proc.wait(timeout=30) == 0
    outage, healthy = check_every_step_stored_once(store, run)
    assert outage.attributes["attempts"] >= 2
    assert "database is locked" in outage.attributes["error"]
    assert BUSY_TIMEOUT_SECONDS < outage.attributes["outage_seconds"] < LOCK_SECONDS + 15
    # The workers went on while the store was locked; the channel kept what they reported.
    during = [e for e in healthy if 0 < e.time_unix_s - holder["locked_at"] < LOCK_SECONDS]
    assert len(during) >= 4
    warnings = [r.getMessage() for r in caplog.records]
    assert any("database is locked" in w and "retrying in" in w for w in warnings)
    assert any("the store is back" in w for w in warnings)


def test_postgres_stopped_and_restarted_mid_run(tmp_path, pg_server, caplog):
    restarts = []

    def stop():
        pg_server.stop("fast")
        restart = threading.Timer(POSTGRES_DOWN_SECONDS, pg_server.start)
        restart.start()
        restarts.append((restart, time.time()))

    caplog.set_level(logging.WARNING, logger="runwright.control.outage")
    try:
        store, run = drive_through_outage(tmp_path, pg_server.url, stop)
    finally:
        for restart, _ in restarts:
            restart.join()
    outage, healthy = check_every_step_stored_once(store, run)
    assert outage.attributes["attempts"] >= 2
    assert outage.attributes["outage_seconds"] >= POSTGRES_DOWN_SECONDS - 1
    stopped_at = restarts[0][1]
    during = [e for e in healthy if 0 < e.time_unix_s - stopped_at < POSTGRES_DOWN_SECONDS]
    assert len(during) >= 4
    assert any("unavailable" in r.getMessage() for r in caplog.records)
    store.close()


def test_a_permanent_store_error_stops_the_controller_with_a_message(tmp_path):
    store = Store.open(tmp_path)
    run, _ = Controller(store, tmp_path).submit(spec(steps=2), tmp_path)
    store.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        conn.execute("DROP TABLE events")
    proc = subprocess.run(
        [sys.executable, "-m", "runwright.cli.main", "controller", run.run_id],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RUNWRIGHT_ROOT": str(tmp_path)},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "schema is missing or damaged" in proc.stderr and "no such table" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_submit_on_a_locked_store_fails_with_a_message(tmp_path):
    store = Store.open(tmp_path)
    store.close()
    spec_file = tmp_path / "job.json"
    spec_file.write_text(spec(steps=2).canonical_json())
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(tmp_path / "state.db"), "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        submitted = subprocess.run(
            [sys.executable, "-m", "runwright.cli.main", "submit", str(spec_file), "--detach"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "RUNWRIGHT_ROOT": str(tmp_path)},
        )
    finally:
        proc.kill()
        proc.wait()
    assert submitted.returncode == 2, submitted.stderr[-2000:]
    assert "is unavailable" in submitted.stderr and "database is locked" in submitted.stderr
    assert "Traceback" not in submitted.stderr
