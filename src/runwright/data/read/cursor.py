"""DataCursor: the only state needed to continue the exact logical sample sequence.

The logical sequence is a pure function of (dataset id, algorithm versions, seed, epoch,
position) (ARCHITECTURE.md, "Data order"), so the cursor holds those, the per-source counters the
mixture reads, and the packer residual: the document a packed sequence boundary fell inside and
how many of its tokens were already used. It says nothing about ranks, workers or prefetch, so it
restores under any data-parallel size.

It also records every shard the run quarantined (`data.on_corrupt_shard: skip`): the stream
leaves a quarantined shard's documents out from the step it was quarantined at, so the shard is
part of the position. A restart that restores the cursor skips it again whatever state the file
is in now, and every rank, restoring the same cursor, skips the same documents.
"""

from typing import Annotated, Literal

from pydantic import Field

from runwright.data.errors import CursorMismatchError
from runwright.data.format.manifest import PlainName
from runwright.records import Record

Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{1,64}$")]
"""A hex digest (compared, never used as a name)."""
Algorithm = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,63}$")]
"""A versioned algorithm name such as `permute-v1` (looked up in a registry, never a path)."""
Draws = dict[PlainName, Annotated[int, Field(ge=0, le=(1 << 63) - 1)]]
"""Source name -> a count within int64."""

CURSOR_SCHEMA = "runwright-data-cursor-v1"


class PackerResidual(Record):
    """A document split by a packed-sequence boundary."""

    source: PlainName
    """Source the document was drawn from."""
    draw: int = Field(ge=0, le=(1 << 63) - 1)
    """Its 0-based draw number within that source in this epoch."""
    token_offset: int = Field(ge=1, le=(1 << 63) - 1)
    """Tokens of it (counting the EOD slot) already placed in earlier sequences."""


class QuarantinedShard(Record):
    """A shard the run stopped reading because it failed verification or went missing."""

    shard: PlainName
    """Shard name (the files `<shard>.bin` and `<shard>.idx` of the dataset)."""
    source: PlainName
    """Mixture source the shard belongs to."""
    reason: Literal["corrupt", "missing", "operator"]
    """`missing`: a file of it could not be found; `corrupt`: its bytes differ from the manifest;
    `operator`: a person told the run to skip it (control/operator.py)."""
    from_step: int = Field(ge=0, le=(1 << 63) - 1)
    """Global steps consumed when it was quarantined: steps from this one on (0-based) never
    read it."""
    documents_lost: int = Field(default=0, ge=0, le=(1 << 63) - 1)
    """Its documents the stream drew since and skipped (each pass of a repeating source counts
    again)."""
    tokens_lost: int = Field(default=0, ge=0, le=(1 << 63) - 1)
    """Their tokens, plus the untrained rest of a document cut by the step boundary it was
    quarantined at."""
    tokens_estimated: bool = False
    """True when its index could not be read on this rank, so each skipped document counted the
    shard's mean length (its manifest tokens / documents) instead of its own."""


class SourceChange(Record):
    """A declared new version of the dataset taken at a step boundary (data.source_growth)."""

    from_dataset_id: Digest
    """Dataset the cursor was written for."""
    to_dataset_id: Digest
    """Dataset read from the change on."""
    at_step: int = Field(ge=0, le=(1 << 63) - 1)
    """Global steps consumed when the change was taken."""
    mapping: Algorithm
    """How the cursor was mapped (`new-epoch-v1`)."""
    from_epoch: int = Field(ge=0, le=(1 << 63) - 1)
    """Epoch the cursor was in; the new version starts at the next one."""
    dropped_residual: PackerResidual | None = None
    """The document the step boundary had split, whose rest was not trained."""


