"""The transition table, every allowed and every forbidden pair, applied through a real store."""

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwright.control.states import (
    BUMPS_GENERATION,
    TERMINAL,
    TERMINAL_REASONS,
    TRANSITIONS,
    RunState,
    TerminalReason,
    advance,
    is_allowed,
)
from runwright.store import Outcome, Store

ALL_PAIRS = list(itertools.product(RunState, RunState))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store(f"sqlite:///{tmp_path_factory.mktemp('states') / 'state.db'}")
    yield s
    s.close()


def put_in_state(store, run_id, state):
    # The runs live beside the store's file, where their checkpoint fences are raised.
    root = str(Path(store.url.removeprefix("sqlite:///")).parent)
    store.create_run(
        run_id=run_id,
        name="t",
        spec={},
        spec_hash="h",
        plan={},
        workdir=root,
        root=root,
        state=str(state),
    )


def reason_for(target):
    return sorted(TERMINAL_REASONS[target])[0] if target in TERMINAL else None


@pytest.mark.parametrize(("source", "target"), ALL_PAIRS, ids=lambda s: str(s))
def test_every_pair(store, source, target):
    run_id = f"{source}-{target}"
    put_in_state(store, run_id, source)
    result = advance(store, run_id, target, reason=reason_for(target))
    state_after = store.get_run(run_id).state
    if is_allowed(source, target):
        assert result.outcome is Outcome.APPLIED
        assert state_after == target
        expected_generation = 1 if target in BUMPS_GENERATION else 0
        assert result.run.generation == expected_generation
    elif source == target:
        assert result.outcome is Outcome.ALREADY_APPLIED
        assert state_after == source
    else:
        assert result.outcome is Outcome.INVALID_TRANSITION
        assert state_after == source


def test_terminal_states_have_no_exits_and_need_reasons(store):
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
    put_in_state(store, "needs-reason", RunState.RUNNING)
    assert advance(store, "needs-reason", RunState.FAILED).outcome is Outcome.INVALID_TRANSITION
    wrong = advance(store, "needs-reason", RunState.FAILED, reason=TerminalReason.COMPLETED)
    assert wrong.outcome is Outcome.INVALID_TRANSITION
    assert store.get_run("needs-reason").state == RunState.RUNNING


def test_happy_path_of_one_run(store):
    put_in_state(store, "happy", RunState.CREATED)
    path = [
        RunState.QUEUED,
        RunState.ALLOCATING,
        RunState.STARTING,
        RunState.RUNNING,
        RunState.CHECKPOINTING,
        RunState.RUNNING,
        RunState.RECOVERING,
        RunState.STARTING,
        RunState.RUNNING,
    ]
    for target in path:
        assert advance(store, "happy", target).outcome is Outcome.APPLIED
    assert (
        advance(store, "happy", RunState.SUCCEEDED, reason=TerminalReason.COMPLETED).outcome
        is Outcome.APPLIED
    )
    assert store.get_run("happy").generation == 2


requests = st.lists(
    st.tuples(
        st.sampled_from(list(RunState)),
        st.one_of(st.none(), st.integers(min_value=0, max_value=4)),
        st.booleans(),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests)
def test_random_event_sequences_never_break_the_machine(store, sequence):
    """Duplicates, reordering and stale generations: the run is always in a state reachable by
    legal moves, terminal runs never move, and a stale-generation request never applies."""
    run_id = f"prop-{id(sequence)}-{len(store.list_runs(limit=10_000))}"
    put_in_state(store, run_id, RunState.CREATED)
    for target, generation, duplicate in sequence:
        before = store.get_run(run_id)
        for _ in range(2 if duplicate else 1):
            result = advance(
                store, run_id, target, generation=generation, reason=reason_for(target)
            )
        after = store.get_run(run_id)
        if before.state in TERMINAL:
            assert after.state == before.state and after.generation == before.generation
        if after.state != before.state:
            assert is_allowed(RunState(before.state), RunState(after.state))
            assert generation is None or generation == before.generation
        if generation is not None and generation != before.generation:
            assert after == before or after.updated_unix_s == before.updated_unix_s
            assert result.outcome in (Outcome.STALE_GENERATION, Outcome.INVALID_TRANSITION)
        assert after.generation >= before.generation


def test_a_move_and_its_state_changed_event_are_one_transaction(store):
    """A controller killed right after a move cannot leave it without its STATE_CHANGED event:
    the journal writes both in one transaction, and a retried move writes nothing."""
    from runwright.control.journal import Journal

    put_in_state(store, "journaled", RunState.CREATED)
    journal = Journal(store)
    run = store.get_run("journaled")
    assert journal.move(run, RunState.QUEUED, "JOB_ACCEPTED")
    assert not journal.move(run, RunState.QUEUED, "JOB_ACCEPTED")
    types = [e.type for e in store.events("journaled")]
    assert types == ["STATE_CHANGED", "JOB_ACCEPTED"]
    changed = store.events("journaled", types=["STATE_CHANGED"])[0]
    assert changed.attributes["from_state"] == "CREATED"
    assert changed.attributes["to_state"] == "QUEUED"
