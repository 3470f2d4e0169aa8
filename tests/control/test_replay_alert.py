"""A divergence found after the worker group exited still raises its alert (issue 16), with its
actions. The replay check tells the alert engine of each verdict as it records it, live or on
the run's final pass: first on a real store with the verdict given at the run's end, then (-m
slow: two generations of a real run, 1-3 minutes here) a real run (two ranks under torchrun,
gloo) whose restarted generation replays with a non-deterministic op and exits before the
controller reads a word of it, so the verdict is recorded on the pass that finds the group gone
and no live pass follows."""

import itertools
import os
import signal
import time
from pathlib import Path

import pytest

from runwright.control.alerts import AlertEngine
from runwright.control.controller import Controller
from runwright.control.executors.local_group import generation_tags
from runwright.control.journal import Journal
from runwright.control.processes import processes_tagged
from runwright.control.replay_check import ReplayVerifier
from runwright.events import EventType
from runwright.protocol import ChannelMessage
from runwright.spec import spec_from_mapping
from runwright.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"


def of_type(store, run_id, type_):
    return [e for e in store.events(run_id) if e.type == type_]


def rank_pid(store, run_id, rank, generation):
    (pid,) = [
        int(e.attributes["pid"])
        for e in of_type(store, run_id, "WORKER_STARTED")
        if e.generation == generation and e.attributes["rank"] == rank
    ]
    return pid


STOP_ON_DIVERGENCE = [
    {"name": "diverged_stop", "kind": "recovery_diverged", "threshold": 0.5, "window_steps": 1,
     "action": "stop"},
]  # fmt: skip
_ids = itertools.count()


def reported(generation, step, loss):
    """Both ranks' STEP_HEALTHY of `step` in `generation`."""
    return [
        ChannelMessage(
            event_id=f"m{next(_ids)}",
            type=EventType.STEP_HEALTHY,
            generation=generation,
            rank=rank,
            step=step,
            world_size=2,
            time_unix_s=time.time(),
            attributes={"loss": loss + rank, "samples": [step * 8, step * 8 + 4]},
        )
        for rank in (0, 1)
    ]


@pytest.fixture
def engines(tmp_path):
    """A run record on a real store whose spec stops on a divergence; the controller's wiring
    of the replay check to the alert engine."""
    spec = spec_from_mapping(
        {
            "name": "replay-alert",
            "code": {"entrypoint": "train.py"},
            "training": {"global_batch_samples": 8, "steps": 8},
            "resources": {"devices_per_node": 2},
            "observability": {"alerts": {"defaults": False, "rules": STOP_ON_DIVERGENCE}},
        }
    )
    store = Store.open(tmp_path)
    run, _ = store.create_run(
        run_id="r1", name="r1", spec=spec.model_dump(mode="json"), spec_hash="h" * 64, plan={},
        workdir=str(tmp_path), root=str(tmp_path), state="RUNNING",
    )  # fmt: skip
    journal = Journal(store)
    alerts = AlertEngine(journal)
    replays = ReplayVerifier(journal, on_verdict=alerts.replay_verdict)
    # Generation 1 reported steps 1-6; generation 2 restored step 4 and replayed 5 differently.
    for message in [m for s in range(1, 7) for m in reported(1, s, 1.0 / s)] + reported(2, 5, 9.0):
        replays.observe(run, 2, message)
    yield store, run, spec, alerts, replays
    store.close()


@pytest.mark.replay_diverges
def test_a_verdict_on_the_final_pass_fires_and_says_its_stop_was_not_taken(engines):
    store, run, _, alerts, replays = engines
    replays.close(run)  # the run ended: the controller's final pass (journal.before_finished)
    alerts.close(run, "the run ended SUCCEEDED")
    (diverged,) = store.events("r1", types=[EventType.RECOVERY_DIVERGED])
    (fired,) = store.events("r1", types=[EventType.ALERT_FIRED])
    assert diverged.attributes["step"] == 5
    assert fired.attributes["step"] == 5 and fired.attributes["rule"] == "diverged_stop"
    assert fired.attributes["action_result"].startswith("not taken: the run had ended")
    (cleared,) = store.events("r1", types=[EventType.ALERT_CLEARED])
    assert cleared.attributes["reason"] == "the run ended SUCCEEDED"


