"""The two-line integration's step boundary (`ctx.step_healthy`) in one process: a stop asked
for by the controller, SIGTERM or Ctrl-C ends the run there with `StopRun`, signals chain to the
handler that was there before, and the step loop keeps its own boundary."""

import os
import signal

import pytest

import runwright
import runwright.runtime.stop
from runwright.control.channel import ChannelReader
from runwright.layout import RunPaths
from runwright.protocol import write_stop_request
from runwright.runtime import init


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture
def make_ctx(tmp_path, monkeypatch, handlers):
    """A context outside the control plane (world size 1), in tmp_path."""
    monkeypatch.chdir(tmp_path)
    for name in ("RUNWRIGHT_RUN_ID", "RUNWRIGHT_SPEC_FILE", "RUNWRIGHT_RANK_MANIFEST", "RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_PORT", "29611")
    monkeypatch.setattr(runwright.runtime.stop, "STOP_FILE_POLL_SECONDS", 0.0)
    made = []

    def make():
        made.append(init(heartbeat=False))
        return made[-1]

    yield make
    for ctx in made:
        ctx.close()


def acknowledged(ctx):
    return [
        (m.step, m.attributes["reason"])
        for m in ChannelReader(RunPaths(ctx.run_dir).channel).poll()
        if m.type == "STOP_ACKNOWLEDGED"
    ]


def run_steps(ctx, total, at_step, action):
    seen = []
    with pytest.raises(runwright.StopRun) as stopped:
        for step in range(1, total + 1):
            seen.append(step)
            if step == at_step:
                action()
            ctx.step_healthy(step, loss=1.0)
    return seen, stopped.value


def test_sigterm_stops_at_the_boundary_with_a_preemption(make_ctx):
    ctx = make_ctx()
    seen, stop = run_steps(ctx, 10, 3, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert seen == [1, 2, 3]
    assert (stop.step, stop.request.reason, stop.exit_code) == (3, "preemption", 143)
    assert isinstance(stop, SystemExit) and not isinstance(stop, Exception)
    assert acknowledged(ctx) == [(3, "preemption")]
    assert not ctx.completed  # a stopped run is not complete: no TRAINING_COMPLETE


def test_ctrl_c_is_a_cancel_and_twice_interrupts(make_ctx):
    # Python's own handler first: a test before this one in the process (a server's, a
    # browser driver's) may have left another, which the context would hand back instead.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctx = make_ctx()
        seen, stop = run_steps(ctx, 10, 2, lambda: os.kill(os.getpid(), signal.SIGINT))
        assert (seen[-1], stop.request.reason, stop.exit_code) == (2, "cancel", 130)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C: Python's own handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_controller_stop_file_exits_zero(make_ctx):
    ctx = make_ctx()
    seen, stop = run_steps(
        ctx, 10, 4, lambda: write_stop_request(ctx.run_dir, ctx.generation, "cancel")
    )
    assert (seen[-1], stop.request.reason, stop.exit_code) == (4, "cancel", 0)
    assert str(stop) == "run stopped after step 4 (cancel)"


def test_the_scripts_own_handler_is_still_called(make_ctx):
    calls = []
    signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    ctx = make_ctx()
    _, stop = run_steps(ctx, 5, 1, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert calls == [signal.SIGTERM] and stop.step == 1


def test_the_step_loop_stops_without_raising(make_ctx):
    ctx = make_ctx()
    loop = ctx.step_loop(start_step=0, total_steps=10)
    for step in loop:
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        loop.complete(step, loss=1.0)  # calls step_healthy without its stop check
    loop.close()
    assert loop.stop_request is not None and ctx.last_step == 2
    assert acknowledged(ctx) == [(2, "preemption")]


def test_a_second_init_replaces_the_first_watcher_and_close_restores(make_ctx):
    before = signal.getsignal(signal.SIGTERM)
    first = make_ctx()
    second = make_ctx()
    os.kill(os.getpid(), signal.SIGTERM)  # once: the second watcher's flag, nothing chained
    assert second.stop_watcher.local_request().reason == "preemption"
    assert first.stop_watcher.local_request() is None
    second.close()
    assert signal.getsignal(signal.SIGTERM) == before  # what was there before runwright
