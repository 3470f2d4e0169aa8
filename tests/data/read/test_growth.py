"""Growing sources (data/read/growth.py): a new dataset version during a run is refused unless
declared, and a declared one is taken at the cursor's step boundary, mapped and recorded."""

import numpy as np
import pytest

from runwright import events
from runwright.data import DataLoader, gaps_and_overlaps, join
from runwright.data.errors import CursorMismatchError
from runwright.data.format.pretokenized import write_pretokenized
from runwright.events import EventType
from runwright.spec import DataSpec

from .conftest import EOD, VOCAB, random_documents


def spec(**data) -> DataSpec:
    return DataSpec.model_validate(
        {
            "sequence_length": 32,
            "seed": 2,
            "mixture": {"sources": [{"name": "code", "weight": 1}, {"name": "prose", "weight": 1}]},
            **data,
        }
    )


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """(v1, v2): v2 is v1 with 30 more `prose` documents (the same first 40)."""
    root = tmp_path_factory.mktemp("growth")
    code, prose = random_documents(1, 50, 30), random_documents(2, 70, 30)
    out = []
    for name, prose_docs in (("v1", prose[:40]), ("v2", prose)):
        manifest = write_pretokenized(
            root / name,
            {"code": code, "prose": prose_docs},
            vocab_size=VOCAB,
            eod_token_id=EOD,
            max_tokens_per_shard=2000,
        )
        out.append((root / name, manifest.dataset_id))
    return out


def read(folder, data_spec, steps, state=None):
    with DataLoader(folder, data_spec, global_batch_samples=4, read_workers=0) as loader:
        if state is not None:
            loader.load_state_dict(state)
        rows = [b.tokens.tolist() for _, b in zip(range(steps), loader, strict=False)]
        return rows, loader.state_dict(), loader.ledger


def test_a_grown_source_is_refused_unless_declared_naming_both_versions(versions):
    (v1, id1), (v2, id2) = versions
    _, state, _ = read(v1, spec(), 3)
    with (
        DataLoader(v2, spec(), global_batch_samples=4) as loader,
        pytest.raises(CursorMismatchError) as refused,
    ):
        loader.load_state_dict(state)
    said = str(refused.value)
    assert id1 in said and id2 in said and f"source_growth.from_manifest_id: {id1}" in said
    wrong = spec(source_growth={"from_manifest_id": "f" * 64})
    with (
        DataLoader(v2, wrong, global_batch_samples=4) as loader,
        pytest.raises(CursorMismatchError, match="declares ffffffffffff, not this one"),
    ):
        loader.load_state_dict(state)
    # One change at a time: a new version with another seed is refused.
    reseeded = spec(seed=9, source_growth={"from_manifest_id": id1})
    with (
        DataLoader(v2, reseeded, global_batch_samples=4) as loader,
        pytest.raises(CursorMismatchError, match="seed: cursor has 2"),
    ):
        loader.load_state_dict(state)


def test_a_declared_new_version_is_taken_at_the_step_boundary_and_recorded(versions):
    (v1, id1), (v2, id2) = versions
    _, state, ledger1 = read(v1, spec(), 3)
    grown = spec(source_growth={"from_manifest_id": id1})
    seen = []

    def collector(type_, **kw):
        seen.append((type_, kw))

    events.attach(collector)
    try:
        after, cursor, ledger2 = read(v2, grown, 4, state)
    finally:
        events.detach(collector)
    (change,) = cursor["source_changes"]
    assert (change["from_dataset_id"], change["to_dataset_id"]) == (id1, id2)
    assert change["at_step"] == 3 and change["from_epoch"] == state["epoch"] == 0
    assert change["dropped_residual"] == state["residual"]
    assert cursor["dataset_id"] == id2 and cursor["epoch"] == 1 and cursor["step"] == 7
    (event,) = [kw for t, kw in seen if t == EventType.DATA_SOURCE_CHANGED]
    assert event["step"] == 3 and event["to_dataset_id"] == id2
    # The samples continue: steps 1-3 on v1, 4-7 on v2 (per version: nothing skipped or
    # repeated; together: one sample range after the other).
    assert gaps_and_overlaps(join(ledger1, ledger2)) == []
    assert [r.first_step for r in ledger2.ranges] == [3]
    assert ledger2.ranges[0].first_sample == ledger1.ranges[-1].end_sample
    # The new version's new documents are read (the first rows after the change differ from
    # what v1 would have given), and a restart after the change continues exactly.
    assert after[0] != read(v1, spec(), 4, state)[0][0]
    _, mid, _ = read(v2, grown, 2, state)
    rest, _, _ = read(v2, grown, 2, mid)
    assert rest == after[2:]
    assert np.asarray(after).max() < VOCAB
