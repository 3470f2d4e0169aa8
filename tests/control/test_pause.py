"""Pause and resume (issue 15, control/pause.py) on real runs under torchrun: an alert whose
action is `pause` stops the run at a step boundary with a save and leaves it PAUSED with nothing
running and its allocation given back; `runwright resume --detach` queues it again and a
background controller restores it from that save; `runwright pause` from another process pauses
it again; `runwright resume` in the foreground drives it to the end. Every step is trained once
and only once across the three generations (a pause loses nothing and repeats nothing), and the
report lists both pauses and both resumes with who asked. A queued run is held at once, and what
cannot be paused or resumed is refused in words."""

import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.control.pause import request_pause, request_resume
from runwright.control.summary import describe_run, run_summary
from runwright.events import EventType
from runwright.govern.report import render_report
from runwright.spec import spec_from_mapping
from runwright.store import Outcome, Store

SCRIPT = Path(__file__).parent / "scripts" / "alert_phases.py"
STEPS = 80
STEP_SECONDS = 0.1
"""80 steps of 0.1 s: the resumed run trains for seconds after the test asks it to pause."""
WAIT_SECONDS = 240.0
"""Bound of a hang for a background controller to reach a state (torchrun start-up on a busy
2-core machine takes tens of seconds); not an expected time."""

pytestmark = pytest.mark.integration
runner = CliRunner()


def _spec(phases: list[str]):
    args = ["--step-seconds", str(STEP_SECONDS)]
    args += [arg for phase in phases for arg in ("--phase", phase)]
    return spec_from_mapping(
        {
            "name": "pause",
            "code": {"entrypoint": str(SCRIPT), "args": args},
            "training": {"global_batch_samples": 16, "steps": STEPS, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 1},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 5}},
            "recovery": {"heartbeat_interval_seconds": 0.5},
            "governance": {"owner": "alice"},
            "observability": {
                "alerts": {
                    "defaults": False,
                    "rules": [
                        {
                            "name": "loss_spike",
                            "kind": "loss_spike",
                            "threshold": 3.0,
                            "window_steps": 1,
                            "action": "pause",
                        }
                    ],
                }
            },
        }
    )


