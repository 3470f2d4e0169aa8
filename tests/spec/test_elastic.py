"""Elastic ranges: every node count of the range keeps the global batch, or the spec is refused
naming the counts that do not; the plan a rank resolves at its group's size keeps it too."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runwright.errors import SpecError
from runwright.spec import spec_from_mapping
from runwright.spec.elastic import layout_at, plan_at_world, spec_at_nodes


def refusal(data):
    with pytest.raises(SpecError) as err:
        spec_from_mapping(data)
    return str(err.value)


def elastic(nodes, low, high, batch=16, micro=None, per_node=2):
    training = {"global_batch_samples": batch, "steps": 10}
    if micro is not None:
        training["micro_batch_size"] = micro
    return {
        "name": "t",
        "code": {"entrypoint": "train.py"},
        "training": training,
        "resources": {"nodes": nodes, "devices_per_node": per_node},
        "parallelism": {"membership": {"mode": "elastic", "min_nodes": low, "max_nodes": high}},
    }


def test_each_size_keeps_the_global_batch_with_its_own_accumulation():
    spec = spec_from_mapping(elastic(3, 1, 3, batch=48, micro=2))
    # 48 samples = micro 2 x accumulation x dp, at dp 2, 4 and 6 (1, 2, 3 nodes of 2 ranks).
    layouts = [layout_at(spec, n) for n in (1, 2, 3)]
    assert [(x.dp, x.micro_batch_size, x.grad_accumulation_steps) for x in layouts] == [
        (2, 2, 12),
        (4, 2, 6),
        (6, 2, 4),
    ]
    assert {x.global_batch_samples for x in layouts} == {48}


def test_a_size_that_loses_the_global_batch_is_named():
    said = refusal(elastic(2, 1, 3))
    assert "3 node(s): training.global_batch_samples=16 is not divisible by dp=6" in said
    assert "these do: [1, 2]" in said


def test_a_declared_micro_batch_must_fit_every_size():
    # 16 samples / (micro 4 x dp 8 at 4 nodes) is half a micro-batch per rank.
    said = refusal(elastic(2, 1, 4, micro=4))
    assert "4 node(s)" in said and "micro_batch_size x dp = 4 x 8" in said


def test_a_warm_standby_is_refused_since_it_starts_at_the_old_size():
    data = {**elastic(2, 1, 2), "recovery": {"warm_standby": True}}
    assert "recovery.warm_standby starts the next generation ahead" in refusal(data)


def test_the_plan_at_a_smaller_world_and_the_submitted_identity():
    spec = spec_from_mapping(elastic(2, 1, 2, micro=2))
    smaller = spec_at_nodes(spec, 1)
    assert smaller.spec_hash == spec.spec_hash and spec.resources.nodes == 2
    plan = plan_at_world(spec, 2)
    # 1 node of 2 ranks: 16 samples = micro 2 x accumulation 4 x dp 2 (at 2 nodes: 2 x 2 x 4).
    assert (plan.dp.value, plan.grad_accumulation_steps.value) == (2, 4)
    assert (spec.plan.dp.value, spec.plan.grad_accumulation_steps.value) == (4, 2)
    assert plan_at_world(spec, 4) is spec.plan
    # A fixed run launched at another size keeps the spec's plan (today's behaviour).
    fixed = spec_from_mapping({**elastic(2, 1, 2), "parallelism": {}})
    assert plan_at_world(fixed, 2) is fixed.plan


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 64),
    per_node=st.integers(1, 4),
    low=st.integers(1, 4),
    span=st.integers(0, 3),
)
def test_an_accepted_range_keeps_the_global_batch_at_every_size(batch, per_node, low, span):
    data = elastic(low, low, low + span, batch=batch, per_node=per_node)
    try:
        spec = spec_from_mapping(data)
    except SpecError:
        return  # refused: the unit tests above check the words
    for nodes in range(low, low + span + 1):
        x = layout_at(spec, nodes)
        assert x.micro_batch_size * x.grad_accumulation_steps * x.dp == batch
        assert x.world_size == nodes * per_node
