"""Mixture stages (`staged-quota-v1`, data/read/stages.py): exact quotas within every stage, the
stage in the cursor, resume inside a stage and across a boundary, and the unstaged algorithms'
sequences unchanged."""

import hashlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from runwright_tests_tiny import tiny_gpt

from runwright import events
from runwright.data import DataLoader
from runwright.data.errors import CursorMismatchError, DataError
from runwright.data.format.manifest import read_manifest
from runwright.data.read.cursor import DataCursor
from runwright.data.read.mixture import MIXTURES
from runwright.data.read.packing import PACKERS
from runwright.data.read.shuffle import SHUFFLES
from runwright.data.read.stages import Stage, resolve_stages
from runwright.data.read.step_plan import Planner
from runwright.data.read.stream import DocStream, SourceTable, StreamState
from runwright.events import EventType
from runwright.govern.preflight import against_manifest
from runwright.spec import DataSpec, spec_from_mapping

from .conftest import make_dataset

NAMES = ("a", "b", "c", "d")


def staged_spec(**mixture) -> DataSpec:
    return DataSpec.model_validate(
        {
            "sequence_length": 32,
            "seed": 3,
            "mixture": {
                "algorithm": "staged-quota-v1",
                "sources": [{"name": "code", "weight": 3}, {"name": "prose", "weight": 1}],
                "stages": [
                    {
                        "name": "anneal",
                        "start_step": 5,
                        "sources": [
                            {"name": "math", "weight": 1},
                            {"name": "prose", "weight": 1},
                        ],
                    }
                ],
                **mixture,
            },
        }
    )


