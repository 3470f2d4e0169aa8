"""`runwright data inspect|verify`: a dataset's statistics, and a re-check of everything the
manifest states.

`verify` trusts nothing the manifest says about itself: a manifest whose statistics were edited
and whose id was recomputed is self-consistent, so it re-hashes every shard and the tokenizer,
recounts documents, tokens and length histograms per shard from the index files, checks the
token ids against the vocabulary and the vocabulary against tokenizer.json, and recomputes the
statistics the counts imply. Whatever it cannot read is a problem, never skipped.
"""

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field
from tokenizers import Tokenizer

from runwright.data.format.dataset import check_shard, file_sha256, localise
from runwright.data.format.indexed_shard import IndexedShard
from runwright.data.format.manifest import DatasetManifest, read_manifest
from runwright.data.format.pretokenized import length_histogram
from runwright.data.format.profile import profile_problems
from runwright.data.format.untrusted import MAX_TOKENIZER_BYTES, member
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
    """Whether tokenizer.json matches its recorded hash, vocabulary size and EOD id."""
    problems: list[str] = Field(default_factory=list)
    """Dataset-wide problems: statistics the shards do not bear out, the tokenizer, nothing to
    verify."""

    @property
    def corrupt(self) -> list[str]:
        return [s.name for s in self.shards if not s.ok]


def verify_dataset(path: str | Path) -> VerifyReport:
    """Re-hash and recount every shard and the tokenizer against the manifest."""
    folder = localise(path)
    manifest = read_manifest(folder)
    verdicts = []
    opened: dict[str, IndexedShard] = {}
    for shard in manifest.shards:
        problems, shard_file = check_shard(folder, shard, "digest")
        if shard_file is not None:
            problems += _token_range(shard_file, manifest.tokenizer.vocab_size)
            if not problems:
                opened[shard.name] = shard_file
        verdicts.append(ShardVerdict(name=shard.name, ok=not problems, problems=problems))
    tokenizer_problems = _tokenizer_problems(folder, manifest)
    problems = tokenizer_problems + _statistics_problems(manifest, opened)
    problems += profile_problems(manifest.statistics.profile, manifest.statistics.splits)
    if not manifest.shards:
        problems.append("the manifest lists no shards: there is nothing to verify")
    return VerifyReport(
        dataset_id=manifest.dataset_id,
        ok=not problems and all(v.ok for v in verdicts),
        shards=verdicts,
        tokenizer_ok=not tokenizer_problems,
        problems=problems,
    )


def _token_range(shard: IndexedShard, vocab_size: int) -> list[str]:
    if not shard.tokens.shape[0]:
        return []
    low, high = int(shard.tokens.min()), int(shard.tokens.max())
    if low < 0 or high >= vocab_size:
        return [
            f"{shard.bin_path.name}: token id {high if high >= vocab_size else low} is "
            f"outside the vocabulary [0, {vocab_size})"
        ]
    return []


def _tokenizer_problems(folder: Path, manifest: DatasetManifest) -> list[str]:
    record = manifest.tokenizer
    name = record.file
    try:
        path = member(folder, name)
        if not path.is_file():
            return [f"{name}: missing (or not a regular file)"]
        if path.stat().st_size > MAX_TOKENIZER_BYTES:
            return [f"{name}: over the {MAX_TOKENIZER_BYTES:,}-byte tokenizer limit"]
        if file_sha256(path) != record.sha256:
            return [f"{name}: sha256 differs from the manifest"]
        tok = Tokenizer.from_file(str(path))
    except (OSError, ValueError) as exc:
        return [f"{name}: not verified, cannot be read ({exc})"]
    except Exception as exc:  # tokenizers raises plain Exception for a file it cannot parse
        return [f"{name}: not verified, not a tokenizer ({exc})"]
    problems = []
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if vocab != record.vocab_size:
        problems.append(f"{name}: vocabulary of {vocab} ids, manifest says {record.vocab_size}")
    eod = tok.token_to_id(record.eod_token)
    if eod != record.eod_token_id:
        problems.append(
            f"{name}: {record.eod_token!r} has id {eod}, manifest says {record.eod_token_id}"
        )
    return problems


