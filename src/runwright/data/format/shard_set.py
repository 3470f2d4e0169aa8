"""Sharding: documents of one (source, split) go into size-bounded Megatron shards.

Shards are named `<source>-<split>-<nnnnn>` and cut when the next document would push a shard
past `max_tokens_per_shard` (a document is never split across shards). Each finished shard is
hashed for the manifest.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from runwright.data.format.dataset import file_sha256
from runwright.data.format.indexed_shard import IndexedWriter
from runwright.data.format.manifest import ShardRecord


class ShardSet:
    """Writes the shards of a dataset folder and returns their manifest records."""

    def __init__(self, folder: Path, dtype: np.dtype, max_tokens_per_shard: int) -> None:
        self.folder = Path(folder)
        self.dtype = np.dtype(dtype)
        self.max_tokens = max_tokens_per_shard
        self._open: dict[tuple[str, str], tuple[str, IndexedWriter]] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self.records: list[ShardRecord] = []

    def add(self, source: str, split: str, ids: Sequence[int] | np.ndarray) -> None:
        key = (source, split)
        n = len(ids)
        current = self._open.get(key)
        if current is not None and current[1].tokens and current[1].tokens + n > self.max_tokens:
            self._close(key)
            current = None
        if current is None:
            index = self._counts.get(key, 0)
            self._counts[key] = index + 1
            name = f"{source}-{split}-{index:05d}"
            current = (name, IndexedWriter(self.folder / name, self.dtype))
            self._open[key] = current
        current[1].add(ids)

    def _close(self, key: tuple[str, str]) -> None:
        name, writer = self._open.pop(key)
        documents = len(writer._lengths)
        bin_path, idx_path = writer.finish()
        self.records.append(
            ShardRecord(
                name=name,
                source=key[0],
                split=key[1],  # type: ignore[arg-type]
                dtype=self.dtype.name,
                documents=documents,
                tokens=writer.tokens,
                bin_bytes=bin_path.stat().st_size,
                idx_bytes=idx_path.stat().st_size,
                bin_sha256=file_sha256(bin_path),
                idx_sha256=file_sha256(idx_path),
            )
        )

    def finish(self) -> list[ShardRecord]:
        """Close every open shard; records sorted by (split, source, name) for a stable id."""
        for key in sorted(self._open):
            self._close(key)
        return sorted(self.records, key=lambda r: (r.split, r.source, r.name))
