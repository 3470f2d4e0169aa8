"""Each label's (source, length bucket) group, checked against documents whose every token is
the document's own id: the input token at a counted label names its document, so its source and
length are known without the loader."""

from pathlib import Path

import numpy as np
import pytest

from runwright.data import DataError, DataLoader
from runwright.data.format.pretokenized import write_pretokenized
from runwright.data.read.loss_groups import LossGroups
from runwright.spec import DataSpec

EDGES = (8, 24)


def labelled_dataset(folder: Path) -> dict[int, tuple[str, int]]:
    """Write `short` (lengths 2..12) and `long` (lengths 10..60) documents; token id d + 1 for
    every token of document d. Returns id -> (source, length)."""
    rng = np.random.default_rng(7)
    known: dict[int, tuple[str, int]] = {}
    docs: dict[str, list[np.ndarray]] = {"short": [], "long": []}
    next_id = 1
    for name, low, high, count in (("short", 2, 12, 90), ("long", 10, 60, 40)):
        for length in rng.integers(low, high, size=count):
            docs[name].append(np.full(int(length), next_id, dtype=np.int64))
            known[next_id] = (name, int(length))
            next_id += 1
    write_pretokenized(folder, docs, vocab_size=256, eod_token_id=0, max_tokens_per_shard=500)
    return known


@pytest.mark.parametrize("packing", ["concat-v1", "pad-v1"])
def test_every_counted_label_is_in_its_documents_group(tmp_path: Path, packing: str) -> None:
    known = labelled_dataset(tmp_path / "ds")
    data = DataSpec.model_validate(
        {
            "sequence_length": 16,
            "packing": packing,
            "mixture": {"sources": [{"name": "short", "weight": 1}, {"name": "long", "weight": 1}]},
        }
    )
    loader = DataLoader(tmp_path / "ds", data, global_batch_samples=8, loss_length_buckets=EDGES)
    groups = loader.loss_groups
    assert groups is not None and groups.sources == ("short", "long")
    seen = set()
    for _, batch in zip(range(6), loader, strict=False):
        mask = batch.loss_mask.numpy() > 0
        inputs, ids = batch.tokens.numpy()[mask], batch.loss_group.numpy()[mask]
        source, length = zip(*(known[int(t)] for t in inputs), strict=True)
        expected = np.asarray([groups.sources.index(s) for s in source]) * groups.buckets
        expected += groups.bucket_of(np.asarray(length))
        assert np.array_equal(ids, expected)
        counts = np.bincount(ids, minlength=groups.size)
        assert batch.group_loss_tokens == tuple(counts.tolist())
        assert sum(batch.group_loss_tokens) == batch.loss_tokens
        seen.update(np.flatnonzero(counts).tolist())
    loader.close()
    assert len(seen) >= 4  # both sources, short and long documents


def test_buckets_are_named_by_their_inclusive_bounds() -> None:
    groups = LossGroups(("a", "b"), (128, 512))
    assert groups.bucket_labels() == ["1-128", "129-512", ">512"]
    assert groups.bucket_of(np.asarray([1, 128, 129, 512, 513])).tolist() == [0, 0, 1, 1, 2]
    by_source, by_length = groups.marginals([1.0, 2.0, 0.0, 3.0, 0.0, 5.0], [1, 2, 0, 3, 0, 5])
    assert by_source == {"a": [3.0, 3], "b": [8.0, 8]}
    assert by_length == {"1-128": [4.0, 4], "129-512": [2.0, 2], ">512": [5.0, 5]}


def test_unordered_buckets_are_refused_with_the_fix() -> None:
    with pytest.raises(DataError, match="strictly ascending"):
        LossGroups(("a",), (512, 128))
