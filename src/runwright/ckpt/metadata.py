"""DCP's `.metadata` file: read it without running what a pickle asks for, and compare it with a
checkpoint's manifest.

DCP writes `.metadata` with `pickle.dump` and reads it back with `pickle.load`
(torch/distributed/checkpoint/filesystem.py), so a crafted file runs code in whoever loads it.
`read_metadata` unpickles with an allow-list instead: the dataclasses and enums of
`torch.distributed.checkpoint.metadata`, DCP's `_StorageInfo`, torch dtypes, layouts, memory
formats and `torch.Size`, `torch.serialization._get_layout` and `pathlib` paths, which is every
global a DCP 2.x metadata file holds. Anything else is refused before it is looked up.
`SafeFileSystemReader` and `SafeFsspecReader` are DCP's readers with their `read_metadata`
(a plain `pickle.load`) replaced by the same allow-list, so `dcp.load` during restore never
unpickles `.metadata` freely either, whatever the verify mode.

`metadata_problems` is what lets verification see a manifest that was edited and re-committed:
the logical keys and the files DCP's own metadata lists must be exactly the manifest's.
"""

import dataclasses
import enum
import io
import pathlib
import pickle
from typing import Any

import torch
import torch.distributed.checkpoint.filesystem as dcp_filesystem
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    Metadata,
    StorageMeta,
    TensorStorageMetadata,
)

from runwright.ckpt.errors import CheckpointCorruptError
from runwright.ckpt.manifest import (
    RECORD_MAX_BYTES,
    CheckpointManifest,
    LogicalKey,
    ShardRange,
    plain_name,
)
from runwright.ckpt.storage import CheckpointStorage
from runwright.remote import bound

_SHOWN = 5
"""How many offending keys or files one problem names before it only counts the rest."""
_TORCH_VALUES = (torch.dtype, torch.layout, torch.memory_format)


class MetadataError(ValueError):
    """`.metadata` is not a DCP metadata file this verifier can read safely."""


def _allowed(module: str, name: str) -> Any:
    """The global a DCP metadata pickle may name, or None."""
    if module in (dcp_metadata.__name__, dcp_filesystem.__name__):
        found = getattr(dcp_metadata if module == dcp_metadata.__name__ else dcp_filesystem, name)
        if isinstance(found, type) and (
            dataclasses.is_dataclass(found) or issubclass(found, enum.Enum)
        ):
            return found
        return None
    if module == "torch":
        found = getattr(torch, name, None)
        return found if found is torch.Size or isinstance(found, _TORCH_VALUES) else None
    if (module, name) == ("torch.serialization", "_get_layout"):
        return torch.serialization._get_layout
    if module == "pathlib" and name in ("PosixPath", "PurePosixPath"):
        return getattr(pathlib, name)
    return None


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            found = _allowed(module, name)
        except AttributeError:
            found = None
        if found is None:
            raise MetadataError(f"it names {module}.{name}, which DCP metadata never holds")
        return found


def read_metadata(storage: CheckpointStorage, path: str) -> Metadata:
    """DCP's metadata at `path`, unpickled with the allow-list; raises `MetadataError` (or
    OSError when it cannot be read within `RECORD_MAX_BYTES`)."""
    return parse_metadata(storage.read_record(path, RECORD_MAX_BYTES))


def parse_metadata(raw: bytes) -> Metadata:
    """DCP metadata from the bytes of a `.metadata` file, unpickled with the allow-list; raises
    `MetadataError`."""
    try:
        loaded = _Unpickler(io.BytesIO(raw)).load()
    except MetadataError:
        raise
    except Exception as exc:  # unpickling arbitrary bytes raises any of a dozen types
        raise MetadataError(f"it does not unpickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(loaded, Metadata):
        raise MetadataError(f"it holds a {type(loaded).__name__}, not DCP Metadata")
    return loaded


class _SafeMetadata:
    """`read_metadata` for DCP's file system readers, through `parse_metadata`."""

    def read_metadata(self: Any, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as stream:
            raw = stream.read(RECORD_MAX_BYTES + 1)
        if len(raw) > RECORD_MAX_BYTES:
            raise CheckpointCorruptError(
                f"{path} is over {RECORD_MAX_BYTES} bytes, larger than any DCP metadata; the "
                "checkpoint is damaged or crafted. Restore from an older checkpoint."
            )
        try:
            metadata = parse_metadata(raw)
        except MetadataError as exc:
            raise CheckpointCorruptError(
                f"{path} was not loaded: {exc}. The checkpoint is damaged or crafted; restore "
                "from an older checkpoint or move this one aside."
            ) from None
        # What FileSystemReader.read_metadata does after its pickle.load.
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeFileSystemReader(_SafeMetadata, FileSystemReader):
    """DCP's local reader, reading `.metadata` with the allow-list."""


class SafeFsspecReader(_SafeMetadata, FsspecReader):
    """DCP's fsspec reader, reading `.metadata` with the allow-list; `options` are the root's
    fsspec options (timeouts and retries: runwright.remote)."""

    def __init__(self, path: str, **options: Any) -> None:
        FsspecReader.__init__(self, path, **options)
        bound(self.fs.fs)


def logical_keys(metadata: Metadata) -> dict[str, LogicalKey]:
    """DCP metadata -> the manifest's logical keys with global shape, dtype and shard ranges."""
    keys: dict[str, LogicalKey] = {}
    for fqn, meta in sorted(metadata.state_dict_metadata.items()):
        if isinstance(meta, TensorStorageMetadata):
            keys[fqn] = LogicalKey(
                kind="tensor",
                shape=list(meta.size),
                dtype=str(meta.properties.dtype),
                shards=[
                    ShardRange(offsets=list(c.offsets), sizes=list(c.sizes)) for c in meta.chunks
                ],
            )
        elif isinstance(meta, BytesStorageMetadata):
            keys[fqn] = LogicalKey(kind="object")
    return keys


def referenced_files(metadata: Metadata) -> set[str]:
    """The file names DCP's metadata says hold the state."""
    return {info.relative_path for info in (metadata.storage_data or {}).values()}


def _some(names: set[str] | list[str]) -> str:
    ordered = sorted(names)
    shown = ", ".join(ordered[:_SHOWN])
    return shown + (f" and {len(ordered) - _SHOWN} more" if len(ordered) > _SHOWN else "")


def metadata_problems(metadata: Metadata, manifest: CheckpointManifest) -> list[str]:
    """How the manifest disagrees with DCP's metadata: keys either one lacks, keys whose shape,
    dtype or shards differ, files DCP reads that the manifest does not list."""
    try:
        stored = logical_keys(metadata)
        files = referenced_files(metadata)
        for name in files:
            plain_name(name)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        return [f"does not hold DCP metadata ({type(exc).__name__}: {exc})"]
    problems = []
    listed = manifest.logical_keys
    if dropped := stored.keys() - listed.keys():
        problems.append(
            f"logical keys {_some(dropped)} are stored but not in the manifest "
            "(the manifest was edited)"
        )
    if extra := listed.keys() - stored.keys():
        problems.append(f"logical keys {_some(extra)} are in the manifest but not stored")
    if differ := [k for k in stored.keys() & listed.keys() if stored[k] != listed[k]]:
        problems.append(f"logical keys {_some(differ)} differ in shape, dtype or shards")
    if unlisted := files - {f.name for f in manifest.files}:
        problems.append(f"shards {_some(unlisted)} are read by DCP but not in the manifest")
    return problems