def _cli(root: Path, *argv: str, timeout: float = WAIT_SECONDS) -> subprocess.CompletedProcess:
    """The CLI as a person runs it: another process on the same store."""
    env = {**os.environ, "RUNWRIGHT_SERVER": ""}
    return subprocess.run(
        [sys.executable, "-m", "runwright.cli.main", "--root", str(root), *argv],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


def _wait(store: Store, run_id: str, until, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        run = store.get_run(run_id)
        if until(run):
            return run
        assert time.monotonic() < deadline, f"{what}: still {run.state} at step {run.last_step}"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_pause_and_resume_a_live_run_lose_and_repeat_no_step(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(_spec(["spike:12"]), tmp_path)

    # 1. The alert pauses it: the group saves at a boundary and stops; drive returns.
    paused = controller.drive(run.run_id)
    assert paused.state == "PAUSED", paused.state_detail
    first = paused.last_step
    assert 12 <= first < STEPS
    assert f"paused at step {first}: alert loss_spike: loss spike" in paused.state_detail
    committed = store.checkpoints.list(run.run_id, status="COMMITTED")
    assert committed[-1].step == first  # saved at the pause
    pids = [e.attributes["pid"] for e in store.events(run.run_id, types=[EventType.WORKER_STARTED])]
    assert pids and not any(_alive(p) for p in pids)
    assert store.events(run.run_id, types=[EventType.ALLOCATION_RELEASED])
    summary = run_summary(store, run.run_id, with_events=False)
    assert "next: nothing until a person resumes it" in describe_run(summary)
    assert not summary["alerts"]  # cleared: the run paused
    assert request_pause(store, run.run_id).outcome is Outcome.ALREADY_APPLIED

    # 2. Resumed in the background; paused again from another process while it trains.
    resumed = _cli(tmp_path, "resume", run.run_id, "--detach")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stdout
    _wait(store, run.run_id, lambda r: r.state == "RUNNING" and (r.last_step or 0) >= first + 3,
          "the resumed run trains")  # fmt: skip
    # In this process (a CLI start would take seconds on a busy machine: the run must still be
    # training when the request lands).
    argv = ["--root", str(tmp_path), "pause", run.run_id, "--reason", "look at the curve", "--json"]
    asked = runner.invoke(app, argv, env={"RUNWRIGHT_SERVER": ""})
    assert asked.exit_code == 0, asked.output
    assert json.loads(asked.output)["outcome"] == "APPLIED"
    again = _wait(store, run.run_id, lambda r: r.state == "PAUSED", "the run pauses again")
    second = again.last_step
    me = f"local:{getpass.getuser()}"
    assert f"paused at step {second}: asked by {me} (look at the curve)" in again.state_detail
    assert store.checkpoints.list(run.run_id, status="COMMITTED")[-1].step == second
    assert "already PAUSED" in (request_pause(store, run.run_id).detail or "")

    # 3. Resumed in the foreground: driven here to the end.
    finished = _cli(tmp_path, "resume", run.run_id)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    final = store.get_run(run.run_id)
    assert final.state == "SUCCEEDED" and final.last_step == STEPS

    # Each generation restored the save of the pause before it, and every step was trained once.
    restored = {e.generation: e.step for e in store.events(run.run_id, types=[EventType.RESTORED])}
    assert [restored.get(g) for g in (2, 3)] == [first, second], restored
    trained = [e.step for e in store.events(run.run_id, types=[EventType.STEP_HEALTHY])]
    assert sorted(trained) == list(range(1, STEPS + 1))
    # The spike fired once: a controller that reads the channel from the start after a resume
    # does not judge an older group's steps again (nor pause the run for them a second time).
    fired = store.events(run.run_id, types=[EventType.ALERT_FIRED])
    assert [(e.generation, e.attributes["at_step"]) for e in fired] == [(1, 12)]

    report, _ = render_report(store, run.run_id)
    kinds = [(i.kind, i.actor) for i in report.interventions]
    assert kinds == [("pause", None), ("resume", me), ("pause", me), ("resume", me)], kinds
    store.close()


def test_a_queued_run_is_held_and_what_cannot_pause_is_refused(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(_spec([]), tmp_path)
    controller.reconcile(run.run_id)  # CREATED -> QUEUED (preflight)
    assert store.get_run(run.run_id).state == "QUEUED"
    refused = runner.invoke(app, ["--root", str(tmp_path), "resume", run.run_id],
                            env={"RUNWRIGHT_SERVER": ""})  # fmt: skip
    assert refused.exit_code == 1 and "the run is QUEUED, not PAUSED" in refused.output

    held = runner.invoke(app, ["--root", str(tmp_path), "pause", run.run_id, "--reason", "wait"],
                         env={"RUNWRIGHT_SERVER": ""})  # fmt: skip
    assert held.exit_code == 0, held.output
    assert "is held (PAUSED)" in held.output
    moved = store.get_run(run.run_id)
    assert moved.state == "PAUSED" and moved.state_detail == "held in the queue: wait"
    # A controller sweeping the store leaves a paused run alone and returns at once.
    assert Controller(store, tmp_path, poll_seconds=0.1).drive_all() == []
    assert store.get_run(run.run_id).state == "PAUSED"
    assert not store.events(run.run_id, types=[EventType.WORKER_GROUP_LAUNCHED])

    assert request_resume(store, run.run_id, actor="bob").outcome is Outcome.APPLIED
    assert store.get_run(run.run_id).state == "QUEUED"
    # Held and resumed twice at the same step: four events, not two.
    request_pause(store, run.run_id)
    request_resume(store, run.run_id)
    moves = [(e.attributes["from_state"], e.attributes["to_state"])
             for e in store.events(run.run_id, types=[EventType.STATE_CHANGED])][-4:]  # fmt: skip
    assert moves == [("QUEUED", "PAUSED"), ("PAUSED", "QUEUED")] * 2
    cancelled = runner.invoke(app, ["--root", str(tmp_path), "cancel", run.run_id],
                              env={"RUNWRIGHT_SERVER": ""})  # fmt: skip
    assert cancelled.exit_code == 0, cancelled.output
    late = request_pause(store, run.run_id)
    assert late.outcome is Outcome.INVALID_TRANSITION
    assert "the run is CANCELLED: only a queued or running run can be paused" in late.detail
    store.close()
