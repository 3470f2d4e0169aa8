"""Runs under the controller, with the controller killed from outside at random times.

The controller's durable writes are the store (run record, attempts, events it ingests from the
workers' channel) and the fence; a kill can land while it launches a generation, in any reconcile
pass, while it ingests, and while it recovers from a lost rank. Every kill is followed by a new
controller on the same store, as `runwright controller` after a crash. Checked afterwards: the run
SUCCEEDED, each generation was launched once, every message the workers wrote is in the store
exactly once (or recorded as a rejected stale write), nothing of the run is left running, and the
run is bitwise-equal to an uninterrupted run of the same spec.
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from harness import wait_gone

from runwright.control.cancel import request_cancel
from runwright.control.channel import ChannelReader
from runwright.control.controller import Controller
from runwright.control.processes import is_alive
from runwright.errors import StoreUnavailableError
from runwright.govern.compare import compare_runs
from runwright.observe.rank_steps import is_folded, reports
from runwright.protocol import HEARTBEAT
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[1] / "control" / "scripts" / "small_train.py"
# Each controller life costs an interpreter start and the run must outlast them all: the run of
# the default sample takes about half a minute here.
DEFAULT_KILLS = 3
# Each supervisor kill costs a new generation (a torchrun start-up and a restore).
SUPERVISOR_KILLS = 2
SLOW_KILLS = int(os.environ.get("RUNWRIGHT_CRASH_KILLS", "1000"))


def spec_for(steps: int, step_sleep: float):
    return spec_from_mapping(
        {
            "name": "crash-run",
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-sleep", str(step_sleep)]},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 4}, "keep_last": 3},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": 20,
                "progress_timeout_seconds": 120,
            },
        }
    )


def patiently(read, *args, **kwargs):
    """A read of the store by the test itself, which waits out a busy store as the controller
    does: on an oversubscribed machine a writer can hold SQLite's lock past the busy timeout."""
    for _ in range(60):
        try:
            return read(*args, **kwargs)
        except StoreUnavailableError:
            time.sleep(1.0)
    return read(*args, **kwargs)


def controller_argv(root: Path, run_id: str) -> list[str]:
    return [sys.executable, "-m", "runwright.cli.main", "controller", run_id, "--root", str(root)]


def measured_startup_seconds(store: Store, root: Path, spec) -> float:
    """How long `runwright controller` takes from exec to the end of its first passes, on a run
    cancelled before it started (so those passes only wind it down)."""
    run, _ = Controller(store, root).submit(spec, root, idempotency_key="startup-probe")
    request_cancel(store, run.run_id, "measures the controller's start-up")
    began = time.monotonic()
    subprocess.run(controller_argv(root, run.run_id), capture_output=True, check=True, timeout=120)
    return time.monotonic() - began


def channel_message_ids(root: Path, run_id: str) -> set[str]:
    """Every non-heartbeat message the workers wrote, as the store names it."""
    reader = ChannelReader(root / "runs" / run_id / "channel")
    return {f"{run_id}:{m.event_id}" for m in reader.poll() if m.type != HEARTBEAT}


def processes_of_run(run_id: str) -> list[int]:
    """Live processes whose environment names this run (the executor sets RUNWRIGHT_RUN_ID)."""
    needle = f"RUNWRIGHT_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and is_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def check_run(store: Store, root: Path, run_id: str, reference_id: str) -> None:
    """SUCCEEDED, one launch per generation, every worker message stored once, nothing of the
    run left running, and bitwise-equal to the uninterrupted reference run."""
    final = store.get_run(run_id)
    assert final.state == "SUCCEEDED", final
    events = store.events(run_id)
    launches = Counter(e.generation for e in events if e.type == "WORKER_GROUP_LAUNCHED")
    attempts = [a.generation for a in store.attempts(run_id)]
    assert sorted(launches) == attempts and set(launches.values()) == {1}, (launches, attempts)
    stored = Counter(e.event_id for e in events)
    # A step's per-rank reports are kept in one row (observe/rank_steps.py): each counts too.
    stored.update(
        f"{run_id}:{report.event_id}" for e in events if is_folded(e) for report in reports(e)
    )
    assert max(stored.values()) == 1
    missing = {
        m
        for m in channel_message_ids(root, run_id)
        if m not in stored and f"stale:{m}" not in stored
    }
    assert not missing, f"messages the workers wrote that never reached the store: {missing}"
    assert wait_gone(lambda: processes_of_run(run_id), 30) == []
    verdict = compare_runs(store, reference_id, run_id)
    assert verdict.equivalence == "bitwise-equal", verdict


