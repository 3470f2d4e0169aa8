"""Replica digests and the vote (runtime/digest.py): every single flipped bit changes the digest,
whatever the dtype and wherever the bit; equal state gives equal digests; the vote names the
minority, or every replica when there is no strict majority; a failed vote names the tensor."""

import argparse

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runwright.runtime.digest import (
    digest,
    first_difference,
    state_tensors,
    tensor_lanes,
    vote,
)
from runwright.train.faults import BitFlip


def trained(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, 8)).pow(2).mean().backward()
    optimizer.step()
    return model, optimizer


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64]),
    st.integers(1, 5000),
    st.data(),
)
def test_any_single_flipped_bit_changes_the_digest(dtype, size, data):
    tensor = (torch.randn(size) * 100).to(dtype)
    bits = tensor.element_size() * 8
    index, bit = data.draw(st.integers(0, size - 1)), data.draw(st.integers(0, bits - 1))
    words = {2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    flipped = tensor.clone()
    flipped.view(words)[index] ^= torch.tensor(1, dtype=words) << bit
    before, after = digest([("t", tensor)]), digest([("t", flipped)])
    assert before.value != after.value
    assert first_difference(before, after.lanes) == "t"


def test_equal_state_digests_equal_and_the_flipped_parameter_is_named():
    model, optimizer = trained()
    twin, twin_optimizer = trained()
    names = [name for name, _ in state_tensors(model, optimizer)]
    assert "0.weight" in names and "0.weight/exp_avg" in names and "1.bias/step" in names
    mine = digest(state_tensors(model, optimizer))
    assert mine.value == digest(state_tensors(twin, twin_optimizer)).value
    BitFlip("1.weight", 0, 1).apply(twin)
    theirs = digest(state_tensors(twin, twin_optimizer))
    assert theirs.value != mine.value
    assert first_difference(mine, theirs.lanes) == "1.weight"


def test_a_non_finite_value_is_reported_and_int64_state_is_left_untouched():
    tensor = torch.tensor([1.0, float("inf")])
    assert not bool(tensor_lanes(tensor)[1])
    assert digest([("w", tensor), ("b", torch.ones(2))]).nonfinite == ("w",)
    counts = torch.tensor([3, -5], dtype=torch.int64)
    tensor_lanes(counts)
    assert counts.tolist() == [3, -5]  # the int64 view widens to itself: no in-place math


@pytest.mark.parametrize(
    ("digests", "agreed", "suspects", "majority"),
    [
        ({0: 7, 1: 7, 2: 7}, True, (), (0, 1, 2)),
        ({0: 7, 1: 9, 2: 7}, False, (1,), (0, 2)),
        ({0: 7, 1: 9}, False, (0, 1), ()),  # two replicas: either may be the bad one
        ({0: 1, 1: 1, 2: 2, 3: 2}, False, (0, 1, 2, 3), ()),  # a tie is no majority
        ({0: 1, 1: 2, 2: 3, 3: 3, 4: 3}, False, (0, 1), (2, 3, 4)),
    ],
)
def test_the_vote_names_the_minority_or_everyone_without_a_majority(
    digests, agreed, suspects, majority
):
    verdict = vote(digests)
    assert (verdict.agreed, verdict.suspects, verdict.majority) == (agreed, suspects, majority)
    if not agreed:
        words = verdict.words()
        assert ("(majority)" in words) == bool(majority)
        assert ("no majority" in words) == (not majority)


def test_the_flip_injector_refuses_bad_input_with_the_expected_form():
    assert BitFlip.parse("blocks.0.fc.weight:1@5") == BitFlip("blocks.0.fc.weight", 1, 5)
    with pytest.raises(argparse.ArgumentTypeError, match="PARAM:RANK@STEP"):
        BitFlip.parse("blocks.0.fc.weight@5")
    model, _ = trained()
    with pytest.raises(SystemExit, match="no parameter 'nope'"):
        BitFlip("nope", 0, 1).apply(model)
