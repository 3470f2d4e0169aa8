"""The watchdog's steady-state limit on a real run (two ranks under torchrun, gloo) on an
oversubscribed machine: a step that computes for several times the limit is slow, not blocked
(control/stall.py clears the suspicion), and the run succeeds with no failure. The blocked case
is the drill's collective_block (tests/drill, -m slow) and tests/control/test_stall.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.control.watchdog import STEADY_FACTOR
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a minute or two of real runs
SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"
HEARTBEAT_TIMEOUT_SECONDS = 4.0


@pytest.fixture
def oversubscribed():
    """Two busy loops per core this process may use, each in a session of its own (as each rank
    is), for the test's duration (tests/control/test_oversubscribed.py)."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(2 * len(os.sched_getaffinity(0)))
    ]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def test_a_long_computing_step_on_a_busy_machine_is_not_a_stall(tmp_path, oversubscribed):
    spec = spec_from_mapping(
        {
            "name": "long-step",
            "code": {
                "entrypoint": str(SCRIPT),
                "args": ["--step-sleep", "0.2", "--busy-at-step", "7", "--busy-seconds", "15"],
            },
            "training": {"global_batch_samples": 8, "steps": 9, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 20}},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_SECONDS,
                "progress_timeout_seconds": 60,
            },
        }
    )
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    failures = [e.attributes for e in store.events(run.run_id, types=["FAILURE_CLASSIFIED"])]
    assert final.state == "SUCCEEDED" and failures == [], (final.state_detail, failures)
    # The premise: step 7 stalled past the steady-state limit the watchdog derived (so the
    # suspicion was raised, and cleared by the CPU rank 0 used), well under the 60 s cap.
    at = {e.step: e.time_unix_s for e in per_rank(store.events(run.run_id, types=["STEP_HEALTHY"]))
          if e.attributes.get("rank", 0) == 0}  # fmt: skip
    gaps = sorted(at[s] - at[s - 1] for s in range(2, 7))
    limit = max(HEARTBEAT_TIMEOUT_SECONDS, STEADY_FACTOR * gaps[-1])  # p95 of five: the max
    assert at[7] - at[6] > limit + 2.0, (at[7] - at[6], limit)
    store.close()
