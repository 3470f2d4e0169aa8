"""Warm standby (issue 20, control/executors/standby.py) on a real run of two ranks under torchrun:
once generation 1 trains, generation 2's group is started beside it and waits, imports done,
without being a launched generation; a rank killed from outside is recovered by activating it
(no process started), and the standby for generation 3 follows. That one is then killed from
outside too, so the next failure is recovered cold from a clean folder; when the run succeeds
nothing of it is left running."""

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.control.executors.local_group import generation_processes, launched_generations
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.spec import spec_from_mapping
from runwright.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "alert_phases.py"
WORLD = 2
WAIT_SECONDS = 240.0
"""Bound of a hang for a standby to be ready or a step to come (a loaded 2-core machine takes
tens of seconds to start torch processes); not an expected time."""

pytestmark = pytest.mark.integration


def _spec():
    return spec_from_mapping(
        {
            "name": "standby",
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-seconds", "0.05"]},
            "training": {"global_batch_samples": 8, "steps": 2000, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": WORLD},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 10}},
            "recovery": {"heartbeat_interval_seconds": 0.5, "warm_standby": True},
        }
    )  # fmt: skip


def _rank_pid(store: Store, run_id: str, generation: int, rank: int) -> int:
    for e in store.events(run_id, types=[EventType.WORKER_STARTED]):
        a = e.attributes
        here = a.get("host") == socket.gethostname()
        if e.generation == generation and a.get("rank") == rank and here:
            return int(a["pid"])
    raise AssertionError(f"no WORKER_STARTED of rank {rank} in generation {generation}")


def _until(what: str, condition):
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_failure_activates_the_warm_standby_and_a_dead_standby_falls_back_to_cold(tmp_path):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(_spec(), tmp_path)
    paths = run_paths(tmp_path, run.run_id)
    seen: dict[str, object] = {}
    errors: list[BaseException] = []

    def ready(generation: int) -> bool:
        attempt = paths.attempt(generation)
        return all(attempt.standby_ready_file(r).exists() for r in range(WORLD))

    def from_outside() -> None:
        watcher = Store.open(tmp_path)
        try:
            # 1. Generation 2 waits beside generation 1, not launched; then rank 1 is killed.
            _until("standby 2 ready", lambda: ready(2))
            seen["launched_with_standby"] = launched_generations(tmp_path, run.run_id)
            seen["processes_of_2"] = len(generation_processes(tmp_path, run.run_id).get(2, []))
            os.kill(_rank_pid(watcher, run.run_id, 1, 1), signal.SIGKILL)
            # 2. Generation 2 trains (warm); its standby for 3 gets ready and is killed.
            _until("standby 3 ready", lambda: ready(3))
            for pid in generation_processes(tmp_path, run.run_id).get(3, []):
                os.kill(pid, signal.SIGKILL)
            restored = watcher.get_run(run.run_id).last_step or 0
            _until("gen 2 trains on", lambda: (watcher.get_run(run.run_id).last_step or 0)
                   > restored + 5)  # fmt: skip
            # 3. The next failure: recovered cold, the dead standby moved aside.
            os.kill(_rank_pid(watcher, run.run_id, 2, 0), signal.SIGKILL)
            _until(
                "gen 3 trains",
                lambda: (
                    watcher.get_run(run.run_id).generation >= 3
                    and (watcher.get_run(run.run_id).last_step or 0) > 0
                ),
            )
            # 4. Then the run is ended (a cancel) well before its last step.
            _until("gen 3 ready standby", lambda: ready(4))
            from runwright.control.cancel import request_cancel

            request_cancel(watcher, run.run_id, "enough")
        except BaseException as exc:
            errors.append(exc)
        finally:
            watcher.close()

    outside = threading.Thread(target=from_outside, daemon=True)
    outside.start()
    ended = controller.drive(run.run_id)
    outside.join(timeout=60)
    assert not errors, errors
    assert ended.state == "CANCELLED", ended.state_detail

    assert seen["launched_with_standby"] == [1]  # the standby is not a launched generation
    assert seen["processes_of_2"] >= 1 + 1 + WORLD  # supervisor, agent, ranks: all started
    launches = {e.generation: e.attributes for e in
                store.events(run.run_id, types=[EventType.WORKER_GROUP_LAUNCHED])}  # fmt: skip
    assert launches[2].get("warm") is True and launches[2]["ready_ranks"] == WORLD
    assert "warm" not in launches[3] and "warm" not in launches[1]
    recovered = store.events(run.run_id, types=[EventType.RECOVERY_SUCCEEDED])
    assert [e.generation for e in recovered] == [2, 3]
    prepared = [e.attributes["standby_generation"]
                for e in store.events(run.run_id, types=[EventType.STANDBY_PREPARED])]  # fmt: skip
    assert prepared == [2, 3, 4]
    dropped = store.events(run.run_id, types=[EventType.STANDBY_DISCARDED])
    discarded = [(e.attributes["generations"], e.attributes["reason"]) for e in dropped]
    assert discarded == [
        ([3], "not launched: its processes ended before it was activated"),
        ([4], "the run is CANCELLED"),
    ]
    # Standby 3 died before it could be used: moved aside, and generation 3 started cold in a
    # clean folder.
    aside = [p.name for p in paths.attempts.iterdir() if ".discarded-" in p.name]
    assert sorted(n.split(".")[0] for n in aside) == ["gen00003", "gen00004"]
    assert not paths.attempt(3).standby_file.exists()
    assert launched_generations(tmp_path, run.run_id) == [1, 2, 3]
    assert generation_processes(tmp_path, run.run_id) == {}  # nothing of the run is left
    store.close()