class DataCursor(Record):
    """Position in the logical sequence, after the last consumed global step."""

    schema_version: Literal["runwright-data-cursor-v1"] = CURSOR_SCHEMA
    """Cursor format; a loader refuses formats it does not know."""
    dataset_id: Digest
    """sha256 of the dataset's canonical manifest."""
    tokenizer_sha256: Digest
    """Hash of the tokenizer the token ids came from."""
    shuffle: Algorithm
    """Versioned shuffle algorithm, e.g. `permute-v1`."""
    mixture: Algorithm
    """Versioned mixture algorithm, e.g. `quota-v1`."""
    packing: Algorithm
    """Versioned packing algorithm, e.g. `concat-v1`."""
    mixture_sha256: Digest
    """Hash of the mixture's unit, sources, weights and exhaustion policies."""
    seed: int = Field(ge=0, lt=1 << 64)
    """Seed of the shuffle and mixture."""
    sequence_length: int = Field(gt=0, le=1 << 31)
    """Tokens per packed sequence (T)."""
    epoch: int = Field(default=0, ge=0, le=(1 << 63) - 1)
    """Mixture epoch the next document comes from."""
    step: int = Field(default=0, ge=0, le=(1 << 63) - 1)
    """Global optimizer steps consumed."""
    position: int = Field(default=0, ge=0, le=(1 << 63) - 1)
    """Packed sequences (global samples) consumed."""
    source_draws: Draws = Field(default_factory=dict)
    """Documents drawn per source in this epoch (including a residual's document)."""
    source_units: Draws = Field(default_factory=dict)
    """Mixture units consumed per source in this epoch (equal to draws for `documents`)."""
    residual: PackerResidual | None = None
    """Partly packed document at the boundary, or None at a document boundary."""
    stage: int = Field(default=0, ge=0, le=1 << 16)
    """Mixture stage (index into `mixture.stages`, 0 the first) the next document comes from;
    a document split by a stage's start belongs to the stage it was drawn in."""
    stage_units: Draws = Field(default_factory=dict)
    """Units per source when the stage began in this epoch (empty: all 0); the stage's quotas
    count from there."""
    source_changes: tuple[SourceChange, ...] = ()
    """New dataset versions taken during the run, oldest first (data.source_growth)."""
    quarantined: tuple[QuarantinedShard, ...] = ()
    """Shards left out of the stream, in the order they were quarantined."""


IDENTITY_FIELDS = (
    "dataset_id",
    "tokenizer_sha256",
    "shuffle",
    "mixture",
    "packing",
    "mixture_sha256",
    "seed",
    "sequence_length",
)


def cursor_differences(saved: DataCursor, expected: DataCursor) -> list[str]:
    """One line per identity field where a saved cursor differs from what this loader reads."""
    return [
        f"{name}: cursor has {getattr(saved, name)!r}, loader has {getattr(expected, name)!r}"
        for name in IDENTITY_FIELDS
        if getattr(saved, name) != getattr(expected, name)
    ]


def reconcile(saved: DataCursor, expected: DataCursor, coverage_only: bool) -> DataCursor:
    """The cursor to continue from, or CursorMismatchError.

    Exact resume requires every identity field to match. Coverage-only resume keeps the step,
    position, epoch and per-source draw counts of sources that still exist and the quarantined
    shards, drops the packer residual, and adopts the loader's identity: each source continues
    after the documents it already gave, but the exact sequence is not reproduced.
    """
    diffs = cursor_differences(saved, expected)
    if not diffs:
        return saved
    if not coverage_only:
        raise CursorMismatchError(
            "the data cursor was written for a different data contract:\n  - "
            + "\n  - ".join(diffs)
            + "\nResume with the original dataset/tokenizer/algorithms, or ask for a "
            "coverage-only resume (resume='coverage') to keep per-source progress only."
        )
    names = set(expected.source_draws) | set(saved.source_draws)
    return expected.model_copy(
        update={
            "epoch": saved.epoch,
            "step": saved.step,
            "position": saved.position,
            "source_draws": {n: saved.source_draws.get(n, 0) for n in sorted(names)},
            "source_units": {n: saved.source_units.get(n, 0) for n in sorted(names)},
            "residual": None,
            "quarantined": saved.quarantined,
            "source_changes": saved.source_changes,
            "stage": saved.stage,
            "stage_units": {n: saved.stage_units.get(n, 0) for n in sorted(names)}
            if saved.stage_units
            else {},
        }
    )
