"""Alerts on real runs (issue 15): two ranks under torchrun (gloo), driven by the controller, go
through phases that make each step-based and time-based rule's condition true and then false:
an input stall on every rank, a straggling rank 1, a loss spike, a throughput drop, rank 1
stopped from outside (SIGSTOP) for longer than the heartbeat-gap threshold, and the ETTR of a
run that spent its first seconds starting up. Each rule fires (ALERT_FIRED, naming the rank and
host where it is about one) and clears (ALERT_CLEARED); `runwright status` shows an open alert
while it is open. Then the actions: `stop` ends a run CANCELLED with reason ALERT and a committed
checkpoint; `rollback` restarts it from its newest committed checkpoint, skipping the steps
since, and the run completes. A non-finite loss fires and clears across the rollback past it. A
real mixture drifts when one source runs out mid-epoch and comes back with the next epoch.
(durability_lag on a real run: slow checkpoint storage, tests/ckpt/.)"""

import json
import os
import random
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from runwright_tests_tiny import tiny_gpt

from runwright.control.controller import Controller
from runwright.control.summary import describe_run, run_summary
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.spec import spec_from_mapping
from runwright.spec.alerts import DEFAULT_RULES
from runwright.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "alert_phases.py"

pytestmark = pytest.mark.integration


PACED_STEP_SECONDS = 0.15
"""Step time of the stop and rollback runs: the action must reach the group before its last step
(28 steps after the spike, ~4 s), and unpaced (~0.06 s a step) a controller that read the spike
a second late found the group finished."""


def spec_with(rules, steps, phases, defaults=True, every=10, step_seconds=None, keep_last=3):
    args = [arg for phase in phases for arg in ("--phase", phase)]
    if step_seconds is not None:
        args += ["--step-seconds", str(step_seconds)]
    return spec_from_mapping(
        {
            "name": "alerts",
            "code": {"entrypoint": str(SCRIPT), "args": args},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {
                "interval": {"policy": "steps", "every_steps": every},
                "keep_last": keep_last,
            },
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": 60,
                "progress_timeout_seconds": 120,
            },
            "governance": {"owner": "alice"},
            "observability": {"alerts": {"defaults": defaults, "rules": rules}},
        }
    )


def rule(name, kind, threshold, clear_at=None, window=3, clear=3, **more):
    return {"name": name, "kind": kind, "threshold": threshold, "clear_at": clear_at,
            "window_steps": window, "clear_steps": clear, **more}  # fmt: skip


def first_pid_of_rank(store, run_id, rank):
    for e in store.events(run_id, types=[EventType.WORKER_STARTED]):
        if e.attributes.get("rank") == rank and e.attributes.get("host") == socket.gethostname():
            return e.attributes.get("pid")
    return None


