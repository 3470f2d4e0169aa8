"""Escalation (control/escalation.py) without worker processes: which failures need a person,
the spec's choice and its error, and the escalation itself against a real SQLite store, real
checkpoint files and a real webhook receiver. A whole run escalating under the controller (the
reference trainer's NaN, then a resume) is test_escalation_run.py."""

import json
from pathlib import Path

import pytest
import torch

from runwright.ckpt import Checkpointer, MemorySink, TrainState
from runwright.ckpt.hold import read_hold
from runwright.ckpt.storage import CheckpointStorage
from runwright.control.allocation import AllocationStep
from runwright.control.controller import Controller
from runwright.control.escalation import (
    RANK_FILE_MAX_BYTES,
    Escalation,
    escalation_reason,
    needs_person,
)
from runwright.control.failures import Classification
from runwright.control.journal import Journal
from runwright.control.pause import request_resume
from runwright.control.policy import Decision, PastFailure
from runwright.control.states import RunState, advance
from runwright.errors import SpecError
from runwright.events import EventType
from runwright.layout import checkpoint_root, run_paths
from runwright.spec import FailureClass, RecoverySpec, spec_from_mapping
from runwright.spec.policies import CheckpointSpec
from runwright.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"


def failure(cls: FailureClass, message: str = "boom", *lines: str) -> Classification:
    return Classification(failure_class=cls, rank=0, message=message, step=4,
                          signature=f"{cls}:x", evidence="test", error_lines=lines)  # fmt: skip


def past(cls: FailureClass) -> PastFailure:
    return PastFailure(failure_class=cls, signature="s", restored_step=0, last_step=4)


RESTART = Decision(action="restart", reason="retry 1/2")


@pytest.mark.parametrize(
    ("now", "history", "lines", "why"),
    [
        (FailureClass.HANG, [FailureClass.HANG], (), "a hang right after a hang"),
        (FailureClass.NO_PROGRESS, [FailureClass.HANG], (), "a hang right after a hang"),
        (FailureClass.HANG, [FailureClass.OOM], (), None),
        (FailureClass.NAN_INF, [FailureClass.NAN_INF], (), "came back after rolling back"),
        (FailureClass.NAN_INF, [], (), None),
        (FailureClass.STORAGE, [], ("NoUsableCheckpointError: no committed",), "verification"),
        (FailureClass.DATA, [], ("PermissionError: [Errno 13] Permission denied",), "permission"),
        (FailureClass.INFRASTRUCTURE, [], ("Connection reset by peer",), None),
        (FailureClass.DATA, [], ("ShardCorruptError: checksum mismatch in shard 3",), None),
    ],
)
def test_which_failures_need_a_person(now, history, lines, why):
    found = needs_person(failure(now, "failed", *lines), [past(h) for h in history])
    assert (found is None) if why is None else (why in (found or ""))


def test_pause_replaces_fail_only_when_the_spec_asks():
    pause, fail = RecoverySpec(on_exhausted="pause"), RecoverySpec()
    exhausted = Decision(action="fail", reason="oom retries exhausted (1 allowed)")
    oom = failure(FailureClass.OOM)
    assert escalation_reason(pause, oom, [], exhausted) == exhausted.reason
    assert escalation_reason(fail, oom, [], exhausted) is None
    preempted = Decision(action="stop", reason="preemption retries exhausted")
    assert escalation_reason(pause, failure(FailureClass.PREEMPTION), [], preempted) is None
    hang = failure(FailureClass.HANG)
    assert "hang" in (escalation_reason(pause, hang, [past(FailureClass.HANG)], RESTART) or "")
    assert escalation_reason(pause, hang, [], RESTART) is None


def test_a_wrong_choice_names_the_field_and_the_choices():
    with pytest.raises(SpecError) as caught:
        spec_from_mapping({"name": "x", "code": {"entrypoint": str(SCRIPT)},
                           "training": {"global_batch_samples": 8, "steps": 4},
                           "recovery": {"on_exhausted": "retry_forever"}})  # fmt: skip
    message = str(caught.value)
    assert "recovery.on_exhausted" in message and "'fail' or 'pause'" in message


def save_two(root: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = TrainState(model=model, optimizer=optimizer)
    saver = Checkpointer(root, policy=CheckpointSpec(keep_last=5), events=MemorySink())
    saver.save(2, state)
    saver.save(4, state)


def test_escalating_pauses_with_held_checkpoints_a_bundle_and_an_alert(tmp_path, webhook):
    url, received = webhook
    spec = spec_from_mapping({
        "name": "escalate", "code": {"entrypoint": str(SCRIPT)},
        "training": {"global_batch_samples": 8, "steps": 4},
        "governance": {"owner": "ana"},
        "recovery": {"on_exhausted": "pause"},
        "observability": {"alerts": {"rules": [
            {"name": "page", "kind": "non_finite", "threshold": 0.5, "action": "notify",
             "webhook": url}]}},
    })  # fmt: skip
    store = Store.open(tmp_path)
    try:
        controller = Controller(store, tmp_path, poll_seconds=0.1)
        run, _ = controller.submit(spec, tmp_path)
        controller.reconcile(run.run_id)  # CREATED -> QUEUED
        for state in (RunState.ALLOCATING, RunState.STARTING, RunState.RECOVERING):
            advance(store, run.run_id, state)
        run = store.get_run(run.run_id)
        paths = run_paths(tmp_path, run.run_id)
        root = checkpoint_root(paths, None)
        save_two(root)
        folder = paths.diagnostics_dir(run.generation)
        folder.mkdir(parents=True)
        (folder / "bundle.json").write_text(json.dumps({"run_id": run.run_id}))
        (folder / "guard-step000000005-rank00000.json").write_text('{"guard": "nan_inf"}')
        (folder / "collectives-rank00001.bin").write_bytes(b"x" * (RANK_FILE_MAX_BYTES + 1))

        journal = Journal(store)
        step = Escalation(store, journal, AllocationStep(store, journal))
        step.escalate(run, spec, failure(FailureClass.OOM, "CUDA out of memory"),
                      "oom retries exhausted (1 allowed)", controller.executor_of(run))  # fmt: skip

        moved = store.get_run(run.run_id)
        assert moved.state == "PAUSED" and "escalated to ana" in (moved.state_detail or "")
        hold = read_hold(CheckpointStorage(root))
        assert hold is not None and len(hold.checkpoint_ids) == 2
        (escalated,) = store.events(run.run_id, types=[EventType.ESCALATED])
        assert escalated.attributes["held_checkpoints"] == hold.checkpoint_ids
        (alert,) = store.events(run.run_id, types=[EventType.ALERT_FIRED])
        assert alert.attributes["owner"] == "ana"
        assert "HTTP 204" in alert.attributes["action_result"]
        assert received[0]["rule"] == "escalation" and received[0]["run_id"] == run.run_id
        bundle = json.loads(paths.diagnostics_bundle(run.generation).read_text())
        assert bundle["run_id"] == run.run_id  # recovery's bundle, completed
        assert bundle["escalation"]["reason"] == "oom retries exhausted (1 allowed)"
        assert bundle["topology"]["world_size"] == spec.resources.world_size
        files = {f["name"]: f for f in bundle["rank_files"]}
        assert files["guard-step000000005-rank00000.json"]["content"] == {"guard": "nan_inf"}
        assert files["collectives-rank00001.bin"]["content"] is None  # over the bound: listed

        assert request_resume(store, run.run_id).outcome == "APPLIED"
        assert read_hold(CheckpointStorage(root)) is None
    finally:
        store.close()
