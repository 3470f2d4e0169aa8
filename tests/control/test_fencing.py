"""One authority for "which generation may write" and "which checkpoint is latest": the run's
checkpoint fence. Every way the store's generation moves keeps the fence in step with no step
left to a caller, and a stale worker is rejected with no controller running."""

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwright.ckpt import Checkpointer, LocalFence, SaveStatus, TrainState
from runwright.control.cancel import request_cancel
from runwright.control.journal import Journal
from runwright.control.states import (
    BUMPS_GENERATION,
    REVOKES_GENERATION,
    TERMINAL,
    TERMINAL_REASONS,
    TRANSITIONS,
    RunState,
    TerminalReason,
    advance,
)
from runwright.layout import run_paths
from runwright.spec import CheckpointSpec
from runwright.store import Outcome, Store

S = RunState
_ids = itertools.count()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("fencing")


@pytest.fixture(scope="module")
def store(root):
    s = Store(f"sqlite:///{root / 'state.db'}")
    yield s
    s.close()


def new_run(store, root, state=S.CREATED, spec=None):
    run_id = f"run-{next(_ids)}"
    store.create_run(
        run_id=run_id,
        name="t",
        spec=spec or {},
        spec_hash="h",
        plan={},
        workdir=str(root),
        root=str(root),
        state=str(state),
    )
    return run_id


def fence_of(root, run_id):
    return LocalFence(run_paths(root, run_id).checkpoints)


def walk(store, run_id, *targets, reason=None):
    for target in targets:
        result = advance(store, run_id, target, reason=reason if target in TERMINAL else None)
        assert result.outcome is Outcome.APPLIED, result.detail


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(choices=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=12))
def test_every_transition_path_keeps_the_fence_in_step(store, root, choices):
    """A random walk through the table: after a bump the fence equals the store's generation,
    after a revoke it is one past it, and it is never behind it."""
    run_id = new_run(store, root)
    for choice in choices:
        state = S(store.get_run(run_id).state)
        targets = sorted(TRANSITIONS[state])
        if not targets:
            break
        target = targets[choice % len(targets)]
        reason = sorted(TERMINAL_REASONS[target])[0] if target in TERMINAL else None
        assert advance(store, run_id, target, reason=reason).outcome is Outcome.APPLIED
        generation = store.get_run(run_id).generation
        fenced = fence_of(root, run_id).current_generation()
        if target in BUMPS_GENERATION:
            assert fenced == generation
        elif target in REVOKES_GENERATION:
            assert fenced == generation + 1
        assert fenced >= generation


def test_recovery_preemption_cancel_and_finish_paths(store, root):
    # Recovery in place: the failed generation is fenced off on RECOVERING, before the restart.
    run_id = new_run(store, root)
    walk(store, run_id, S.QUEUED, S.ALLOCATING, S.STARTING, S.RUNNING)
    assert fence_of(root, run_id).current_generation() == 1 == store.get_run(run_id).generation
    walk(store, run_id, S.RECOVERING)
    assert fence_of(root, run_id).current_generation() == 2
    walk(store, run_id, S.STARTING)
    assert fence_of(root, run_id).current_generation() == 2 == store.get_run(run_id).generation
    # Preemption that requeues, then one that ends the run (Journal.finish, as recovery does).
    walk(store, run_id, S.RUNNING, S.RECOVERING, S.QUEUED, S.ALLOCATING, S.STARTING, S.RUNNING)
    assert fence_of(root, run_id).current_generation() == 3 == store.get_run(run_id).generation
    walk(store, run_id, S.RECOVERING)
    Journal(store).finish(store.get_run(run_id), S.CANCELLED, TerminalReason.PREEMPTED, "preempted")
    assert fence_of(root, run_id).current_generation() == 4 == store.get_run(run_id).generation
    # Success and failure end the generation without a successor.
    for end, reason in (
        (S.SUCCEEDED, TerminalReason.COMPLETED),
        (S.FAILED, TerminalReason.FAILED_PERMANENT),
    ):
        other = new_run(store, root)
        walk(store, other, S.QUEUED, S.ALLOCATING, S.STARTING, S.RUNNING)
        Journal(store).finish(store.get_run(other), end, reason, None)
        assert fence_of(root, other).current_generation() == 2
        assert store.get_run(other).generation == 1
    # Cancel, from any process.
    cancelled = new_run(store, root)
    walk(store, cancelled, S.QUEUED)
    assert request_cancel(store, cancelled).outcome is Outcome.APPLIED
    assert fence_of(root, cancelled).current_generation() == 1
    assert store.get_run(cancelled).generation == 1


def test_revoke_fences_a_live_generation_before_it_ends(store, root):
    run_id = new_run(store, root)
    walk(store, run_id, S.QUEUED, S.ALLOCATING, S.STARTING, S.RUNNING)
    assert store.revoke_generation(run_id, 1) is Outcome.APPLIED
    assert store.revoke_generation(run_id, 1) is Outcome.ALREADY_APPLIED
    assert store.revoke_generation(run_id, 0) is Outcome.STALE_GENERATION
    assert fence_of(root, run_id).current_generation() == 2
    assert store.get_run(run_id).generation == 1  # its in-flight events are still its own
    walk(store, run_id, S.RECOVERING, S.STARTING)
    assert fence_of(root, run_id).current_generation() == 2 == store.get_run(run_id).generation


def test_a_failed_fence_write_leaves_the_generation_unbumped(store, root, monkeypatch):
    """Fence first, commit second: if the fence cannot be raised, the bump does not commit, so
    the store never names a generation the fence would not enforce."""
    run_id = new_run(store, root, S.ALLOCATING)

    def full(self, generation):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LocalFence, "raise_to", full)
    with pytest.raises(OSError):
        advance(store, run_id, S.STARTING)
    run = store.get_run(run_id)
    assert (run.state, run.generation) == ("ALLOCATING", 0)


def _state(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 2)
    return TrainState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


def test_a_stale_worker_cannot_publish_with_no_controller_running(store, root):
    """Generation 1's worker outlives its controller; a bare store transition (what `runwright
    cancel` does, with no controller) bumps the generation. The worker's next checkpoint commits
    its bytes but never becomes latest, and the store's answer to "which checkpoint is latest"
    is the fence's."""
    run_id = new_run(store, root, spec={"name": "t"})
    walk(store, run_id, S.QUEUED, S.ALLOCATING, S.STARTING, S.RUNNING)
    checkpoints = run_paths(root, run_id).checkpoints
    worker = Checkpointer(
        str(checkpoints), policy=CheckpointSpec(), fence=LocalFence(checkpoints), generation=1
    )
    assert worker.save(4, _state(4)).status == SaveStatus.COMMITTED
    assert store.checkpoints.latest(run_id).step == 4  # from the fence, before any ingest
    store.transition(run_id, "CANCELLED", allowed_from=["RUNNING"], bump_generation=True)
    assert worker.save(8, _state(8)).status == SaveStatus.REJECTED_STALE
    latest = store.checkpoints.latest(run_id)
    assert (latest.step, latest.generation) == (4, 1)
    assert LocalFence(checkpoints).latest().step == 4
    worker.close()
