"""The bounds of spec/limits.py and the bounded arithmetic they make possible."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwright.errors import SpecError
from runwright.spec import limits, parse_text, spec_from_mapping
from runwright.spec.loader import check_shape
from runwright.spec.resolve import divisors, nearest_divisors


@given(st.integers(1, 5000))
def test_divisors_match_the_definition(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@given(st.integers(1, limits.MAX_BATCH_SAMPLES), st.integers(1, 64))
def test_nearest_divisors_are_few_sorted_divisors(n, target):
    near = nearest_divisors(n, target)
    assert near == sorted(near) and 1 <= len(near) <= 6
    assert all(n % d == 0 for d in near)


def test_a_self_referencing_mapping_is_refused_not_recursed():
    data: dict = {"name": "x"}
    data["code"] = data
    with pytest.raises(SpecError, match="nested more than 64 levels"):
        spec_from_mapping(data)


def test_shared_references_count_each_time_they_appear():
    leaf = ["lol"] * 100
    wide = [leaf] * 100
    with pytest.raises(SpecError, match="more than 100,000 values"):
        check_shape({"a": [wide] * 20})
    check_shape({"a": [wide] * 5})  # 50,000 values pass


def test_a_mapping_is_required():
    with pytest.raises(SpecError, match="mapping of sections"):
        spec_from_mapping([1, 2])  # type: ignore[arg-type]


def test_yaml_merge_keys_are_not_duplicates():
    data = parse_text("base: &b {x: 1}\nother:\n  <<: *b\n  x: 2\n", "yaml")
    assert data["other"] == {"x": 2}


def test_problem_lists_are_bounded():
    with pytest.raises(SpecError) as err:
        spec_from_mapping({"name": "x", "code": {"entrypoint": "t", "args": list(range(100))}})
    assert len(err.value.problems) == limits.MAX_PROBLEMS_SHOWN + 1
    assert err.value.problems[-1].startswith("... and")
