"""The records that make a checkpoint: the manifest, the commit record and the latest pointer.

Seed 003 ("the manifest is the transaction boundary"): a directory listing, one rank's files or a
timestamp never prove a checkpoint complete; only a manifest listing every file with its size and
checksum, followed by a commit record that names the manifest's own hash, does.
"""

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator

from runwright.ckpt.checksum import DEFAULT_CHECKSUM
from runwright.records import Record

MANIFEST_FILE = "manifest.json"
COMMIT_FILE = "COMMITTED"
REJECTED_FILE = "REJECTED"
SUSPECT_FILE = "SUSPECT"
"""Beside a committed checkpoint saved after a silent-data-corruption check last passed, when a
later check failed (ckpt/suspect.py): restore and retention no longer count it as good."""
ABANDONED_FILE = "ABANDONED"
"""Beside a committed checkpoint newer than the one an operator rolled the run back to
(ckpt/abandon.py): kept as it is, never restored, never deleted by retention."""
DCP_METADATA = ".metadata"
"""DCP's own metadata file in a checkpoint folder (written last by rank 0)."""
SIDECAR_SUFFIX = "_files.json"


def sidecar_name(rank: int) -> str:
    """Rank R's sidecar: the sizes and checksums of the files it wrote (ckpt/writer.py)."""
    return f"__{rank}{SIDECAR_SUFFIX}"


FORMAT_VERSION = 1
CHECKSUM_ALGORITHM = DEFAULT_CHECKSUM
RECORD_MAX_BYTES = 64 << 20
"""The largest manifest, commit record, pointer or DCP metadata file read (64 MiB): a real
manifest of a 1,000-rank checkpoint with 100,000 logical keys is a few MiB, so a bigger one is
damage, and it is refused before it is read into memory."""
NAME_MAX_BYTES = 255
"""The longest name a POSIX file system allows in one path component."""

_ID = re.compile(r"^g(?P<generation>\d{6,})-(?P<token>[0-9a-f]{12})$")