def test_each_rule_fires_and_clears_on_a_real_run(tmp_path):
    rules = [
        rule("input_stall", "input_stall", 0.5, 0.25),
        rule("straggler", "straggler", 1.4, 1.2),
        rule("loss_spike", "loss_spike", 3.0, 1.5, window=1),
        rule("throughput_drop", "throughput_drop", 0.5, 0.8),
        rule("heartbeat_gap", "heartbeat_gap", 1.5, window=1, clear=1),
        rule("ettr_below", "ettr_below", 0.3, 0.35, window=1, clear=1),
    ]
    phases = ["stall:13-20", "slow:28-35:1", "spike:42", "slow:48-56"]
    spec = spec_with(rules, 130, phases, defaults=False, every=50)
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    shown: list[str] = []
    stopped = threading.Event()

    def from_outside() -> None:
        """Once step 70 is in: SIGSTOP rank 1 for 3 s (a heartbeat gap), and note what status
        said while the gap's alert was open."""
        watcher = Store.open(tmp_path)
        try:
            while not stopped.is_set():
                if (watcher.get_run(run.run_id).last_step or 0) >= 70:
                    break
                time.sleep(0.05)
            pid = first_pid_of_rank(watcher, run.run_id, 1)
            if pid is None:
                return
            os.kill(pid, signal.SIGSTOP)
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    summary = run_summary(watcher, run.run_id, with_events=False)
                    if any(a["rule"] == "heartbeat_gap" for a in summary["alerts"]):
                        shown.append(describe_run(summary))
                        break
                    time.sleep(0.1)
                time.sleep(0.5)
            finally:
                os.kill(pid, signal.SIGCONT)
        finally:
            watcher.close()

    outside = threading.Thread(target=from_outside, daemon=True)
    outside.start()
    try:
        ended = controller.drive(run.run_id)
    finally:
        stopped.set()
        outside.join(timeout=60)
    assert ended.state == "SUCCEEDED", ended.state_detail
    fired = store.events(run.run_id, types=[EventType.ALERT_FIRED])
    cleared = store.events(run.run_id, types=[EventType.ALERT_CLEARED])
    fired_rules = {e.attributes["rule"] for e in fired}
    assert fired_rules == {r["name"] for r in rules}, [e.attributes for e in fired]
    # Every alert that fired was cleared, and every rule cleared at least once by its exit
    # condition while the run trained. A busy machine may fire a rule again in the run's last
    # seconds (a late heartbeat, a slow last step), and the run's end then clears that one.
    assert len(cleared) == len(fired)
    by_exit: set[str] = set()
    for e in fired:
        (done,) = [c for c in cleared if c.attributes["alert_id"] == e.attributes["alert_id"]
                   and c.seq > e.seq][:1]  # fmt: skip
        if "exit:" in done.attributes["reason"]:
            by_exit.add(e.attributes["rule"])
        else:
            assert done.attributes["reason"] == "the run ended SUCCEEDED", done.attributes
    assert by_exit == fired_rules, ([e.attributes for e in fired], [c.attributes for c in cleared])
    # A busy machine may add alerts of its own (a rank late for a few steps, a heartbeat thread
    # that waited for a core); the staged ones must be among them, about the right rank.
    slowed = [e for e in fired if e.attributes["alert_id"] == "straggler:rank1"
              and 28 <= (e.attributes["at_step"] or 0) <= 40]  # fmt: skip
    assert slowed, [e.attributes for e in fired if e.attributes["rule"] == "straggler"]
    straggler = slowed[0]
    assert (straggler.attributes["rank"], straggler.attributes["host"]) == (1, socket.gethostname())
    assert straggler.attributes["owner"] == "alice" and straggler.attributes["action"] == "none"
    spikes = [e for e in fired if e.attributes["rule"] == "loss_spike"]
    assert any(e.attributes["at_step"] == 42 and e.attributes["value"] > 3.0 for e in spikes)
    gaps = [e for e in fired if e.attributes["rule"] == "heartbeat_gap"]
    assert 1 in {e.attributes["rank"] for e in gaps}
    assert shown and "ALERT [warning] heartbeat_gap: heartbeat gap on rank 1" in shown[0]
    assert not run_summary(store, run.run_id, with_events=False)["alerts"]
    store.close()


