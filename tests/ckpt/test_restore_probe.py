"""Restore validation (ckpt/probe.py) in one process, on real checkpoint files: the probe reading
recorded at save, the check after a load, the fall back to the next older checkpoint when the
newest one's state does not reproduce its reading (drill/probe_damage.py's injector), and a
retention hold (ckpt/hold.py) that keeps what retention would delete."""

import math

import torch
from ckpt_helpers import make_state

from runwright.ckpt import Checkpointer, MemorySink, ModelProbe, ProbeReading, ProbeRecord, scan
from runwright.ckpt.hold import HOLD_FILE, RetentionHold, read_hold, release_hold, write_hold
from runwright.ckpt.probe import judge
from runwright.ckpt.storage import CheckpointStorage
from runwright.drill.probe_damage import falsify_probe_record
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec

BATCH = torch.linspace(-1, 1, 8 * 64).reshape(8, 64)


def probe_of(state) -> ModelProbe:
    return ModelProbe(state.model, lambda: state.model(BATCH).pow(2).mean())


def checkpointer(root, state, sink=None, **policy) -> Checkpointer:
    return Checkpointer(
        str(root),
        policy=CheckpointSpec(**policy),
        events=sink or MemorySink(),
        restore_probe=probe_of(state),
    )


def test_judge_names_what_differs():
    saved = ProbeRecord(loss=2.0, parameter_norm=10.0)
    assert judge(saved, ProbeReading(loss=2.001, parameter_norm=10.0), 1e-2).passed
    far = judge(saved, ProbeReading(loss=6.0, parameter_norm=10.0), 1e-2)
    assert not far.passed and "probe loss 6 after loading, 2 at save" in (far.failure or "")
    norm = judge(saved, ProbeReading(loss=2.0, parameter_norm=20.0), 1e-2)
    assert "parameter norm 20" in (norm.failure or "")
    nan = judge(saved, ProbeReading(loss=math.nan, parameter_norm=10.0), 1e-2)
    assert "nan" in (nan.failure or "")
    bad = judge(saved, ProbeReading(loss=2.0, parameter_norm=10.0, nonfinite_parameters=3), 1e-2)
    assert (bad.failure or "").startswith("3 parameter values")
    assert ProbeReading(loss=math.inf, parameter_norm=1.0).record() is None
    # Another probe batch (a resume onto other data): the loss is not comparable, the norm is.
    other = ProbeRecord(loss=2.0, parameter_norm=10.0, batch="a")
    assert judge(other, ProbeReading(loss=6.0, parameter_norm=10.0, batch="b"), 1e-2).passed
    assert not judge(other, ProbeReading(loss=6.0, parameter_norm=10.0, batch="a"), 1e-2).passed
    assert not judge(other, ProbeReading(loss=2.0, parameter_norm=30.0, batch="b"), 1e-2).passed


def test_probe_leaves_training_mode_and_rng_as_it_found_them():
    state = make_state(seed=3)
    state.model.train()
    before = torch.random.get_rng_state()
    reading = probe_of(state).measure()
    assert state.model.training and torch.equal(torch.random.get_rng_state(), before)
    assert reading.loss > 0 and reading.parameter_norm > 0 and reading.nonfinite_parameters == 0


def test_a_checkpoint_whose_state_does_not_reproduce_its_reading_falls_back(tmp_path):
    state = make_state(seed=1, steps=2)
    saver = checkpointer(tmp_path, state, keep_last=5)
    saver.save(2, state)
    state2 = make_state(seed=1, steps=4)
    saver = checkpointer(tmp_path, state2, keep_last=5)
    saver.save(4, state2)
    storage = CheckpointStorage(str(tmp_path))
    newest = max(scan(storage)[0], key=lambda c: c.record.step)
    assert newest.manifest.probe is not None and newest.manifest.probe.loss > 0
    falsify_probe_record(tmp_path, newest.folder, loss_factor=3.0)

    fresh = make_state(seed=99, steps=0)
    sink = MemorySink()
    result = checkpointer(tmp_path, fresh, sink).restore(fresh)
    assert result is not None and result.step == 2  # step 4's checksums pass; its probe does not
    (fallback,) = result.fallbacks
    assert fallback.step == 4 and fallback.reason.startswith("probe check: probe loss")
    assert result.probe is not None and result.probe.passed
    kinds = [e.type for e in sink.events]
    assert EventType.RESTORE_FALLBACK in kinds and EventType.RESTORE_VALIDATED in kinds
    (validated,) = [e for e in sink.events if e.type == EventType.RESTORE_VALIDATED]
    assert validated.step == 2 and validated.attributes["relative_difference"] == 0.0


def test_a_hold_keeps_what_retention_would_delete(tmp_path):
    state = make_state(seed=1)
    saver = checkpointer(tmp_path, state, keep_last=1)
    saver.save(1, state)
    storage = CheckpointStorage(str(tmp_path))
    (first,) = scan(storage)[0]
    write_hold(storage, RetentionHold(checkpoint_ids=[first.record.checkpoint_id],
                                      reason="escalated", generation=0))  # fmt: skip
    saver.save(2, state)
    saver.save(3, state)
    steps = sorted(c.record.step for c in scan(storage)[0])
    assert steps == [1, 3]  # 2 went (keep_last 1), 1 is held
    assert read_hold(storage) is not None and (tmp_path / HOLD_FILE).is_file()
    assert release_hold(storage) and read_hold(storage) is None
    saver.save(4, state)
    assert sorted(c.record.step for c in scan(storage)[0]) == [4]


def test_an_unreadable_hold_deletes_nothing(tmp_path):
    state = make_state(seed=1)
    saver = checkpointer(tmp_path, state, keep_last=1)
    saver.save(1, state)
    (tmp_path / HOLD_FILE).write_text("{not json")
    saver.save(2, state)
    assert sorted(c.record.step for c in scan(CheckpointStorage(str(tmp_path)))[0]) == [1, 2]
