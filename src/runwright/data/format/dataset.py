"""Opening a built dataset: manifest, shards, integrity checks, and a local cache for URLs.

A dataset folder may be local or any fsspec URL. A URL is copied into a content-addressed local
cache (`<cache>/<dataset_id>/`) file by file, each file checked against the manifest digest
before it is published under its final name (seed 003: "cache fill is verified before publish"),
then memory-mapped like a local folder.
"""

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import fsspec
import numpy as np

from runwright.data.errors import ManifestError, ShardCorruptError
from runwright.data.format.indexed_shard import IndexedShard, open_shard
from runwright.data.format.manifest import (
    MANIFEST_FILE,
    DatasetManifest,
    ShardRecord,
    read_manifest,
)

Verification = Literal["digest", "size"]


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


def shard_problems(folder: Path, shard: ShardRecord, verification: Verification) -> list[str]:
    """What is wrong with one shard's files compared with the manifest (empty when fine)."""
    problems: list[str] = []
    for suffix, size, digest in (
        (".bin", shard.bin_bytes, shard.bin_sha256),
        (".idx", shard.idx_bytes, shard.idx_sha256),
    ):
        path = folder / f"{shard.name}{suffix}"
        if not path.exists():
            problems.append(f"{path.name}: missing")
            continue
        actual = path.stat().st_size
        if actual != size:
            problems.append(f"{path.name}: {actual} bytes, manifest says {size}")
        elif verification == "digest" and file_sha256(path) != digest:
            problems.append(f"{path.name}: sha256 differs from the manifest")
    if not problems:
        try:
            opened = open_shard(folder / shard.name)
        except ShardCorruptError as exc:
            problems.append(str(exc))
        else:
            if opened.documents != shard.documents or int(opened.lengths.sum()) != shard.tokens:
                problems.append(
                    f"{shard.name}.idx: {opened.documents} documents / {int(opened.lengths.sum())}"
                    f" tokens, manifest says {shard.documents} / {shard.tokens}"
                )
    return problems


def _default_cache() -> Path:
    base = os.environ.get("RUNWRIGHT_DATA_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "runwright", "datasets"
    )
    return Path(base)


def localise(dataset_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A local folder holding the dataset: the path itself, or a verified cache of a URL."""
    text = str(dataset_path)
    if "://" not in text or text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    fs, root = fsspec.core.url_to_fs(text)
    try:
        raw = fs.cat_file(f"{root.rstrip('/')}/{MANIFEST_FILE}")
    except FileNotFoundError:
        raise ManifestError(f"no {MANIFEST_FILE} under {text}") from None
    manifest = DatasetManifest.model_validate(json.loads(raw))
    local = Path(cache_dir) if cache_dir else _default_cache()
    local = local / manifest.dataset_id
    local.mkdir(parents=True, exist_ok=True)
    wanted = [(f"{s.name}.bin", s.bin_sha256) for s in manifest.shards]
    wanted += [(f"{s.name}.idx", s.idx_sha256) for s in manifest.shards]
    wanted.append((manifest.tokenizer.file, manifest.tokenizer.sha256))
    for name, digest in wanted:
        final = local / name
        if final.exists():
            continue
        tmp = local / f".{name}.partial"
        fs.get_file(f"{root.rstrip('/')}/{name}", str(tmp))
        if file_sha256(tmp) != digest:
            tmp.unlink()
            raise ShardCorruptError(
                f"{text}/{name} does not match its manifest digest; the remote copy is corrupt"
            )
        tmp.replace(final)
    (local / MANIFEST_FILE).write_bytes(raw)
    return local


@dataclass(frozen=True)
class OpenDataset:
    """A dataset ready to read: its folder, manifest and opened shards (by shard name)."""

    folder: Path
    manifest: DatasetManifest
    shards: dict[str, IndexedShard]

    def source_documents(self, source: str, split: str = "train") -> tuple[list[str], np.ndarray]:
        names = [s.name for s in self.manifest.shards if s.source == source and s.split == split]
        lengths = [self.shards[n].lengths for n in names]
        return names, (np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64))


def open_dataset(
    dataset_path: str | Path,
    *,
    verification: Verification = "digest",
    cache_dir: str | Path | None = None,
    split: str | None = None,
) -> OpenDataset:
    """Open a dataset, checking each shard against the manifest.

    `digest` re-hashes every shard (reads each byte once, which also warms the page cache);
    `size` checks sizes and index structure only. A mismatch raises ShardCorruptError naming the
    shard.
    """
    folder = localise(dataset_path, cache_dir)
    manifest = read_manifest(folder)
    shards: dict[str, IndexedShard] = {}
    for record in manifest.shards:
        if split is not None and record.split != split:
            continue
        problems = shard_problems(folder, record, verification)
        if problems:
            raise ShardCorruptError(
                f"shard {record.name} of dataset {manifest.dataset_id[:12]} is corrupt: "
                + "; ".join(problems)
                + ". Run `runwright data verify` on the dataset and rebuild or restore it."
            )
        shards[record.name] = open_shard(folder / record.name)
    return OpenDataset(folder=folder, manifest=manifest, shards=shards)
