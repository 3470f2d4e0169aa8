"""The step loop in one process (no torchrun): phase timeline, the non-finite guard, stop
requests at a step boundary (stop file and SIGTERM), and the channel's deferred telemetry fsync."""

import json
import os
import signal
import time

import pytest
import torch

import runwright.runtime.channel as channel_module
import runwright.runtime.stop
from runwright.control.channel import ChannelReader
from runwright.layout import RunPaths
from runwright.protocol import HEARTBEAT, write_stop_request
from runwright.runtime import init
from runwright.runtime.steploop import LossSpikeError, NonFiniteError


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    """A context outside the control plane, in tmp_path, with the SIGTERM handler restored."""
    monkeypatch.chdir(tmp_path)
    for name in ("RUNWRIGHT_RUN_ID", "RUNWRIGHT_SPEC_FILE", "RUNWRIGHT_RANK_MANIFEST", "RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_PORT", "29601")
    # Read the stop file at every boundary, not at most every 0.5 s.
    monkeypatch.setattr(runwright.runtime.stop, "STOP_FILE_POLL_SECONDS", 0.0)
    previous = signal.getsignal(signal.SIGTERM)
    context = init(heartbeat=False)
    yield context
    context.close()
    signal.signal(signal.SIGTERM, previous)


def messages(ctx, type_):
    return [m for m in ChannelReader(RunPaths(ctx.run_dir).channel).poll() if m.type == type_]


def test_phases_accumulate_into_the_event_and_the_timeline(ctx):
    loop = ctx.step_loop(start_step=0, total_steps=2)
    for step in loop:
        loop.add_phase_seconds("data_wait", 0.25)
        for _ in range(2):  # two micro-batches: the phase adds up
            with loop.phase("forward"):
                time.sleep(0.01)
        loss = torch.tensor(2.0 / step)
        grad_norm = torch.tensor(0.5)
        loop.guard(step, loss=loss, grad_norm=grad_norm)
        loop.complete(step, loss=loss, grad_norm=grad_norm, lr=1e-3, loss_tokens=100)
    loop.close()
    assert loop.stop_request is None

    events = messages(ctx, "STEP_HEALTHY")
    timeline = [json.loads(line) for line in loop.timeline_path.read_text().splitlines()]
    assert [e.step for e in events] == [r["step"] for r in timeline] == [1, 2]
    for event, record in zip(events, timeline, strict=True):
        assert event.attributes == {
            k: v for k, v in record.items() if k not in ("step", "time_unix_s")
        }
        assert record["data_wait_seconds"] == 0.25
        assert 0.02 <= record["forward_seconds"] <= record["step_seconds"]
        assert record["backward_seconds"] == 0.0
        assert record["grad_norm"] == 0.5 and record["lr"] == 1e-3
        assert record["loss_tokens"] == 100
    assert [r["loss"] for r in timeline] == [2.0, 1.0]
    # Every phase of runwright.runtime.steploop.PHASES is reported, even when unused.
    assert {"h2d_seconds", "grad_sync_seconds", "checkpoint_stall_seconds"} <= set(timeline[0])


@pytest.mark.parametrize(
    ("loss", "grad_norm", "what"),
    [(float("nan"), 1.0, "loss"), (1.0, float("inf"), "grad_norm")],
)
def test_guard_refuses_a_non_finite_step(ctx, loss, grad_norm, what):
    loop = ctx.step_loop(start_step=4, total_steps=10)
    step = next(iter(loop))
    with pytest.raises(NonFiniteError) as raised:
        loop.guard(step, loss=torch.tensor(loss), grad_norm=torch.tensor(grad_norm))
    loop.close()
    assert (raised.value.step, raised.value.what) == (5, what)
    assert "was not committed" in str(raised.value)
    [nan] = messages(ctx, "NAN_DETECTED")
    assert nan.step == 5 and nan.attributes["what"] == what
    assert messages(ctx, "STEP_HEALTHY") == []


def test_guard_refuses_a_loss_spike(ctx):
    loop = ctx.step_loop(start_step=0, total_steps=10, spike_factor=3.0)
    loop._spike_window = 2
    for step in loop:
        loss = torch.tensor(1.0 if step < 3 else 10.0)
        if step < 3:
            loop.guard(step, loss=loss)
            loop.complete(step, loss=loss)
            continue
        with pytest.raises(LossSpikeError):
            loop.guard(step, loss=loss)
        break
    loop.close()
    assert [m.step for m in messages(ctx, "LOSS_SPIKE")] == [3]


def test_stop_file_ends_the_loop_at_the_next_boundary_and_hands_over_the_fence(ctx):
    loop = ctx.step_loop(start_step=0, total_steps=10)
    seen = []
    for step in loop:
        seen.append(step)
        loop.complete(step, loss=1.0)
        if step == 2:  # the controller cancels mid-run and has bumped the generation to 3
            write_stop_request(ctx.run_dir, 0, "cancel", save=True, fence_generation=3)
    loop.close()
    assert seen == [1, 2]
    assert loop.stop_request is not None and loop.stop_request.reason == "cancel"
    assert ctx.generation == 3 and ctx.channel.generation == 3
    [ack] = messages(ctx, "STOP_ACKNOWLEDGED")
    assert ack.step == 2 and ack.generation == 3
    assert ack.attributes == {"reason": "cancel", "save": True}


def test_sigterm_becomes_a_preemption_stop_at_the_next_boundary(ctx):
    loop = ctx.step_loop(start_step=0, total_steps=10)
    seen = []
    for step in loop:
        seen.append(step)
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets a flag
        loop.complete(step, loss=1.0)
    loop.close()
    assert seen == [1, 2, 3]
    assert loop.stop_request is not None
    assert (loop.stop_request.reason, loop.stop_request.save) == ("preemption", True)
    assert [(m.step, m.attributes["reason"]) for m in messages(ctx, "STOP_ACKNOWLEDGED")] == [
        (3, "preemption")
    ]
    assert ctx.generation == 0


def test_step_telemetry_is_visible_at_once_and_fsynced_with_the_next_event(ctx, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    loop = ctx.step_loop(start_step=0, total_steps=3)
    for step in loop:
        loop.complete(step, loss=torch.tensor(1.0))
    # Written and flushed (the controller tails the file) but not yet fsynced.
    assert [m.step for m in messages(ctx, "STEP_HEALTHY")] == [1, 2, 3]
    assert synced == []
    ctx.event("CHECKPOINT_COMMITTED", step=3)  # a durable event syncs everything before it
    assert len(synced) == 1
    loop = ctx.step_loop(start_step=3, total_steps=4)
    for step in loop:
        loop.complete(step, loss=torch.tensor(1.0))
    loop.close()
    ctx.channel.heartbeat()  # the telemetry is fresh: not due yet
    assert len(synced) == 1
    # Once it is HEARTBEAT_SYNC_SECONDS old, the heartbeat thread syncs it (not a training step).
    monkeypatch.setattr(channel_module, "HEARTBEAT_SYNC_SECONDS", 0.0)
    ctx.channel.heartbeat()
    assert len(synced) == 2
    ctx.channel.heartbeat()  # nothing pending: a heartbeat alone is never fsynced
    ctx.channel.send(HEARTBEAT)
    assert len(synced) == 2
