"""Ring collective ledger (Patarasuk & Yuan 2009; Thakur et al. 2005; seed 000)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.plan import (
    Collective,
    Link,
    PlanError,
    collective_cost,
    collective_table,
    pipeline_boundary_cost,
)

LINK = Link(latency_seconds=1e-5, bandwidth_bytes_per_second=1e10)


def test_all_reduce_by_hand():
    # D = 8, G = 8e9: sent 2 x 7 x 8e9 / 8 = 14e9 bytes; time 2 x 7 x 1e-5 + 14e9 / 1e10.
    cost = collective_cost(Collective.ALL_REDUCE, 8e9, 8, LINK)
    assert cost.bytes_sent_per_rank == 14e9
    assert cost.rounds == 14
    assert cost.seconds == pytest.approx(14e-5 + 1.4)


@pytest.mark.parametrize(
    "kind", [Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL]
)
def test_single_phase_collectives_by_hand(kind):
    # D = 4, G = 4e6: (D-1) G / D = 3e6 bytes in 3 rounds; 3e-5 + 3e6 / 1e10 seconds.
    cost = collective_cost(kind, 4e6, 4, LINK)
    assert cost.bytes_sent_per_rank == 3e6
    assert cost.rounds == 3
    assert cost.seconds == pytest.approx(3e-5 + 3e-4)


def test_two_ranks():
    # D = 2: all-reduce sends G/2 twice = G bytes.
    assert collective_cost(Collective.ALL_REDUCE, 100.0, 2, LINK).bytes_sent_per_rank == 100.0


def test_pipeline_boundary_by_hand():
    # 4 micro-batches: 8 messages of 1e6 bytes; 8 x (1e-5 + 1e6 / 1e10) seconds.
    cost = pipeline_boundary_cost(1e6, stages=4, microbatches=4, link=LINK)
    assert cost.bytes_sent_per_rank == 8e6
    assert cost.seconds == pytest.approx(8 * (1e-5 + 1e-4))
    assert pipeline_boundary_cost(1e6, stages=1, microbatches=4, link=LINK).seconds == 0


def test_table_lists_every_operation():
    kinds = [row.collective for row in collective_table(1e6, 4, LINK)]
    assert kinds == list(Collective)


@pytest.mark.parametrize(("payload", "ranks"), [(1.0, 0), (-1.0, 4)])
def test_bad_inputs_are_refused(payload, ranks):
    with pytest.raises(PlanError):
        collective_cost(Collective.ALL_REDUCE, payload, ranks, LINK)


@given(st.sampled_from(list(Collective)), st.floats(min_value=0, max_value=1e12))
def test_one_rank_costs_nothing(kind, payload):
    cost = collective_cost(kind, payload, 1, LINK)
    assert cost.bytes_sent_per_rank == 0
    assert cost.seconds == 0
    assert cost.rounds == 0


@given(st.floats(min_value=1, max_value=1e12), st.integers(min_value=2, max_value=4096))
def test_ring_all_reduce_stays_under_twice_the_payload(payload, ranks):
    # 2 (D-1) G / D < 2G: the bandwidth-optimal bound of Patarasuk & Yuan.
    sent = collective_cost(Collective.ALL_REDUCE, payload, ranks, LINK).bytes_sent_per_rank
    assert payload <= sent < 2 * payload