def _statistics_problems(manifest: DatasetManifest, opened: dict[str, IndexedShard]) -> list[str]:
    """The manifest's statistics against counts recomputed from the shards (those that opened:
    a shard that did not is already a problem of its own)."""
    problems: list[str] = []
    stats = manifest.statistics
    lengths: dict[tuple[str, str], list[np.ndarray]] = {}
    for shard in manifest.shards:
        lengths.setdefault((shard.split, shard.source), [])
    present = set(lengths)
    for shard in manifest.shards:
        if shard.name in opened:
            lengths[(shard.split, shard.source)].append(opened[shard.name].lengths)
    # Only a (split, source) whose every shard opened can be recounted.
    complete = present - {(s.split, s.source) for s in manifest.shards if s.name not in opened}
    stated = {(sp, so): s for sp, by in stats.splits.items() for so, s in by.items()}
    for key in sorted(set(stated) - present):
        if stated[key].documents or stated[key].tokens:
            problems.append(
                f"statistics.splits.{key[0]}.{key[1]}: states {stated[key].documents} documents "
                "but no shard holds that split and source"
            )
    for key in sorted(complete):
        where = f"statistics.splits.{key[0]}.{key[1]}"
        s = stated.get(key)
        if s is None:
            problems.append(f"{where}: missing, though shards of that split and source exist")
            continue
        counted = np.concatenate(lengths[key])
        docs, tokens = int(counted.shape[0]), int(counted.sum())
        if (s.documents, s.tokens) != (docs, tokens):
            problems.append(
                f"{where}: states {s.documents} documents / {s.tokens} tokens, the shards hold "
                f"{docs} / {tokens}"
            )
        if s.length_histogram != length_histogram(counted.tolist()):
            problems.append(f"{where}.length_histogram: does not match the shards' lengths")
        expected_ratio = round(s.chars / tokens, 4) if tokens else 0.0
        if abs(s.chars_per_token - expected_ratio) > 1e-4:
            problems.append(
                f"{where}.chars_per_token: {s.chars_per_token}, but chars / tokens is "
                f"{expected_ratio}"
            )
    if complete == present:
        eval_docs = sum(opened[s.name].documents for s in manifest.shards if s.split == "eval")
        if manifest.split.eval_documents != eval_docs:
            problems.append(
                f"split.eval_documents: {manifest.split.eval_documents}, the eval shards hold "
                f"{eval_docs}"
            )
    problems += _ledger_problems(manifest, stated)
    return problems


def _ledger_problems(manifest: DatasetManifest, stated: dict[tuple[str, str], Any]) -> list[str]:
    """Every record read was kept, filtered, deduplicated or quarantined (built datasets only;
    an import or a pretokenized dataset records no reads). A reader error quarantines a whole
    input without counting records, so reads lie between the drops and drops + quarantined."""
    stats = manifest.statistics
    if not stats.records_read:
        return []
    problems = []
    kept: Counter[str] = Counter()
    for (_split, source), s in stated.items():
        kept[source] += s.documents
    candidates = duplicates = 0
    for source, read in sorted(stats.records_read.items()):
        exact = stats.exact_duplicates.get(source, 0)
        near = stats.near_duplicates.get(source, 0)
        low = kept[source] + sum(stats.filtered.get(source, {}).values()) + exact + near
        high = low + stats.quarantined.get(source, 0)
        if not low <= read <= high:
            problems.append(
                f"statistics.records_read.{source}: {read}, but kept + filtered + duplicates "
                f"({low}) and quarantined ({high - low}) allow only {low}..{high}"
            )
        candidates += kept[source] + exact + near
        duplicates += exact + near
    rate = round(duplicates / candidates, 6) if candidates else 0.0
    if abs(stats.duplicate_rate - rate) > 1e-6:
        problems.append(
            f"statistics.duplicate_rate: {stats.duplicate_rate}, the counts give {rate}"
        )
    unknown = sorted(set(kept) - set(stats.records_read))
    if unknown:
        problems.append(f"statistics.records_read: no entry for sources {unknown}")
    return problems


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
        "profile": stats.profile.model_dump() if stats.profile else None,
    }
