"""DatasetManifest: the content-addressed identity of a built dataset.

`dataset_id = sha256(canonical JSON of the manifest without `dataset_id` and `build`)`. The
hashed part holds only content and how it was derived (shard digests, tokenizer hash, inputs by
relative path and digest, stage parameters, statistics), never timestamps or absolute paths, so
building the same recipe over the same inputs twice gives the same id. `build` records where and
when this copy was built, for people, outside the hash.
"""

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from runwright.data.errors import ManifestError
from runwright.records import Record
from runwright.spec import canonical_json, sha256_hex

MANIFEST_SCHEMA = "runwright-dataset-v1"
MANIFEST_FILE = "manifest.json"


class ShardRecord(Record):
    """One token shard (`<name>.bin` + `<name>.idx`)."""

    name: str
    """File prefix inside the dataset folder."""
    source: str
    """Source the documents came from."""
    split: Literal["train", "eval"]
    """Split the shard belongs to."""
    dtype: str
    """Token dtype (numpy name), matching the .idx dtype code."""
    documents: int = Field(ge=0)
    """Documents in the shard."""
    tokens: int = Field(ge=0)
    """Tokens in the shard (EOD not stored; packing adds it)."""
    bin_bytes: int = Field(ge=0)
    """Size of the .bin file."""
    idx_bytes: int = Field(ge=0)
    """Size of the .idx file."""
    bin_sha256: str
    """sha256 of the .bin file."""
    idx_sha256: str
    """sha256 of the .idx file."""


class TokenizerRecord(Record):
    """The tokenizer whose ids the shards hold."""

    file: str = "tokenizer.json"
    """Tokenizer file inside the dataset folder."""
    sha256: str
    """sha256 of that file."""
    vocab_size: int = Field(gt=0)
    """Number of ids (the model's embedding rows must cover it)."""
    eod_token: str
    """End-of-document token text."""
    eod_token_id: int = Field(ge=0)
    """End-of-document token id used by packing."""
    special_tokens: dict[str, int] = Field(default_factory=dict)
    """Every special token and its id."""
    trained: bool
    """True when the build trained it from the recipe, False when it was loaded."""


class InputRecord(Record):
    """One input file of a source."""

    source: str
    """Source name."""
    path: str
    """Path relative to the source's base folder (never absolute)."""
    bytes: int = Field(ge=0)
    """Size in bytes."""
    sha256: str
    """Content digest."""


class StageRecord(Record):
    """One build stage and the parameters it ran with."""

    name: str
    """Stage name, e.g. `normalise`, `near-dedup`."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Parameters that change its output."""


class Lineage(Record):
    """How the dataset was derived."""

    recipe_name: str
    """Recipe name."""
    inputs: list[InputRecord]
    """Every input file with its digest."""
    stages: list[StageRecord]
    """Stages in order, with parameters."""
    code_version: str
    """runwright version and build algorithm that produced the dataset."""


class SplitBoundary(Record):
    """How eval was separated from train, and what that removed."""

    eval_fraction: float = Field(ge=0.0, le=1.0)
    """Share of unique documents selected for eval (by hash)."""
    eval_seed: int
    """Seed of the eval selection."""
    eval_documents: int = Field(ge=0)
    """Documents in eval."""
    train_removed_as_eval_duplicates: int = Field(ge=0)
    """Train documents dropped because they nearly duplicate an eval document."""
    near_dedup_threshold: float | None = None
    """Jaccard threshold of near dedup, or None when near dedup was off."""
    dedup_scope: str = "all sources, before the split"
    """Which documents exact and near dedup compared."""


class SourceStatistics(Record):
    """Counts for one source and split."""

    documents: int = 0
    """Documents kept."""
    tokens: int = 0
    """Tokens kept."""
    chars: int = 0
    """Characters kept."""
    chars_per_token: float = 0.0
    """chars / tokens (tokenizer compression)."""
    length_histogram: dict[str, int] = Field(default_factory=dict)
    """Documents per token-length bucket `[2^k, 2^(k+1))`, keyed by the lower bound."""


class Statistics(Record):
    """What the build kept and dropped."""

    splits: dict[str, dict[str, SourceStatistics]]
    """Split -> source -> counts."""
    records_read: dict[str, int]
    """Records read per source."""
    filtered: dict[str, dict[str, int]]
    """Source -> reason -> records dropped by filters."""
    exact_duplicates: dict[str, int]
    """Source -> records dropped as exact duplicates."""
    near_duplicates: dict[str, int]
    """Source -> records dropped as near duplicates."""
    quarantined: dict[str, int]
    """Source -> records or partitions sent to quarantine."""
    duplicate_rate: float
    """(exact + near duplicates) / records that passed the filters."""


class BuildInfo(Record):
    """Where and when this copy was built; not part of the dataset id."""

    created_at: str
    """UTC time the build finished."""
    recipe_path: str
    """Recipe file the build read."""
    quarantine_file: str | None = None
    """Quarantine list inside the dataset folder, when anything was quarantined."""
    seconds: float = 0.0
    """Wall-clock duration of the build."""


class DatasetManifest(Record):
    """A built dataset: shards, tokenizer, lineage, split boundary and statistics."""

    schema_version: Literal["runwright-dataset-v1"] = MANIFEST_SCHEMA
    """Manifest format."""
    name: str
    """Recipe name."""
    shards: list[ShardRecord]
    """Token shards in read order."""
    tokenizer: TokenizerRecord
    """Tokenizer identity."""
    lineage: Lineage
    """Inputs, stages, code version."""
    split: SplitBoundary
    """Train/eval boundary."""
    statistics: Statistics
    """Counts and rates."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Usage and licence tags from the recipe."""
    dataset_id: str = ""
    """sha256 of the canonical manifest without this field and `build`."""
    build: BuildInfo | None = None
    """Build provenance, outside the hash."""

    def content_id(self) -> str:
        return sha256_hex(canonical_json(self.model_dump(exclude={"dataset_id", "build"})))

    def sealed(self) -> "DatasetManifest":
        """This manifest with its dataset_id filled in."""
        return self.model_copy(update={"dataset_id": self.content_id()})

    def sources(self, split: str = "train") -> list[str]:
        seen: list[str] = []
        for s in self.shards:
            if s.split == split and s.source not in seen:
                seen.append(s.source)
        return seen


def read_manifest(dataset_path: str | Path) -> DatasetManifest:
    """Read and check `<dataset_path>/manifest.json` (a local folder)."""
    path = Path(dataset_path) / MANIFEST_FILE
    if not path.exists():
        raise ManifestError(
            f"no {MANIFEST_FILE} in {dataset_path}; pass a dataset folder built by "
            "`runwright data build` (it is <root>/datasets/<dataset_id>/)"
        )
    try:
        manifest = DatasetManifest.model_validate(json.loads(path.read_text("utf-8")))
    except (ValueError, ValidationError) as exc:
        raise ManifestError(f"{path} is not a valid dataset manifest: {exc}") from None
    if manifest.dataset_id != manifest.content_id():
        raise ManifestError(
            f"{path}: dataset_id {manifest.dataset_id[:12]}... does not match the manifest "
            f"content ({manifest.content_id()[:12]}...); the manifest was edited - rebuild it"
        )
    return manifest


def write_manifest(folder: Path, manifest: DatasetManifest) -> Path:
    path = Path(folder) / MANIFEST_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest.model_dump(), indent=2, sort_keys=True) + "\n", "utf-8")
    tmp.replace(path)
    return path
