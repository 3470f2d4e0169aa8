"""DatasetManifest: the content-addressed identity of a built dataset.

`dataset_id = sha256(canonical JSON of the manifest without `dataset_id` and `build`)`. The
hashed part holds only content and how it was derived (shard digests, tokenizer hash, inputs by
relative path and digest, stage parameters, statistics), never timestamps or absolute paths, so
building the same recipe over the same inputs twice gives the same id. `build` records where and
when this copy was built, for people, outside the hash; so is `statistics.profile`
(format/profile.py), which came later and left every earlier id as it was.
"""

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from runwright.data.errors import ManifestError
from runwright.data.format.indexed_shard import DTYPE_CODES
from runwright.data.format.profile import BuildProfile
from runwright.data.format.untrusted import (
    MAX_COUNT,
    MAX_MANIFEST_BYTES,
    MAX_NESTING,
    check_name,
    check_shape,
    parse_json,
    read_capped,
)
from runwright.records import Record
from runwright.spec import canonical_json, sha256_hex

MANIFEST_SCHEMA = "runwright-dataset-v1"
MANIFEST_FILE = "manifest.json"
MAX_VOCAB_SIZE = 1 << 24
"""16,777,216 ids: 64x the largest vocabularies in use (256k); int32 shards hold them."""
TOKEN_DTYPES = frozenset(np.dtype(t).name for t in DTYPE_CODES.values() if np.dtype(t).kind in "iu")
"""Shard dtypes that hold token ids (the integer Megatron dtype codes)."""

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
"""A count a manifest states: non-negative and within int64, so numpy never overflows on it."""
Finite = Annotated[float, Field(allow_inf_nan=False)]
"""A float with a canonical JSON form (no NaN or infinity)."""
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""A lower-case hex sha256 digest."""
PlainName = Annotated[str, AfterValidator(lambda v: check_name(v, "name"))]
"""A name that is also a file name part: one path component, no `..`."""


class ShardRecord(Record):
    """One token shard (`<name>.bin` + `<name>.idx`)."""

    name: str
    """File prefix inside the dataset folder (a plain name: no `/`, no `..`)."""
    source: PlainName
    """Source the documents came from."""
    split: Literal["train", "eval"]
    """Split the shard belongs to."""
    dtype: str
    """Token dtype (numpy name), matching the .idx dtype code."""
    documents: Count
    """Documents in the shard."""
    tokens: Count
    """Tokens in the shard (EOD not stored; packing adds it)."""
    bin_bytes: Count
    """Size of the .bin file."""
    idx_bytes: Count
    """Size of the .idx file."""
    bin_sha256: Sha256
    """sha256 of the .bin file."""
    idx_sha256: Sha256
    """sha256 of the .idx file."""

    @field_validator("name")
    @classmethod
    def _name_inside(cls, value: str) -> str:
        return check_name(value, "shard name")

    @field_validator("dtype")
    @classmethod
    def _token_dtype(cls, value: str) -> str:
        if value not in TOKEN_DTYPES:
            raise ValueError(f"shard dtype {value!r} is not one of {sorted(TOKEN_DTYPES)}")
        return value


class TokenizerRecord(Record):
    """The tokenizer whose ids the shards hold."""

    file: str = "tokenizer.json"
    """Tokenizer file inside the dataset folder (a plain name: no `/`, no `..`)."""
    sha256: Sha256
    """sha256 of that file."""
    vocab_size: int = Field(gt=0, le=MAX_VOCAB_SIZE)
    """Number of ids (the model's embedding rows must cover it)."""
    eod_token: str
    """End-of-document token text."""
    eod_token_id: int = Field(ge=0, lt=MAX_VOCAB_SIZE)
    """End-of-document token id used by packing."""
    special_tokens: dict[str, Annotated[int, Field(ge=0, lt=MAX_VOCAB_SIZE)]] = Field(
        default_factory=dict
    )
    """Every special token and its id."""
    trained: bool
    """True when the build trained it from the recipe, False when it was loaded."""

    @field_validator("file")
    @classmethod
    def _file_inside(cls, value: str) -> str:
        return check_name(value, "tokenizer.file")

    @model_validator(mode="after")
    def _eod_in_vocabulary(self) -> "TokenizerRecord":
        if self.eod_token_id >= self.vocab_size:
            raise ValueError(
                f"eod_token_id {self.eod_token_id} is outside the vocabulary (vocab_size "
                f"{self.vocab_size})"
            )
        return self


class InputRecord(Record):
    """One input file of a source."""

    source: str
    """Source name."""
    path: str
    """Path relative to the source's base folder (never absolute)."""
    bytes: Count
    """Size in bytes."""
    sha256: Sha256
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

    eval_fraction: Finite = Field(ge=0.0, le=1.0)
    """Share of unique documents selected for eval (by hash)."""
    eval_seed: int
    """Seed of the eval selection."""
    eval_documents: Count
    """Documents in eval."""
    train_removed_as_eval_duplicates: Count
    """Train documents dropped because they nearly duplicate an eval document."""
    near_dedup_threshold: Finite | None = None
    """Jaccard threshold of near dedup, or None when near dedup was off."""
    dedup_scope: str = "all sources, before the split"
    """Which documents exact and near dedup compared."""


class SourceStatistics(Record):
    """Counts for one source and split."""

    documents: Count = 0
    """Documents kept."""
    tokens: Count = 0
    """Tokens kept."""
    chars: Count = 0
    """Characters kept."""
    chars_per_token: Finite = 0.0
    """chars / tokens (tokenizer compression)."""
    length_histogram: dict[str, Count] = Field(default_factory=dict)
    """Documents per token-length bucket `[2^k, 2^(k+1))`, keyed by the lower bound."""


class Statistics(Record):
    """What the build kept and dropped."""

    splits: dict[str, dict[str, SourceStatistics]]
    """Split -> source -> counts."""
    records_read: dict[str, Count]
    """Records read per source."""
    filtered: dict[str, dict[str, Count]]
    """Source -> reason -> records dropped by filters."""
    exact_duplicates: dict[str, Count]
    """Source -> records dropped as exact duplicates."""
    near_duplicates: dict[str, Count]
    """Source -> records dropped as near duplicates."""
    quarantined: dict[str, Count]
    """Source -> records or partitions sent to quarantine."""
    duplicate_rate: Finite = Field(ge=0.0, le=1.0)
    """(exact + near duplicates) / records that passed the filters."""
    profile: BuildProfile | None = None
    """Per source and language counts and tokenizer anomalies (format/profile.py); outside the
    dataset id, None in manifests built before it existed."""


class BuildInfo(Record):
    """Where and when this copy was built; not part of the dataset id."""

    created_at: str
    """UTC time the build finished."""
    recipe_path: str
    """Recipe file the build read."""
    quarantine_file: str | None = None
    """Quarantine list inside the dataset folder, when anything was quarantined."""
    seconds: Finite = 0.0
    """Wall-clock duration of the build."""

    @field_validator("quarantine_file")
    @classmethod
    def _quarantine_inside(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "build.quarantine_file", folders=True)


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
    dataset_id: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")
    """sha256 of the canonical manifest without this field and `build` (empty until sealed)."""
    build: BuildInfo | None = None
    """Build provenance, outside the hash."""

    def content_id(self) -> str:
        # statistics.profile is outside the id (format/profile.py says why).
        hashed = self.model_dump(
            exclude={"dataset_id": True, "build": True, "statistics": {"profile"}}
        )
        return sha256_hex(canonical_json(hashed))

    def sealed(self) -> "DatasetManifest":
        """This manifest with its dataset_id filled in."""
        return self.model_copy(update={"dataset_id": self.content_id()})

    def sources(self, split: str = "train") -> list[str]:
        seen: list[str] = []
        for s in self.shards:
            if s.split == split and s.source not in seen:
                seen.append(s.source)
        return seen


def parse_manifest(raw: bytes, where: str) -> DatasetManifest:
    """A manifest from its bytes (read from `where`), checked against its own dataset id."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{where} is {len(raw):,} bytes, over the {MAX_MANIFEST_BYTES:,}-byte manifest limit"
        )
    try:
        data = parse_json(raw)
        check_shape(data, MAX_NESTING)
        manifest = DatasetManifest.model_validate(data)
    except (ValueError, ValidationError) as exc:
        raise ManifestError(f"{where} is not a valid dataset manifest: {exc}") from None
    if manifest.dataset_id != manifest.content_id():
        raise ManifestError(
            f"{where}: dataset_id {manifest.dataset_id[:12]}... does not match the manifest "
            f"content ({manifest.content_id()[:12]}...); the manifest was edited - rebuild it"
        )
    return manifest


def read_manifest(dataset_path: str | Path) -> DatasetManifest:
    """Read and check `<dataset_path>/manifest.json` (a local folder, at most 64 MiB)."""
    folder = Path(dataset_path)
    path = folder / MANIFEST_FILE
    if folder.is_file():
        raise ManifestError(
            f"{dataset_path} is a file; pass the dataset folder that holds {MANIFEST_FILE} "
            "(<root>/datasets/<dataset_id>/)"
        )
    if not path.exists():
        raise ManifestError(
            f"no {MANIFEST_FILE} in {dataset_path}; pass a dataset folder built by "
            "`runwright data build` (it is <root>/datasets/<dataset_id>/)"
        )
    return parse_manifest(
        read_capped(path, MAX_MANIFEST_BYTES, "manifest", ManifestError), str(path)
    )


def write_manifest(folder: Path, manifest: DatasetManifest) -> Path:
    path = Path(folder) / MANIFEST_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest.model_dump(), indent=2, sort_keys=True) + "\n", "utf-8")
    tmp.replace(path)
    return path
