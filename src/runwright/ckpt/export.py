"""Export: an inference artifact built from a committed checkpoint, apart from training state.

Output folder: `model.safetensors` (full, unsharded model weights, `model.` prefix removed),
`config.json` (the model config the caller passes), `tokenizer/` (copied tokenizer files, if any)
and `release.json`, a release manifest with the sha256 and size of every file plus the source
checkpoint's id, step, and manifest hash. The checkpoint is verified in full before anything is
read, and the weights are read with plain DCP (no process group: one process reads every shard).
Inputs are checked before anything is written, and the export is built in a sibling folder
renamed into place at the end, so a failed export leaves no partial folder behind.
"""

import contextlib
import hashlib
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from runwright.ckpt.catalog import CommittedCheckpoint
from runwright.ckpt.compat import MODEL_PREFIX
from runwright.ckpt.errors import CheckpointCorruptError, CheckpointError
from runwright.ckpt.manifest import RECORD_MAX_BYTES
from runwright.ckpt.metadata import SafeFileSystemReader, SafeFsspecReader
from runwright.ckpt.storage import CheckpointStorage, read_local_record
from runwright.ckpt.verify import verify_checkpoint
from runwright.records import Record

RELEASE_FILE = "release.json"


class ExportedFile(Record):
    """One file of an export."""

    name: str
    """Path relative to the export folder."""
    size_bytes: int
    """Size in bytes."""
    sha256: str
    """Hex sha256 of the bytes."""


class ReleaseManifest(Record):
    """What an export contains and where it came from."""

    source_checkpoint_id: str
    """Checkpoint the weights came from."""
    source_step: int
    """Its step."""
    source_manifest_sha256: str
    """sha256 of its manifest.json."""
    spec_hash: str | None
    """Spec hash recorded in the checkpoint."""
    tokenizer_hash: str | None
    """Tokenizer hash recorded in the checkpoint."""
    parameters: int
    """Number of scalar parameters exported."""
    files: list[ExportedFile]
    """Every file of the export except release.json."""
    exported_unix_seconds: float
    """When the export was written."""


def read_model_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in `path` (`--model-config`); raises `CheckpointError` naming the file
    and what is wrong (missing, not a regular file, over 64 MiB, not UTF-8 JSON, NaN or
    infinity, nested too deep, not an object)."""
    where = f"model config {os.fspath(path)}"

    def no_constant(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        text = read_local_record(path, RECORD_MAX_BYTES).decode()
        value = json.loads(text, parse_constant=no_constant)
    except FileNotFoundError:
        raise CheckpointError(f"{where}: no such file; pass the model's JSON config") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{where} cannot be used: {exc}") from None
    if not isinstance(value, dict):
        raise CheckpointError(
            f'{where} holds a JSON {type(value).__name__}, not an object such as {{"d_model": 64}}'
        )
    return value


def _check_destination(out: Path, tokenizer_path: str | os.PathLike[str] | None) -> None:
    """Refuse, before anything is read or written, an export folder that already holds files
    or cannot be a folder, and a tokenizer path that is neither a file nor a folder."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CheckpointError(f"export folder {out} exists and is not a folder; choose another")
    if out.is_dir() and any(out.iterdir()):
        raise CheckpointError(
            f"export folder {out} is not empty; choose a new folder, so two exports never mix"
        )
    if tokenizer_path is not None:
        source = Path(tokenizer_path)
        if not (source.is_file() or source.is_dir()):
            raise CheckpointError(
                f"tokenizer {source} is neither a file nor a folder; pass the tokenizer file or "
                "the folder that holds its files"
            )


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def export_model(
    storage: CheckpointStorage,
    checkpoint: CommittedCheckpoint,
    out_dir: str | os.PathLike[str],
    *,
    model_config: dict[str, Any],
    tokenizer_path: str | os.PathLike[str] | None = None,
) -> ReleaseManifest:
    final = Path(out_dir).absolute()
    _check_destination(final, tokenizer_path)
    report = verify_checkpoint(storage, checkpoint.path, checkpoint.manifest, "full")
    if not report.ok:
        raise CheckpointCorruptError(
            f"not exporting {checkpoint.folder}: {report.summary()}. Export an older checkpoint."
        )
    reader = (
        SafeFileSystemReader(checkpoint.path)
        if storage.is_local
        else SafeFsspecReader(checkpoint.path)
    )
    metadata = reader.read_metadata()
    weights: dict[str, torch.Tensor] = {}
    for fqn, meta in metadata.state_dict_metadata.items():
        if fqn.startswith(MODEL_PREFIX) and isinstance(meta, TensorStorageMetadata):
            weights[fqn] = torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(weights, storage_reader=reader, no_dist=True)
    out = final.with_name(f"{final.name}.partial-{os.getpid()}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        release = _write(out, weights, checkpoint, model_config, tokenizer_path)
        with contextlib.suppress(FileNotFoundError):
            final.rmdir()  # checked empty above
        out.rename(final)
    except OSError as exc:
        shutil.rmtree(out, ignore_errors=True)
        raise CheckpointError(
            f"export to {final} failed: {type(exc).__name__}: {exc}; nothing was left there. "
            "Fix the cause (space, permissions, the tokenizer files) and run it again."
        ) from exc
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return release


def _write(
    out: Path,
    weights: dict[str, torch.Tensor],
    checkpoint: CommittedCheckpoint,
    model_config: dict[str, Any],
    tokenizer_path: str | os.PathLike[str] | None,
) -> ReleaseManifest:
    tensors = {k.removeprefix(MODEL_PREFIX): v.contiguous() for k, v in weights.items()}
    save_file(tensors, out / "model.safetensors", metadata={"checkpoint_id": checkpoint.folder})
    (out / "config.json").write_text(json.dumps(model_config, indent=2, sort_keys=True) + "\n")
    if tokenizer_path is not None:
        source = Path(tokenizer_path)
        target = out / "tokenizer"
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            target.mkdir(exist_ok=True)
            shutil.copy2(source, target / source.name)
    files = [
        ExportedFile(
            name=str(p.relative_to(out)), size_bytes=p.stat().st_size, sha256=_sha256_file(p)
        )
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != RELEASE_FILE
    ]
    release = ReleaseManifest(
        source_checkpoint_id=checkpoint.record.checkpoint_id,
        source_step=checkpoint.record.step,
        source_manifest_sha256=checkpoint.record.manifest_sha256,
        spec_hash=checkpoint.manifest.spec_hash,
        tokenizer_hash=checkpoint.manifest.tokenizer_hash,
        parameters=sum(t.numel() for t in tensors.values()),
        files=files,
        exported_unix_seconds=time.time(),
    )
    (out / RELEASE_FILE).write_text(release.model_dump_json(indent=1) + "\n")
    return release
