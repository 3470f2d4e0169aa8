"""CHECKPOINTING is a real state: the run is in it while a save of its group is in flight, and
back in RUNNING once the save commits (ARCHITECTURE.md, "Run state machine")."""

from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"


def test_a_save_in_flight_is_checkpointing_and_its_commit_returns_to_running(tmp_path):
    store = Store.open(tmp_path)
    # Saves at steps 3 and 6, each held 5 s before its shards are written: fifty of the
    # controller's 0.1 s polls, so even a pass slowed by a busy machine sees a save in flight.
    spec = spec_from_mapping(
        {
            "name": "checkpointing-state",
            "code": {"entrypoint": str(SCRIPT), "args": ["--save-seconds", "5"]},
            "training": {"global_batch_samples": 8, "steps": 6, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 3}},
            "recovery": {"heartbeat_interval_seconds": 0.5, "progress_timeout_seconds": 60},
        }
    )
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED", final.state_detail
    moves = [
        (e.attributes["from_state"], e.attributes["to_state"], e.seq)
        for e in store.events(run.run_id, types=["STATE_CHANGED"])
    ]
    path = [to for _, to, _ in moves]
    assert path.count("CHECKPOINTING") >= 1
    assert path[-1] == "SUCCEEDED" and path[-2] == "RUNNING"
    # every CHECKPOINTING is entered after a CHECKPOINT_STAGED and left after its commit
    events = store.events(run.run_id)
    for i, (source, target, seq) in enumerate(moves):
        if target != "CHECKPOINTING":
            continue
        assert source == "RUNNING"
        staged = [e for e in events if e.type == "CHECKPOINT_STAGED" and e.seq < seq]
        assert staged, "CHECKPOINTING before any save was staged"
        left = moves[i + 1]
        assert left[1] == "RUNNING"
        committed = [
            e
            for e in events
            if e.type == "CHECKPOINT_COMMITTED" and e.checkpoint_id == staged[-1].checkpoint_id
        ]
        assert committed and committed[0].seq < left[2]
    store.close()