@pytest.fixture(scope="module")
def three_sources(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stages") / "ds"
    make_dataset(folder, {"code": 150, "prose": 80, "math": 40})
    return folder


def test_a_resume_from_any_step_inside_a_stage_or_across_its_start_continues_the_sequence(
    three_sources,
):
    spec, steps = staged_spec(), 10
    with DataLoader(three_sources, spec, global_batch_samples=4, read_workers=0) as loader:
        reference, cursors = [], []
        for _, batch in zip(range(steps), loader, strict=False):
            reference.append(batch.tokens.tolist())
            cursors.append(loader.state_dict())
    assert [c["stage"] for c in cursors] == [0] * 5 + [1] * 5
    # The document running across the start (step 5's cursor) was drawn in the first stage.
    assert cursors[4]["residual"] is not None and cursors[4]["stage"] == 0
    assert cursors[5]["stage_units"] == {"code": 12, "prose": 3, "math": 0}
    for k, saved in enumerate(cursors[:-1]):
        with DataLoader(three_sources, spec, global_batch_samples=4, read_workers=0) as loader:
            loader.load_state_dict(saved)
            rest = [b.tokens.tolist() for _, b in zip(range(steps - k - 1), loader, strict=False)]
        assert rest == reference[k + 1 :], f"resumed after step {k + 1}"
    # The anneal stage draws no code, and its quotas (1:1) are exact.
    last = cursors[-1]
    assert last["source_draws"]["code"] == cursors[5]["stage_units"]["code"]
    grown = {n: last["source_units"][n] - last["stage_units"][n] for n in ("prose", "math")}
    assert abs(grown["prose"] - grown["math"]) <= 1


def test_a_cursor_of_another_stage_schedule_is_refused(three_sources):
    with DataLoader(three_sources, staged_spec(), global_batch_samples=4) as loader:
        next(iter(loader))
        saved = loader.state_dict()
    moved = staged_spec(
        stages=[{"name": "anneal", "start_step": 7, "sources": [{"name": "math", "weight": 1}]}]
    )
    with DataLoader(three_sources, moved, global_batch_samples=4) as other:
        with pytest.raises(CursorMismatchError, match="mixture_sha256"):
            other.load_state_dict(saved)
        with pytest.raises(CursorMismatchError, match="mixture stage 4"):
            other.load_state_dict({**saved, "stage": 4}, coverage_only=True)


@pytest.mark.parametrize(
    ("mixture", "says"),
    [
        ({"algorithm": "quota-v1"}, "needs algorithm 'staged-quota-v1'"),
        ({"sources": []}, "needs mixture.sources"),
        (
            {
                "stages": [
                    {
                        "name": "x",
                        "start_step": 3,
                        "start_tokens": 9,
                        "sources": [{"name": "a", "weight": 1}],
                    }
                ]
            },
            "exactly one of start_step or start_tokens",
        ),
        (
            {
                "stages": [
                    {"name": "x", "start_step": 5, "sources": [{"name": "code", "weight": 1}]},
                    {"name": "y", "start_step": 5, "sources": [{"name": "code", "weight": 1}]},
                ]
            },
            "start_step values must increase",
        ),
    ],
)
def test_a_bad_stage_declaration_says_what_to_change(mixture, says):
    with pytest.raises(ValidationError, match=says):
        staged_spec(**mixture)


def test_a_token_start_rounds_up_to_a_whole_step_and_an_unknown_source_is_named(three_sources):
    spec = staged_spec(
        stages=[{"name": "late", "start_tokens": 5000, "sources": [{"name": "math", "weight": 1}]}]
    )
    # 4 samples * 32 tokens = 128 tokens a step; 5000 / 128 = 39.06 -> after step 40.
    assert [s.start_step for s in resolve_stages(spec, 4)] == [0, 40]
    bad = staged_spec(
        stages=[{"name": "late", "start_step": 2, "sources": [{"name": "poetry", "weight": 1}]}]
    )
    with pytest.raises(DataError, match="'poetry' is not in dataset"):
        DataLoader(three_sources, bad, global_batch_samples=4)


# Sequences of the unstaged algorithms as the code before mixture stages produced them (two
# epochs of a `stop`/`renormalise` mixture, sha256 of every batch's tokens).
UNSTAGED = {
    ("quota-v1", "documents"): "1edf06f07aab60706b6ef334d1e3b111568596cb34902d8070de14d4c25a952d",
    ("quota-v1", "tokens"): "8c2b6b3ba358d078ad1b24128674eee77e296a9945bdea2be0873fe38e805efa",
    ("categorical-v1", "documents"): (
        "c12437bd39cb531cb11246ecb136cdce7486d94ec6ec5579518c2b3d8c806eb1"
    ),
}


def test_the_unstaged_algorithms_keep_their_sequences(tmp_path):
    folder = tmp_path / "ds"
    make_dataset(folder, {"code": 90, "prose": 50})
    for (algorithm, unit), expected in UNSTAGED.items():
        sources = [
            {"name": "code", "weight": 2, "exhaustion": "stop"},
            {"name": "prose", "weight": 1, "exhaustion": "renormalise"},
        ]
        spec = DataSpec.model_validate(
            {
                "sequence_length": 32,
                "seed": 5,
                "mixture": {"algorithm": algorithm, "unit": unit, "sources": sources},
            }
        )
        digest = hashlib.sha256()
        with DataLoader(folder, spec, global_batch_samples=4, read_workers=0, epochs=2) as loader:
            for batch in loader:
                digest.update(batch.tokens.numpy().tobytes())
        assert digest.hexdigest() == expected, (algorithm, unit)


def plan_cursors(lengths, stages: list[Stage], batch: int, seq: int, steps: int):
    """The cursor after each of `steps` planned steps of a staged stream over `lengths`."""
    names = NAMES[: len(lengths)]
    union = [
        SourceTable(
            name,
            np.asarray(ls, dtype=np.int64),
            np.zeros(len(ls), dtype=np.int64),
            np.zeros(len(ls), dtype=np.int64),
            0.0,
            "repeat",
        )
        for name, ls in zip(names, lengths, strict=True)
    ]
    template = DataCursor(
        dataset_id="ab" * 32,
        tokenizer_sha256="0",
        shuffle="permute-v1",
        mixture="staged-quota-v1",
        packing="concat-v1",
        mixture_sha256="0",
        seed=1,
        sequence_length=seq,
        source_draws=dict.fromkeys(names, 0),
        source_units=dict.fromkeys(names, 0),
    )
    stream = DocStream(
        sources=stages[0].tables(union),
        shuffle=SHUFFLES.get("permute-v1"),
        mixture=MIXTURES.get("staged-quota-v1"),
        doc_units=None,
        dataset_id=template.dataset_id,
        seed=1,
        state=StreamState(0, [0] * len(names), [0] * len(names)),
        block_docs=64,  # small blocks: stage starts fall inside blocks and between them
    )
    packer = PACKERS.get("concat-v1")
    planner = Planner(
        stream,
        packer,
        union,
        template,
        global_batch_samples=batch,
        dp_rank=0,
        dp_size=1,
        stages=stages,
    )
    return [planner.next_batch().cursor.resolve() for _ in range(steps)]


@st.composite
def staged_streams(draw):
    m = draw(st.integers(2, 4))
    lengths = [draw(st.lists(st.integers(1, 90), min_size=3, max_size=30)) for _ in range(m)]
    count = draw(st.integers(2, 4))
    starts = sorted(draw(st.sets(st.integers(1, 14), min_size=count - 1, max_size=count - 1)))
    stages = []
    for k, start in enumerate([0, *starts]):
        chosen = draw(st.sets(st.sampled_from(NAMES[:m]), min_size=1))
        weights = {n: float(draw(st.integers(1, 9))) for n in sorted(chosen)}
        stages.append(Stage(f"s{k}", start, weights, dict.fromkeys(weights, "repeat")))
    return lengths, stages, draw(st.integers(1, 4)), draw(st.integers(4, 40))


@settings(max_examples=40, deadline=None)
@given(staged_streams())
def test_quotas_are_exact_within_every_stage(case):
    lengths, stages, batch, seq = case
    cursors = plan_cursors(lengths, stages, batch, seq, steps=18)
    previous = None
    for cursor in cursors:
        stage = stages[cursor.stage]
        expected = max(k for k, s in enumerate(stages) if s.start_step <= cursor.step)
        # The stage is the schedule's, or an earlier one while a document drawn before the
        # boundary is still being packed.
        assert cursor.stage == expected or (cursor.residual is not None and cursor.stage < expected)
        counts = {
            n: cursor.source_units[n] - cursor.stage_units.get(n, 0) for n in cursor.source_units
        }
        drawn = sum(counts.values())
        total = sum(stage.weights.values())
        for name, count in counts.items():
            share = stage.weights.get(name, 0.0) / total
            assert abs(count - share * drawn) < 1, (cursor, stage)
        if previous is not None and previous.stage == cursor.stage:
            for name in cursor.source_draws:
                if name not in stage.weights:
                    assert cursor.source_draws[name] == previous.source_draws[name]
        previous = cursor


def test_preflight_names_a_stage_source_the_dataset_lacks(three_sources):
    manifest = read_manifest(three_sources)
    data = tiny_gpt(SimpleNamespace(folder=three_sources, manifest=manifest), steps=4)
    data["data"]["mixture"] = staged_spec(
        stages=[{"name": "late", "start_step": 2, "sources": [{"name": "poetry", "weight": 1}]}]
    ).mixture.model_dump()
    (problem,) = against_manifest(spec_from_mapping(data), manifest)
    assert "data.mixture.stages[late].sources names ['poetry']" in problem


def test_a_drift_window_across_a_stage_start_is_judged_against_both_stages_weights(three_sources):
    """Steps 1-5 draw 3:1 code:prose, steps 6 on 1:1 math:prose; windows of 4 steps. The second
    window holds one step of the first stage and three of the second: its targets blend the two
    by steps, where judging it against the second stage's weights alone reported the first
    stage's code as a drift the recipe never asked to avoid."""
    windows: list[dict] = []

    def collect(type_, *, key=None, step=None, checkpoint_id=None, **attributes):
        if type_ == EventType.MIXTURE_WINDOW:
            windows.append(attributes)

    events.attach(collect)
    try:
        with DataLoader(
            three_sources, staged_spec(), global_batch_samples=4, read_workers=0,
            drift_window_steps=4,
        ) as loader:  # fmt: skip
            for _ in zip(range(12), loader, strict=False):
                pass
    finally:
        events.detach(collect)
    first, across, second = windows
    assert first["targets"] == {"code": 0.75, "prose": 0.25} and "stage_parts" not in first
    assert across["stage_parts"] == [
        {"steps": 1, "targets": {"code": 0.75, "prose": 0.25}},
        {"steps": 3, "targets": {"math": 0.5, "prose": 0.5}},
    ]
    assert across["targets"] == {"code": 0.1875, "prose": 0.4375, "math": 0.375}
    shares = across["shares"]
    assert across["max_deviation"] == round(
        max(abs(shares.get(n, 0.0) - across["targets"][n]) for n in across["targets"]), 6
    )
    against_new_stage_only = max(
        abs(shares.get(n, 0.0) - {"math": 0.5, "prose": 0.5}.get(n, 0.0)) for n in shares
    )
    assert across["max_deviation"] < against_new_stage_only, (shares, against_new_stage_only)
    assert second["targets"] == {"math": 0.5, "prose": 0.5} and "stage_parts" not in second
