"""The mixture's sources as the stream reads them: each source's train documents in shard order
(length, shard, first token), and the identity of the mixture that the cursor records.

A shard that failed verification at open (a loader that quarantines, data/read/quarantine.py)
has no readable index: its documents keep their number from the manifest, so every later draw is
the one it would have been, with the shard's mean length and no tokens to read.
"""

import numpy as np

from runwright.data.errors import DataError
from runwright.data.format.dataset import OpenDataset
from runwright.data.format.manifest import ShardRecord
from runwright.data.read.cursor import DataCursor
from runwright.data.read.stages import Stage, stages_identity, union_sources
from runwright.data.read.stream import SourceTable
from runwright.spec import DataSpec, canonical_json, sha256_hex


def source_tables(
    dataset: OpenDataset, spec: DataSpec, train: list[ShardRecord]
) -> list[SourceTable]:
    """One table per mixture source (the spec's, or every train source by size), with each
    document's length as read (or its unreadable shard's mean)."""
    manifest = dataset.manifest
    shard_index = {s.name: i for i, s in enumerate(train)}
    available = manifest.sources("train")
    mix = spec.mixture
    if mix.sources:
        # A staged mixture's later-stage sources join at weight 0 (stages.py).
        wanted = union_sources(spec)
    else:
        # No weights: every source in proportion to its size, each read once per epoch.
        wanted = []
        for name in available:
            mine = [s for s in train if s.source == name]
            size = sum(s.documents if mix.unit == "documents" else s.tokens for s in mine)
            wanted.append((name, float(size), "renormalise"))
    tables = []
    for name, weight, exhaustion in wanted:
        if name not in available:
            raise DataError(
                f"mixture source {name!r} is not in dataset {manifest.dataset_id[:12]}; its "
                f"train sources are {available}"
            )
        mine = [s for s in train if s.source == name]
        if not sum(s.documents for s in mine):
            raise DataError(f"mixture source {name!r} has no train documents; remove it")
        lengths, shard, offset = [], [], []
        for record in mine:
            opened = dataset.shards.get(record.name)
            if opened is not None:
                lengths.append(opened.lengths)
                offset.append(opened.token_offsets)
            else:
                mean = record.tokens // max(1, record.documents)
                lengths.append(np.full(record.documents, mean, dtype=np.int64))
                offset.append(np.zeros(record.documents, dtype=np.int64))
            shard.append(np.full(record.documents, shard_index[record.name], dtype=np.int64))
        tables.append(
            SourceTable(
                name,
                np.concatenate(lengths),
                np.concatenate(shard),
                np.concatenate(offset),
                weight,
                exhaustion,
            )
        )
    return tables


def identity_cursor(
    dataset: OpenDataset,
    spec: DataSpec,
    tables: list[SourceTable],
    stages: list[Stage] | None = None,
) -> DataCursor:
    """The cursor at the start of the sequence: what it was written for, and nothing consumed."""
    mix = spec.mixture
    mixture_key: dict[str, object] = {
        "unit": mix.unit,
        "sources": [[t.name, t.weight, t.exhaustion] for t in tables],
    }
    if stages is not None:
        mixture_key["stages"] = stages_identity(stages)
    names = [t.name for t in tables]
    return DataCursor(
        dataset_id=dataset.manifest.dataset_id,
        tokenizer_sha256=dataset.manifest.tokenizer.sha256,
        shuffle=spec.shuffle,
        mixture=mix.algorithm,
        packing=spec.packing,
        mixture_sha256=sha256_hex(canonical_json(mixture_key)),
        seed=spec.seed,
        sequence_length=spec.sequence_length,
        source_draws=dict.fromkeys(names, 0),
        source_units=dict.fromkeys(names, 0),
    )
