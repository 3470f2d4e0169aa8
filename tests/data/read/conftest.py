"""Shared fixtures: small pre-tokenized datasets made in tmp_path."""

from pathlib import Path

import numpy as np
import pytest

from runwright.data.format.pretokenized import write_pretokenized

VOCAB = 1000
EOD = 0


def random_documents(seed: int, count: int, mean_tokens: int, low: int = 1) -> list[np.ndarray]:
    """Documents of random length whose tokens encode (document, position) for easy checks."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, 2 * mean_tokens, size=count)
    return [rng.integers(1, VOCAB, size=int(n), dtype=np.int64) for n in lengths]


def make_dataset(folder: Path, sizes: dict[str, int], mean_tokens: int = 40, seed: int = 0):
    docs = {
        name: random_documents(seed + k, count, mean_tokens)
        for k, (name, count) in enumerate(sizes.items())
    }
    manifest = write_pretokenized(
        folder, docs, vocab_size=VOCAB, eod_token_id=EOD, max_tokens_per_shard=2000
    )
    return manifest, docs


@pytest.fixture
def two_source_dataset(tmp_path: Path):
    """(folder, manifest, documents): `code` 120 docs and `prose` 60 docs, several shards each."""
    folder = tmp_path / "ds"
    manifest, docs = make_dataset(folder, {"code": 120, "prose": 60})
    return folder, manifest, docs