def beside(store_root: Path, run_id: str) -> threading.Thread:
    """Drive `run_id` to its end in a thread, with a controller of its own."""
    # A daemon: a failed assertion must end the test, not wait for the other run.
    thread = threading.Thread(
        target=Controller(Store.open(store_root), store_root, poll_seconds=0.1).drive,
        args=(run_id,),
        daemon=True,
    )
    thread.start()
    return thread


def kill_rank_once_started(store: Store, run_id: str, life: subprocess.Popen) -> bool:
    """SIGKILL rank 1 of the run's current generation once the store shows it started, while
    `life` (a controller) runs; False if the life ended or two minutes passed first."""
    deadline = time.monotonic() + 120
    while life.poll() is None and time.monotonic() < deadline:
        generation = patiently(store.get_run, run_id).generation
        for event in patiently(store.events, run_id, types=["WORKER_STARTED"]):
            if event.generation == generation and event.attributes["rank"] == 1:
                try:
                    os.kill(int(event.attributes["pid"]), signal.SIGKILL)
                except ProcessLookupError:
                    continue  # already gone: a new generation's rank comes next
                return True
        time.sleep(0.2)
    return False


def controller_kill_sweep(tmp_path: Path, kills: int, seed: int) -> dict:
    rng = random.Random(seed)
    store = Store.open(tmp_path)
    step_sleep = 0.25
    startup = measured_startup_seconds(store, tmp_path, spec_for(steps=4, step_sleep=step_sleep))
    # Kill times are drawn from [0, 2 x measured start-up]: about half land while the controller
    # starts (imports, opening the store) and the rest inside launch, reconcile, ingest and
    # recovery passes. The run must outlast every life: `kills` lives of window/2 on average,
    # with half as much again to spare, plus ten seconds of steps for the lost rank's recovery.
    window = 2 * startup
    steps = int(kills * window * 0.75 / step_sleep) + 40
    spec = spec_for(steps=steps, step_sleep=step_sleep)
    reference, _ = Controller(store, tmp_path).submit(spec, tmp_path, idempotency_key="reference")
    uninterrupted = beside(tmp_path, reference.run_id)  # the same spec, never interrupted
    run, _ = Controller(store, tmp_path).submit(spec, tmp_path, idempotency_key="killed")
    landed, rank_killed = 0, False
    log = open(tmp_path / "controller.log", "ab")  # noqa: SIM115 - one log for every life
    while landed < kills or not rank_killed:
        life = subprocess.Popen(controller_argv(tmp_path, run.run_id), stdout=log, stderr=log)
        current = patiently(store.get_run, run.run_id)
        trained = (current.last_step or 0) >= 5 or landed >= kills
        if not rank_killed and landed >= kills // 3 and trained:
            # One lost rank, so that later controller kills land in its recovery too. This life
            # lives until the store shows the current generation's rank 1 (short lives on a
            # loaded machine may never ingest it), then the rank is killed under it.
            rank_killed = kill_rank_once_started(store, run.run_id, life)
        try:
            code = life.wait(timeout=rng.uniform(0.0, window))
        except subprocess.TimeoutExpired:
            life.send_signal(signal.SIGKILL)
            life.wait()
            landed += 1
        else:
            assert code == 0, (tmp_path / "controller.log").read_text()[-3000:]
            if patiently(store.get_run, run.run_id).state == "SUCCEEDED":
                break
    done = subprocess.run(
        controller_argv(tmp_path, run.run_id), stdout=log, stderr=log, timeout=600
    )
    log.close()
    uninterrupted.join(timeout=600)
    assert done.returncode == 0, (tmp_path / "controller.log").read_text()[-3000:]
    check_run(store, tmp_path, run.run_id, reference.run_id)
    attempts = [a.generation for a in store.attempts(run.run_id)]
    return {
        "kills": landed,
        "rank_killed": rank_killed,
        "generations": attempts,
        "steps": steps,
        "startup_seconds": round(startup, 2),
    }


