"""`runwright data inspect|verify`: a dataset's statistics, and a re-hash of every shard."""

from pathlib import Path
from typing import Any

from pydantic import Field

from runwright.data.format.dataset import file_sha256, localise, shard_problems
from runwright.data.format.manifest import read_manifest
from runwright.records import Record


class ShardVerdict(Record):
    """Verification of one shard."""

    name: str
    """Shard file prefix."""
    ok: bool
    """True when size, digest and index all match the manifest."""
    problems: list[str] = Field(default_factory=list)
    """What did not match."""


class VerifyReport(Record):
    """Verification of a whole dataset folder."""

    dataset_id: str
    """Dataset id from the manifest (itself checked against the manifest content)."""
    ok: bool
    """True when every shard and the tokenizer match."""
    shards: list[ShardVerdict]
    """Per-shard verdicts."""
    tokenizer_ok: bool
    """Whether tokenizer.json matches its recorded hash."""

    @property
    def corrupt(self) -> list[str]:
        return [s.name for s in self.shards if not s.ok]


def verify_dataset(path: str | Path) -> VerifyReport:
    """Re-hash every shard and the tokenizer against the manifest."""
    folder = localise(path)
    manifest = read_manifest(folder)
    verdicts = []
    for shard in manifest.shards:
        problems = shard_problems(folder, shard, "digest")
        verdicts.append(ShardVerdict(name=shard.name, ok=not problems, problems=problems))
    tok = folder / manifest.tokenizer.file
    tokenizer_ok = tok.exists() and file_sha256(tok) == manifest.tokenizer.sha256
    return VerifyReport(
        dataset_id=manifest.dataset_id,
        ok=tokenizer_ok and all(v.ok for v in verdicts),
        shards=verdicts,
        tokenizer_ok=tokenizer_ok,
    )


def describe_dataset(path: str | Path) -> dict[str, Any]:
    """Identity and statistics of a dataset, for tables and --json."""
    manifest = read_manifest(localise(path))
    rows = []
    for split, by_source in sorted(manifest.statistics.splits.items()):
        for source, s in sorted(by_source.items()):
            shards = [x for x in manifest.shards if x.split == split and x.source == source]
            rows.append(
                {
                    "split": split,
                    "source": source,
                    "documents": s.documents,
                    "tokens": s.tokens,
                    "chars_per_token": s.chars_per_token,
                    "shards": len(shards),
                    "bytes": sum(x.bin_bytes + x.idx_bytes for x in shards),
                }
            )
    stats = manifest.statistics
    return {
        "dataset_id": manifest.dataset_id,
        "name": manifest.name,
        "tokenizer": manifest.tokenizer.model_dump(),
        "sources": rows,
        "records_read": stats.records_read,
        "filtered": stats.filtered,
        "exact_duplicates": stats.exact_duplicates,
        "near_duplicates": stats.near_duplicates,
        "quarantined": stats.quarantined,
        "duplicate_rate": stats.duplicate_rate,
        "split": manifest.split.model_dump(),
        "length_histogram": {
            f"{split}/{source}": s.length_histogram
            for split, by_source in sorted(stats.splits.items())
            for source, s in sorted(by_source.items())
        },
        "tags": manifest.tags,
        "build": manifest.build.model_dump() if manifest.build else None,
    }
