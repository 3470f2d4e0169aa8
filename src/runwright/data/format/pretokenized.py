"""Datasets from documents that are already token ids (tests, benchmarks, imported corpora).

`write_pretokenized` writes the same folder layout `runwright data build` does: Megatron shards,
a tokenizer.json and a sealed manifest. Without a tokenizer file it writes a placeholder
word-level tokenizer whose tokens are `<id>`, so the tokenizer hash still pins the vocabulary.
"""

import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models

from runwright import __version__
from runwright.data.format.dataset import file_sha256
from runwright.data.format.indexed_shard import token_dtype
from runwright.data.format.manifest import (
    DatasetManifest,
    InputRecord,
    Lineage,
    SourceStatistics,
    SplitBoundary,
    StageRecord,
    Statistics,
    TokenizerRecord,
    write_manifest,
)
from runwright.data.format.shard_set import ShardSet

EOD_TOKEN = "<|endoftext|>"


def length_histogram(lengths: Iterable[int]) -> dict[str, int]:
    """Documents per bucket [2^k, 2^(k+1)), keyed by the lower bound (0 for empty documents)."""
    hist: dict[int, int] = {}
    for n in lengths:
        low = 0 if n <= 0 else 1 << (int(n).bit_length() - 1)
        hist[low] = hist.get(low, 0) + 1
    return {str(k): hist[k] for k in sorted(hist)}


def write_pretokenized(
    folder: str | Path,
    documents: Mapping[str, Iterable[Sequence[int] | np.ndarray]],
    *,
    vocab_size: int,
    eod_token_id: int = 0,
    name: str = "pretokenized",
    eval_documents: Mapping[str, Iterable[Sequence[int] | np.ndarray]] | None = None,
    tokenizer_file: str | Path | None = None,
    max_tokens_per_shard: int = 1 << 26,
    inputs: Sequence[InputRecord] = (),
    stage: StageRecord | None = None,
) -> DatasetManifest:
    """Write a dataset folder from token-id documents per source; returns the sealed manifest.

    `inputs` and `stage` are the lineage to record (the files the documents came from, and the
    stage that produced them with its parameters); by default a `pretokenized` stage.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok_path = folder / "tokenizer.json"
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, tok_path)
        eod = Tokenizer.from_file(str(tok_path)).id_to_token(eod_token_id) or EOD_TOKEN
    else:
        vocab = {f"<{i}>": i for i in range(vocab_size)}
        vocab[EOD_TOKEN] = eod_token_id
        del vocab[f"<{eod_token_id}>"]
        Tokenizer(models.WordLevel(vocab, unk_token=EOD_TOKEN)).save(str(tok_path))
        eod = EOD_TOKEN
    shards = ShardSet(folder, token_dtype(vocab_size), max_tokens_per_shard)
    splits: dict[str, dict[str, SourceStatistics]] = {}
    for split, by_source in (("train", documents), ("eval", eval_documents or {})):
        for source, docs in by_source.items():
            lengths = []
            for doc in docs:
                shards.add(source, split, doc)
                lengths.append(len(doc))
            splits.setdefault(split, {})[source] = SourceStatistics(
                documents=len(lengths),
                tokens=sum(lengths),
                length_histogram=length_histogram(lengths),
            )
    records = shards.finish()
    train_docs = sum(s.documents for s in splits.get("train", {}).values())
    manifest = DatasetManifest(
        name=name,
        shards=records,
        tokenizer=TokenizerRecord(
            sha256=file_sha256(tok_path),
            vocab_size=vocab_size,
            eod_token=eod,
            eod_token_id=eod_token_id,
            special_tokens={eod: eod_token_id},
            trained=False,
        ),
        lineage=Lineage(
            recipe_name=name,
            inputs=list(inputs),
            stages=[
                stage or StageRecord(name="pretokenized", parameters={"documents": train_docs})
            ],
            code_version=f"runwright {__version__}",
        ),
        split=SplitBoundary(
            eval_fraction=0.0, eval_seed=0, eval_documents=0, train_removed_as_eval_duplicates=0
        ),
        statistics=Statistics(
            splits=splits,
            records_read={},
            filtered={},
            exact_duplicates={},
            near_duplicates={},
            quarantined={},
            duplicate_rate=0.0,
        ),
    ).sealed()
    write_manifest(folder, manifest)
    return manifest