def supervisor_kill_sweep(tmp_path: Path, kills: int, seed: int) -> dict:
    """Kill the current generation's supervisor `kills` times, each at `uniform(0, 3 s)` after
    its launch (inside torchrun's start-up, the ranks' restore, training or a save). Each loss is
    the platform's fault: the executor kills what is left of the group, the run restarts from its
    last checkpoint, and the infrastructure retries (set above `kills`) are what it spends."""
    rng = random.Random(seed)
    store = Store.open(tmp_path)
    step_sleep, window = 0.2, 3.0
    # A generation trains at most `window` seconds before its kill: the run outlasts them all.
    steps = int(kills * window / step_sleep) + 40
    spec = spec_for(steps=steps, step_sleep=step_sleep)
    recovery = spec.recovery.model_dump()
    # Room for every kill, restarted at once (the default backoff doubles from 5 s).
    recovery["policies"]["infrastructure"].update(
        max_retries=kills + 1, backoff_seconds=0.2, backoff_max_seconds=1.0
    )
    recovery["max_restarts_without_progress"] = kills + 1
    spec = spec_from_mapping({**spec.model_dump(mode="json"), "recovery": recovery})
    reference, _ = Controller(store, tmp_path).submit(spec, tmp_path, idempotency_key="reference")
    uninterrupted = beside(tmp_path, reference.run_id)
    run, _ = Controller(store, tmp_path).submit(spec, tmp_path, idempotency_key="killed")
    driver = beside(tmp_path, run.run_id)
    attempts_dir = tmp_path / "runs" / run.run_id / "attempts"
    for generation in range(1, kills + 1):
        pid_file = attempts_dir / f"gen{generation:05d}" / "pid"
        deadline = time.monotonic() + 300
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid_file.exists(), f"generation {generation} was never launched"
        time.sleep(rng.uniform(0.0, window))
        supervisor = int(pid_file.read_text().split()[0])
        if is_alive(supervisor):
            os.kill(supervisor, signal.SIGKILL)
    driver.join(timeout=600)
    uninterrupted.join(timeout=600)
    check_run(store, tmp_path, run.run_id, reference.run_id)
    classes = [
        e.attributes.get("failure_class")
        for e in store.events(run.run_id, types=["FAILURE_CLASSIFIED"])
    ]
    assert classes == ["infrastructure"] * kills, classes
    return {"kills": kills, "generations": len(store.attempts(run.run_id)), "steps": steps}


def test_supervisor_killed_at_random_times_still_finishes_bitwise_equal(tmp_path):
    summary = supervisor_kill_sweep(tmp_path, SUPERVISOR_KILLS, seed=7)
    assert summary["generations"] == SUPERVISOR_KILLS + 1, summary


@pytest.mark.slow
@pytest.mark.timeout(14400)
def test_supervisor_killed_many_times_still_finishes_bitwise_equal(tmp_path):
    print(supervisor_kill_sweep(tmp_path, SLOW_KILLS, seed=1007))


def test_controller_killed_at_random_times_still_finishes_bitwise_equal(tmp_path):
    summary = controller_kill_sweep(tmp_path, DEFAULT_KILLS, seed=5)
    assert summary["kills"] >= DEFAULT_KILLS and summary["rank_killed"], summary


@pytest.mark.slow
@pytest.mark.timeout(14400)
def test_controller_killed_many_times_still_finishes_bitwise_equal(tmp_path):
    print(controller_kill_sweep(tmp_path, SLOW_KILLS, seed=1005))
