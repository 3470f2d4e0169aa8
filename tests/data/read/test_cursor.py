"""Cursor records and their compatibility rules."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runwright.data import CursorMismatchError, DataCursor
from runwright.data.read.cursor import PackerResidual, reconcile

names = st.sampled_from(["code", "prose", "web"])
cursors = st.builds(
    DataCursor,
    dataset_id=st.text("0123456789abcdef", min_size=64, max_size=64),
    tokenizer_sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
    shuffle=st.just("permute-v1"),
    mixture=st.sampled_from(["quota-v1", "categorical-v1"]),
    packing=st.sampled_from(["concat-v1", "pad-v1"]),
    mixture_sha256=st.text("0123456789abcdef", min_size=8, max_size=8),
    seed=st.integers(0, 2**31),
    sequence_length=st.integers(1, 8192),
    epoch=st.integers(0, 100),
    step=st.integers(0, 10**9),
    position=st.integers(0, 10**12),
    source_draws=st.dictionaries(names, st.integers(0, 10**9)),
    source_units=st.dictionaries(names, st.integers(0, 10**12)),
    residual=st.none()
    | st.builds(
        PackerResidual, source=names, draw=st.integers(0, 10**6), token_offset=st.integers(1, 9999)
    ),
)


@given(cursor=cursors)
@settings(max_examples=100, deadline=None)
def test_cursor_round_trips_through_json(cursor: DataCursor) -> None:
    text = json.dumps(cursor.model_dump(mode="json"))
    assert DataCursor.model_validate(json.loads(text)) == cursor


def _cursor(**update: object) -> DataCursor:
    base = DataCursor(
        dataset_id="a" * 64,
        tokenizer_sha256="b" * 64,
        shuffle="permute-v1",
        mixture="quota-v1",
        packing="concat-v1",
        mixture_sha256="c" * 64,
        seed=0,
        sequence_length=128,
        step=5,
        position=40,
        source_draws={"code": 7, "prose": 3},
        source_units={"code": 7, "prose": 3},
        residual=PackerResidual(source="code", draw=6, token_offset=12),
    )
    return base.model_copy(update=update)


def test_exact_resume_refuses_another_version_and_names_it() -> None:
    saved = _cursor(packing="pad-v1")
    with pytest.raises(CursorMismatchError, match="packing: cursor has 'pad-v1'"):
        reconcile(saved, _cursor(step=0, position=0), coverage_only=False)


def test_coverage_resume_keeps_per_source_progress_only() -> None:
    saved = _cursor(dataset_id="d" * 64)
    expected = _cursor(step=0, position=0, source_draws={"code": 0, "web": 0}, residual=None)
    got = reconcile(saved, expected, coverage_only=True)
    assert got.dataset_id == "a" * 64
    assert got.source_draws == {"code": 7, "prose": 3, "web": 0}
    assert got.residual is None and got.step == 5 and got.position == 40


def test_unknown_field_is_rejected() -> None:
    with pytest.raises(ValueError, match="extra"):
        DataCursor.model_validate({**_cursor().model_dump(), "rank": 3})