def plain_name(value: str) -> str:
    """A single name inside its folder: not empty, not `.` or `..`, no separator, no NUL or
    other control character, at most 255 bytes. Names read from records are joined to the
    checkpoint root, so anything else could reach outside it."""
    if value in ("", ".", ".."):
        raise ValueError(f"{value!r} is not a file or folder name")
    if "/" in value or "\\" in value:
        raise ValueError(f"{value!r} holds a path separator; only a plain name is allowed here")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{value!r} holds a control character")
    if len(value.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
        raise ValueError(f"name of {len(value)} characters is longer than {NAME_MAX_BYTES} bytes")
    return value


PlainName = Annotated[str, AfterValidator(plain_name)]
"""A name (file, folder, checkpoint id) that stays inside the folder it is joined to."""


class _Record(Record):
    """A manifest never holds inf or NaN (sizes, offsets and steps are finite)."""

    model_config = ConfigDict(allow_inf_nan=False)


def checkpoint_id_for(generation: int, token: str) -> str:
    """`g<generation>-<12 hex>`: the id carries the generation it was allocated under, so residue
    of an old generation is recognisable without reading anything."""
    return f"g{generation:06d}-{token[:12]}"


def generation_of(checkpoint_id: str) -> int | None:
    """The generation encoded in a checkpoint id, or None if the name is not a checkpoint id."""
    match = _ID.match(checkpoint_id)
    return int(match["generation"]) if match else None


class HealthVerdict(StrEnum):
    """What the trainer knew about the model's health when it saved."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


class ShardRange(_Record):
    """One stored chunk of a tensor in global coordinates."""

    offsets: list[int]
    """Start index of the chunk in each dimension."""
    sizes: list[int]
    """Extent of the chunk in each dimension."""


class LogicalKey(_Record):
    """One entry of the flattened state dict as DCP stored it."""

    kind: Literal["tensor", "object"]
    """`tensor` for tensors (sharded or not), `object` for pickled Python values."""
    shape: list[int] | None = None
    """Global shape (tensors only)."""
    dtype: str | None = None
    """Torch dtype name, e.g. `torch.float32` (tensors only)."""
    shards: list[ShardRange] = Field(default_factory=list)
    """Stored chunks; one chunk covering the whole shape for an unsharded tensor."""


class FileEntry(_Record):
    """One file of a checkpoint with what its writer measured while writing it."""

    name: PlainName
    """File name relative to the checkpoint folder."""
    size_bytes: int = Field(ge=0)
    """Exact size in bytes."""
    checksum: str
    """Hex digest of the file's bytes (algorithm in `CheckpointManifest.checksum_algorithm`)."""
    rank: int | None = None
    """Rank that wrote the file; None for files written by the coordinator."""


class ProbeRecord(_Record):
    """The restore probe's reading of the saved state (probe.py), recorded at save time."""

    loss: float
    """The probe batch's loss."""
    parameter_norm: float = Field(ge=0)
    """L2 norm over every parameter."""
    batch: str | None = None
    """Which probe batch gave the loss (a digest of its rows): a restore that probes another
    batch (a run resumed from another run's checkpoint on other data) compares only the norm."""


class CheckpointManifest(_Record):
    """Everything needed to decide whether, and how, a checkpoint can be restored."""

    format_version: int = FORMAT_VERSION
    """Version of this record's layout."""
    checkpoint_id: str
    """`g<generation>-<token>`, unique within the run."""
    step: int = Field(ge=0)
    """Global optimizer step after which the state was captured."""
    generation: int = Field(ge=0)
    """Generation (fencing token) of the writer."""
    created_unix_seconds: float
    """When the snapshot was staged (seconds since the epoch)."""
    parent_checkpoint_id: str | None = None
    """The checkpoint this run restored from or last published before this one."""
    world_size: int = Field(ge=1, le=1 << 20)
    """Number of ranks that wrote the checkpoint."""
    parallel_layout: dict[str, int] = Field(default_factory=dict)
    """Parallel degrees at save time, e.g. {"dp": 2, "tp": 1}."""
    spec_hash: str | None = None
    """Hash of the job spec that produced the state."""
    data_manifest_id: str | None = None
    """Dataset the data cursor refers to."""
    tokenizer_hash: str | None = None
    """Hash of the tokenizer the model was trained with."""
    data_cursor: dict[str, Any] | None = None
    """The data loader's state_dict() at the step boundary (JSON)."""
    counters: dict[str, int] = Field(default_factory=dict)
    """Progress counters at save time, e.g. {"tokens_seen": 1048576}."""
    health: HealthVerdict = HealthVerdict.UNKNOWN
    """Trainer's health verdict at save time; retention keeps the newest healthy one."""
    loss_at_save: float | None = None
    """Training loss at the saved step, compared by the restore smoke check."""
    probe: ProbeRecord | None = None
    """The restore probe's reading at save time; restore repeats it before the first step."""
    rng_ranks: list[int] = Field(default_factory=list)
    """Ranks whose RNG streams are stored (each under its own `ranks.r<rank>.rng` keys)."""
    logical_keys: dict[str, LogicalKey]
    """Flattened state dict keys as stored by DCP."""
    files: list[FileEntry]
    """Every file of the checkpoint except manifest.json and the commit record."""
    checksum_algorithm: str = CHECKSUM_ALGORITHM
    """Hash function of `FileEntry.checksum`."""
    torch_version: str
    """torch.__version__ of the writer."""
    timings_seconds: dict[str, float] = Field(default_factory=dict)
    """Measured durations of the protocol steps (stage, write, verify)."""

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @field_validator("checkpoint_id")
    @classmethod
    def _id_format(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError(f"checkpoint_id {value!r} is not of the form g000001-0123456789ab")
        return value


class CommitRecord(_Record):
    """Written last: its presence (with a matching manifest hash) is what makes a checkpoint
    committed, on a local disk and on an object store alike."""

    checkpoint_id: PlainName
    """The committed checkpoint."""
    step: int = Field(ge=0)
    """Its step."""
    generation: int = Field(ge=0)
    """Generation of the writer."""
    folder: PlainName
    """Folder name under the run's checkpoint root, `<step>-<checkpoint_id>`."""
    manifest_sha256: str
    """sha256 of manifest.json's bytes: binds the record to exactly one manifest."""
    committed_unix_seconds: float
    """When the record was written."""


class LatestPointer(_Record):
    """What the fence holds: the newest published checkpoint of the run."""

    checkpoint_id: PlainName
    """The published checkpoint."""
    step: int = Field(ge=0)
    """Its step."""
    generation: int = Field(ge=0)
    """Generation that published it."""
    folder: PlainName
    """Folder name under the run's checkpoint root."""
    manifest_sha256: str
    """sha256 of its manifest.json."""

    @classmethod
    def from_record(cls, record: CommitRecord) -> "LatestPointer":
        return cls(
            checkpoint_id=record.checkpoint_id,
            step=record.step,
            generation=record.generation,
            folder=record.folder,
            manifest_sha256=record.manifest_sha256,
        )
