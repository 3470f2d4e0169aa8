"""Precision and the spike guard's state in one process (issue 18): the fp16 gradient scaler's
state and the precision go through a real checkpoint (DCP files, the allow-listed unpickler) and
come back; bf16 autocast computes the reference GPT in bf16 with fp32 parameters; the guard's
decision and its window round-trip. The fp16 training path itself needs a GPU (the spec refuses
fp16 on CPU, test_layouts.py): unmeasured here."""

import torch

from runwright.ckpt import Checkpointer, MemorySink, TrainState
from runwright.spec import LossSpikeSpec, ModelSpec
from runwright.spec.policies import CheckpointSpec
from runwright.train.model import GPT
from runwright.train.precision import Precision, PrecisionRecord
from runwright.train.spike import SpikeGuard


def test_the_scaler_and_the_precision_round_trip_through_a_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=3)
    for poison in (float("inf"), 1.0, 1.0):  # one overflow halves the scale; two steps grow it
        scaler.scale(model(torch.ones(1, 8)).sum() * poison).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    saved = scaler.state_dict()
    assert saved["scale"] == 2.0**11 and saved["_growth_tracker"] == 2
    record = PrecisionRecord("fp16")
    state = TrainState(model=model, optimizer=optimizer, scaler=scaler, extra={"precision": record})
    Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink()).save(3, state)

    fresh_scaler = torch.amp.GradScaler("cpu")
    fresh_record = PrecisionRecord("bf16")
    fresh = TrainState(model=torch.nn.Linear(8, 2), optimizer=None, scaler=fresh_scaler,
                       extra={"precision": fresh_record})  # fmt: skip
    fresh.optimizer = torch.optim.AdamW(fresh.model.parameters(), lr=1e-2)
    restored = Checkpointer(str(tmp_path), policy=CheckpointSpec(), events=MemorySink()).restore(
        fresh
    )
    assert restored is not None and restored.step == 3
    assert fresh_scaler.state_dict() == saved  # the scale it had, not a fresh 65536
    assert fresh_record.saved == "fp16"


def test_bf16_autocast_computes_in_bf16_with_fp32_parameters():
    torch.manual_seed(0)
    model = GPT(ModelSpec(n_layers=1, d_model=32, n_heads=2, vocab_size=64), max_positions=8)
    tokens = torch.randint(0, 64, (2, 8))
    positions, segments = torch.arange(8).expand(2, 8), torch.ones(2, 8, dtype=torch.long)
    with Precision("bf16", torch.device("cpu")).autocast():
        logits = model(tokens, positions, segments)
    assert logits.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())
    exact = model(tokens, positions, segments)
    assert torch.allclose(logits.float(), exact, atol=0.05)  # bf16 keeps ~3 significant digits
    assert Precision("bf16", torch.device("cpu")).scaler is None


def test_the_guard_waits_for_a_full_window_then_refuses_a_spike():
    guard = SpikeGuard(LossSpikeSpec(threshold_ratio=4.0, window_steps=3))
    for loss in (3.0, 2.0):
        assert guard.spiked(100.0) is None  # the window is not full yet
        guard.accept(loss)
    guard.accept(1.0)
    assert guard.spiked(7.9) is None and guard.spiked(8.1) == 2.0  # 4 x mean(3, 2, 1) = 8
    again = SpikeGuard(LossSpikeSpec(threshold_ratio=4.0, window_steps=3))
    again.load_state_dict(guard.state_dict())
    assert again.spiked(8.1) == 2.0
    assert SpikeGuard(LossSpikeSpec(enabled=False, window_steps=1)).spiked(1e9) is None