@pytest.mark.replay_diverges
def test_a_verdict_between_passes_hands_its_stop_to_the_next_live_pass(engines):
    store, run, spec, alerts, replays = engines
    replays.check(run)  # a pass that read the channel to its end
    (fired,) = store.events("r1", types=[EventType.ALERT_FIRED])
    assert "handed to the controller's next pass" in fired.attributes["action_result"]
    (firing,) = alerts.check(run, spec)  # the next live pass: the controller stops the group
    assert (firing.alert_id, firing.action) == ("diverged_stop", "stop")
    assert alerts.check(run, spec) == []  # handed over once, and not fired again


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.replay_diverges
def test_a_divergence_found_after_the_group_exited_fires_its_alert_and_actions(tmp_path, webhook):
    url, received = webhook
    rules = [
        {"name": "recovery_diverged", "kind": "recovery_diverged", "threshold": 0.5,
         "window_steps": 1, "action": "notify", "webhook": url},
        {"name": "diverged_stop", "kind": "recovery_diverged", "threshold": 0.5,
         "window_steps": 1, "action": "stop"},
    ]  # fmt: skip
    # test_recovery.py's spec: 8 steps, a checkpoint every 4; each process perturbs its inputs
    # by its pid, so the first step replayed after the restore at step 4 differs.
    spec = spec_from_mapping(
        {
            "name": "replay-alert",
            "code": {"entrypoint": str(SCRIPT),
                     "args": ["--step-sleep", "0.2", "--nondeterministic"]},
            "training": {"global_batch_samples": 8, "steps": 8, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 4}, "keep_last": 5},
            "recovery": {"heartbeat_interval_seconds": 0.5, "heartbeat_timeout_seconds": 4,
                         "progress_timeout_seconds": 60},
            "observability": {"alerts": {"defaults": False, "rules": rules}},
        }
    )  # fmt: skip
    holder: dict = {}

    def on_event(event):
        store = holder["store"]
        if event.type == "STEP_HEALTHY" and event.generation == 1 and event.step >= 6:
            if "killed" not in holder:
                holder["killed"] = True
                os.kill(rank_pid(store, event.run_id, 1, 1), signal.SIGKILL)
        elif event.type == "WORKER_STARTED" and event.generation == 2 and "exited" not in holder:
            # Hold the controller (this callback runs in its pass) until every process of
            # generation 2 is gone: it restores step 4, replays 5-8 and exits meanwhile. The
            # bound is generous: the group's own start-up took up to 40 s on a busy machine.
            tags = generation_tags(tmp_path, event.run_id, 2)
            deadline = time.monotonic() + 300
            while processes_tagged(tags):
                assert time.monotonic() < deadline, "generation 2 did not exit in 300 s"
                time.sleep(0.2)
            holder["exited"] = time.time()

    store = holder["store"] = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED", final.state_detail  # no live group was left to stop
    (diverged,) = of_type(store, run.run_id, "RECOVERY_DIVERGED")
    assert diverged.attributes["step"] == 5 and diverged.generation == 2
    assert diverged.time_unix_s >= holder["exited"]  # recorded after the group exited
    fired = {e.attributes["rule"]: e for e in of_type(store, run.run_id, "ALERT_FIRED")}
    assert set(fired) == {"recovery_diverged", "diverged_stop"}
    notify, stop = fired["recovery_diverged"], fired["diverged_stop"]
    assert notify.attributes["step"] == 5 and notify.attributes["generation"] == 2
    assert notify.attributes["action_result"] == f"notified {url}: HTTP 204"
    assert [(p["rule"], p["step"]) for p in received] == [("recovery_diverged", 5)]
    assert "handed to the controller's next pass" in stop.attributes["action_result"]
    cleared = {e.attributes["rule"]: e for e in of_type(store, run.run_id, "ALERT_CLEARED")}
    assert "the run ended SUCCEEDED" in cleared["recovery_diverged"].attributes["reason"]
    assert "`stop` was not taken" in cleared["diverged_stop"].attributes["reason"]
    store.close()
