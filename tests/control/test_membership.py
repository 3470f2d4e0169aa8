"""The elastic size decision (control/membership.py's next_size), a pure function: a loss shrinks
to the nodes that remain while they are at least min_nodes, and a shrunk run grows back only to
its submitted size and only when the executor says it has the nodes."""

from hypothesis import given
from hypothesis import strategies as st

from runwright.control.membership import next_size


def test_a_loss_shrinks_to_the_remaining_nodes():
    assert next_size(4, 4, 2, 1, available=4) == (3, "lost 1 node(s): continue on the 3 remaining")
    assert next_size(4, 3, 2, 1, available=None)[0] == 2


def test_too_few_remaining_goes_back_to_waiting_for_the_full_size():
    nodes, why = next_size(4, 2, 2, 1, available=None)
    assert nodes == 4 and "1 < min_nodes 2: wait for 4 nodes" in why
    # Already at the full size: nothing changes (the recovery policy waits, as for a fixed run).
    assert next_size(2, 2, 2, 1, available=2) is None


def test_growing_back_needs_an_executor_that_can_tell():
    assert next_size(2, 1, 1, 0, available=None) is None
    assert next_size(2, 1, 1, 0, available=1) is None
    assert next_size(2, 1, 1, 0, available=2)[0] == 2
    assert next_size(2, 2, 1, 0, available=8) is None


@given(
    target=st.integers(1, 16),
    data=st.data(),
)
def test_the_next_size_stays_in_the_range(target, data):
    low = data.draw(st.integers(1, target))
    current = data.draw(st.integers(low, target))
    lost = data.draw(st.integers(0, current))
    available = data.draw(st.none() | st.integers(0, 32))
    decided = next_size(target, current, low, lost, available)
    if decided is None:
        return
    nodes, _ = decided
    assert low <= nodes <= target and nodes != current
    if lost:
        assert nodes == current - lost or nodes == target
    else:
        assert nodes == target and available is not None and available >= target
