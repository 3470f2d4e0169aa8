"""The loader: exact order, resume after prefetch, world-size changes, refusals, counts."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwright.data import (
    CursorMismatchError,
    DataLoader,
    ManifestError,
    ShardCorruptError,
    SourceExhaustedError,
    gaps_and_overlaps,
    join,
)
from runwright.spec import DataSpec

from .conftest import EOD, make_dataset


def spec(**overrides: object) -> DataSpec:
    base = {
        "sequence_length": 16,
        "seed": 3,
        "mixture": {"sources": [{"name": "code", "weight": 2}, {"name": "prose", "weight": 1}]},
    }
    return DataSpec.model_validate({**base, **overrides})


def read_global(
    folder: Path, data: DataSpec, steps: int, dp_size: int, state: dict | None = None, **kw: object
) -> tuple[list[np.ndarray], dict | None, list]:
    """Global rows of `steps` steps read by dp_size ranks, the cursor after, and the ledgers."""
    per_rank, cursor, ledgers = [], None, []
    for rank in range(dp_size):
        loader = DataLoader(
            folder, data, global_batch_samples=8, dp_rank=rank, dp_size=dp_size, **kw
        )
        if state is not None:
            loader.load_state_dict(state)
        rows = [b.tokens.numpy().copy() for _, b in zip(range(steps), loader, strict=False)]
        cursor = loader.state_dict()
        ledgers.append(loader.ledger)
        loader.close()
        per_rank.append(rows)
    steps_read = len(per_rank[0])
    glob = [np.concatenate([per_rank[r][s] for r in range(dp_size)]) for s in range(steps_read)]
    return glob, cursor, ledgers


def test_resume_after_prefetch_ran_ahead_neither_skips_nor_repeats(two_source_dataset) -> None:
    folder, _, _ = two_source_dataset
    data = spec()
    full, _, _ = read_global(folder, data, 12, 1)
    loader = DataLoader(folder, data, global_batch_samples=8, prefetch_batches=4)
    first = [next(loader).tokens.numpy().copy() for _ in range(5)]
    state = loader.state_dict()  # readers are several steps ahead by now
    assert state["step"] == 5 and state["position"] == 40
    loader.close()
    rest, _, _ = read_global(folder, data, 7, 1, state=json.loads(json.dumps(state)))
    assert all(np.array_equal(a, b) for a, b in zip(first + rest, full, strict=True))


@pytest.mark.parametrize("packing", ["concat-v1", "pad-v1"])
def test_changing_dp_size_keeps_the_global_sequence(two_source_dataset, packing: str) -> None:
    folder, _, _ = two_source_dataset
    data = spec(packing=packing)
    full, _, _ = read_global(folder, data, 9, 1)
    a, cursor, ledgers_a = read_global(folder, data, 3, 2)
    b, cursor, ledgers_b = read_global(folder, data, 3, 4, state=cursor)
    c, _, ledgers_c = read_global(folder, data, 3, 1, state=cursor)
    assert all(np.array_equal(x, y) for x, y in zip(a + b + c, full, strict=True))
    ledger = join(ledgers_a[0], ledgers_b[0], ledgers_c[0])
    assert gaps_and_overlaps(ledger) == []
    assert (ledger.ranges[0].first_sample, ledger.ranges[-1].end_sample) == (0, 72)


@given(stop=st.integers(0, 25), dp=st.sampled_from([1, 2, 4]))
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_cursor_round_trip_continues_the_sequence(two_source_dataset, stop: int, dp: int) -> None:
    folder, _, _ = two_source_dataset
    data = spec(packing="concat-v1", sequence_length=24)
    full, _, _ = read_global(folder, data, stop + 3, 1)
    _, cursor, _ = read_global(folder, data, stop, dp)
    rest, _, _ = read_global(folder, data, 3, 1, state=cursor)
    assert all(np.array_equal(x, y) for x, y in zip(rest, full[stop:], strict=True))


def test_batch_fields_and_counts(two_source_dataset) -> None:
    folder, manifest, _ = two_source_dataset
    with DataLoader(folder, spec(), global_batch_samples=8, dp_rank=1, dp_size=2) as loader:
        batch = next(loader)
        assert batch.tokens.shape == (4, 16) and batch.labels.shape == (4, 16)
        assert batch["loss_mask"].dtype.is_floating_point
        assert batch.device_tokens == 64 and batch.padded_tokens == 0
        assert batch.loss_tokens == int(batch.loss_mask.sum())
        assert np.array_equal(batch.tokens[:, 1:].numpy(), batch.labels[:, :-1].numpy())
        stats = loader.stats
        assert stats.batches_total == 1 and stats.bytes_read_total > 0
        assert stats.input_wait_seconds_total >= 0
        assert loader.vocab_size == manifest.tokenizer.vocab_size
        assert loader.eod_token_id == EOD and loader.dataset_id == manifest.dataset_id


def test_quota_mixture_counts_follow_the_weights(two_source_dataset) -> None:
    folder, _, _ = two_source_dataset
    with DataLoader(folder, spec(), global_batch_samples=8) as loader:
        for _ in range(10):
            next(loader)
        draws = loader.cursor.source_draws
    # 2:1 quotas: within one document of 2/3 of all draws.
    total = draws["code"] + draws["prose"]
    assert abs(draws["code"] - 2 * total / 3) <= 1


def test_token_unit_mixture_balances_tokens(two_source_dataset) -> None:
    folder, _, _ = two_source_dataset
    sources = [{"name": "code", "weight": 1}, {"name": "prose", "weight": 1}]
    data = spec(mixture={"unit": "tokens", "sources": sources})
    with DataLoader(folder, data, global_batch_samples=8) as loader:
        for _ in range(20):
            next(loader)
        units = loader.cursor.source_units
    # Equal weights in tokens: within one document (< 80 tokens + EOD) of each other.
    assert abs(units["code"] - units["prose"]) <= 81


def test_exhaustion_policies(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    make_dataset(folder, {"big": 200, "small": 5}, mean_tokens=8)

    def mix(policy: str, big: str = "repeat") -> DataSpec:
        return spec(
            mixture={
                "sources": [
                    {"name": "big", "weight": 1, "exhaustion": big},
                    {"name": "small", "weight": 1, "exhaustion": policy},
                ]
            }
        )

    with (
        DataLoader(folder, mix("error"), global_batch_samples=4) as loader,
        pytest.raises(SourceExhaustedError, match="small"),
    ):
        for _ in range(100):
            next(loader)
    # stop: the epoch ends with `small` (about 10 documents of 8-16 tokens in 64-token steps);
    # the tail shorter than one global step is dropped.
    with DataLoader(folder, mix("stop"), global_batch_samples=4, epochs=1) as loader:
        batches = list(loader)
        assert 0 < len(batches) <= 3
        assert loader.cursor.source_draws["small"] <= 5
    with DataLoader(folder, mix("stop"), global_batch_samples=4) as loader:
        for _ in range(10):
            next(loader)
        assert loader.cursor.epoch >= 1
    # renormalise: `big` goes on alone until it too runs out.
    with DataLoader(
        folder, mix("renormalise", "renormalise"), global_batch_samples=4, epochs=1
    ) as loader:
        list(loader)
        assert loader.cursor.source_draws["small"] == 5
        assert loader.cursor.source_draws["big"] > 150
    with DataLoader(folder, mix("repeat"), global_batch_samples=4) as loader:
        for _ in range(30):
            next(loader)
        assert loader.cursor.source_draws["small"] > 5


def test_default_mixture_reads_every_document_once_per_epoch(two_source_dataset) -> None:
    folder, _, docs = two_source_dataset
    data = DataSpec(sequence_length=16, packing="pad-v1")
    total = sum(len(d) for d in docs.values())
    with DataLoader(folder, data, global_batch_samples=1, epochs=1) as loader:
        rows = [b.tokens[0].numpy() for b in loader]
    assert len(rows) == total
    firsts = sorted(int(r[0]) for r in rows)
    expected = sorted(int(d[0]) if len(d) else EOD for ds in docs.values() for d in ds)
    assert firsts == expected


def test_refuses_other_dataset_unless_coverage_only(tmp_path: Path, two_source_dataset) -> None:
    folder, _, _ = two_source_dataset
    other = tmp_path / "other"
    make_dataset(other, {"code": 50, "prose": 50}, seed=9)
    with DataLoader(folder, spec(), global_batch_samples=8) as loader:
        next(loader)
        state = loader.state_dict()
    loader = DataLoader(other, spec(), global_batch_samples=8)
    with pytest.raises(CursorMismatchError, match="dataset_id"):
        loader.load_state_dict(state)
    loader.load_state_dict(state, coverage_only=True)
    batch = next(loader)
    assert batch.step == 1 and loader.cursor.source_draws["code"] > state["source_draws"]["code"]
    # Taken, but never silently: the change is in the cursor every later checkpoint carries.
    (change,) = loader.cursor.source_changes
    assert (change.from_dataset_id, change.mapping) == (state["dataset_id"], "coverage-v1")
    assert change.to_dataset_id == loader.cursor.dataset_id != state["dataset_id"]
    loader.close()
    with (
        DataLoader(folder, spec(packing="pad-v1"), global_batch_samples=8) as pad,
        pytest.raises(CursorMismatchError, match="packing"),
    ):
        pad.load_state_dict(state)


def test_spec_manifest_id_and_tokenizer_are_checked(two_source_dataset) -> None:
    folder, _, _ = two_source_dataset
    with pytest.raises(ManifestError, match="manifest_id"):
        DataLoader(folder, spec(manifest_id="0" * 64), global_batch_samples=8)
    with pytest.raises(ManifestError, match="tokenizer"):
        DataLoader(folder, spec(), global_batch_samples=8, tokenizer_sha256="f" * 64)


def test_corrupted_shard_is_named_by_the_loader(two_source_dataset) -> None:
    folder, manifest, _ = two_source_dataset
    victim = manifest.shards[1]
    path = folder / f"{victim.name}.bin"
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ShardCorruptError, match=victim.name):
        DataLoader(folder, spec(), global_batch_samples=8)


def test_bad_batch_geometry_says_what_to_change(two_source_dataset) -> None:
    folder, _, _ = two_source_dataset
    from runwright.data import DataError

    with pytest.raises(DataError, match="multiple of dp_size=3"):
        DataLoader(folder, spec(), global_batch_samples=8, dp_rank=0, dp_size=3)