def test_a_stop_action_ends_the_run_with_a_save_and_rollback_skips_the_bad_steps(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    # Paced so that the alert's action lands long before the last step even when the controller
    # reads the steps a second or two late (a busy machine).
    stop = spec_with([rule("loss_spike", "loss_spike", 3.0, window=1, action="stop")], 60,
                     ["spike:12"], every=5, step_seconds=PACED_STEP_SECONDS)  # fmt: skip
    run, _ = controller.submit(stop, tmp_path)
    ended = controller.drive(run.run_id)
    assert (ended.state, ended.terminal_reason) == ("CANCELLED", "ALERT")
    assert ended.state_detail.startswith("alert loss_spike: loss spike: loss")
    assert 12 <= ended.last_step < 60
    saved = store.checkpoints.list(run.run_id, status="COMMITTED")
    assert saved[-1].step == ended.last_step  # stopped at a boundary, with a save
    (fired,) = store.events(run.run_id, types=[EventType.ALERT_FIRED])
    assert "asked the group to stop" in fired.attributes["action_result"]
    (closed,) = store.events(run.run_id, types=[EventType.ALERT_CLEARED])
    assert closed.attributes["reason"] == "the run ended CANCELLED"

    # keep_last 10: retention must not have removed the step-10 checkpoint by the time a late
    # alert acts (with 3 kept, the commit at step 25 removes it and the rollback goes to step 0).
    rollback = spec_with([rule("loss_spike", "loss_spike", 3.0, window=1, action="rollback")],
                         40, ["spike:12"], every=5, step_seconds=PACED_STEP_SECONDS,
                         keep_last=10)  # fmt: skip
    run, _ = controller.submit(rollback, tmp_path)
    ended = controller.drive(run.run_id)
    assert ended.state == "SUCCEEDED", ended.state_detail
    (started,) = store.events(run.run_id, types=[EventType.RECOVERY_STARTED])
    first, last = started.attributes["skip_steps"]
    assert first == 11 and last >= 12  # from the checkpoint at step 10, past the spike
    assert "alert loss_spike" in started.attributes["reason"]
    assert not store.events(run.run_id, types=[EventType.FAILURE_CLASSIFIED])  # no failure
    restored = [e for e in store.events(run.run_id, types=[EventType.RESTORED]) if e.generation > 1]
    assert {e.step for e in restored} == {10}
    assert len(store.events(run.run_id, types=[EventType.ALERT_FIRED])) == 1  # skipped: no rerun
    store.close()


def test_a_non_finite_loss_fires_and_clears_across_the_rollback_past_it(tmp_path):
    """Rank 0's loss is NaN at step 15: the step guard refuses it, the group fails, and the run
    restarts from step 10 skipping step 15 (recovery.on_nan: rollback_skip). The default
    non_finite rule fires on the report, naming the rank, and clears once a healthy step past it
    arrives from the restarted group."""
    rules = [r.model_dump() for r in DEFAULT_RULES if r.kind == "non_finite"]
    spec = spec_with(rules, 30, ["nan:15"], defaults=False, every=10)
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    ended = controller.drive(run.run_id)
    assert ended.state == "SUCCEEDED", ended.state_detail
    (nan,) = store.events(run.run_id, types=[EventType.NAN_DETECTED])
    assert (nan.step, nan.attributes["rank"]) == (15, 0)
    (fired,) = store.events(run.run_id, types=[EventType.ALERT_FIRED])
    assert (fired.attributes["rule"], fired.attributes["rank"]) == ("non_finite", 0)
    assert fired.attributes["step"] == 15
    (cleared,) = store.events(run.run_id, types=[EventType.ALERT_CLEARED])
    assert cleared.seq > fired.seq and "exit:" in cleared.attributes["reason"]
    (started,) = store.events(run.run_id, types=[EventType.RECOVERY_STARTED])
    assert started.attributes["skip_steps"] == [15, 15]
    store.close()


def test_a_source_that_runs_out_drifts_the_mixture_and_the_next_epoch_brings_it_back(tmp_path):
    """The reference trainer on two sources weighted 1:1 that `renormalise` when they run out:
    `small` (16 documents) is drawn up in the first ~8 steps of an epoch, then `big` alone fills
    the batches until it is done too and the next epoch starts with both again. With a window of
    2 steps the default mixture_drift rule (0.1 / 0.05) fires on the windows of `big` alone (a
    share of 1.0 against 0.5) and clears on the first window of the next epoch."""
    words = [f"w{i}" for i in range(200)]
    pick = random.Random(0)
    for name, documents in (("big", 48), ("small", 16)):
        lines = [
            json.dumps({"text": " ".join(pick.choice(words) for _ in range(pick.randint(10, 14)))})
            for _ in range(documents)
        ]
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "name: two-sources\n"
        "sources:\n"
        + "".join(
            f"  - {{name: {n}, kind: jsonl-v1, paths: [{n}.jsonl], text_field: text}}\n"
            for n in ("big", "small")
        )
        + "tokenizer: {train: {vocab_size: 300, min_frequency: 1}}\nbuild: {workers: 1}\n"
    )
    dataset = build_dataset(recipe, tmp_path)
    data = tiny_gpt(dataset, steps=24, name="drift", devices=1, every_steps=12)
    data["data"]["mixture"] = {
        "sources": [{"name": n, "weight": 1, "exhaustion": "renormalise"} for n in ("big", "small")]
    }
    # Slow steps so that the controller's passes (every 0.1 s) see each 2-step window.
    data["code"]["args"] = ["--slow-rank", "0", "--slow-seconds", "0.15"]
    data["observability"] = {
        "drift_window_steps": 2,
        "alerts": {
            "defaults": False,
            "rules": [r.model_dump() for r in DEFAULT_RULES if r.kind == "mixture_drift"],
        },
    }
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec_from_mapping(data), tmp_path)
    ended = controller.drive(run.run_id)
    assert ended.state == "SUCCEEDED", ended.state_detail
    windows = store.events(run.run_id, types=[EventType.MIXTURE_WINDOW])
    deviation = {w.attributes["last_step"]: w.attributes["max_deviation"] for w in windows}
    assert deviation[2] < 0.1 and max(deviation.values()) == 0.5
    # Every window counts what it handed out, the one across the epoch boundary included.
    assert all(min(w.attributes["draws"].values()) >= 0 for w in windows)
    assert sum(sum(w.attributes["draws"].values()) for w in windows) > 64  # past one epoch
    fired = store.events(run.run_id, types=[EventType.ALERT_FIRED])
    cleared = store.events(run.run_id, types=[EventType.ALERT_CLEARED])
    assert fired and fired[0].attributes["rule"] == "mixture_drift"
    # It fires on the first window past the threshold: `small` running out inside it.
    opened = fired[0].attributes
    assert opened["value"] > 0.1 and opened["window_steps"][1] == min(
        step for step, value in deviation.items() if value > 0.1
    )
    first_clear = next(c for c in cleared if c.seq > fired[0].seq)
    assert "exit:" in first_clear.attributes["reason"]  # cleared by a window back on target
    drifted = [step for step, value in deviation.items() if value > 0.1]
    recovered = [s for s, v in deviation.items() if v <= 0.05 and s > min(drifted)]
    assert recovered, deviation
    store.close()
