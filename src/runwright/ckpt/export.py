"""Export: an artifact for use elsewhere, built from a committed checkpoint, apart from training
state. Two layouts (docs/ckpt.md, "Export"):

- `hf-gpt2`: what Hugging Face transformers loads as `GPT2LMHeadModel` and
  `PreTrainedTokenizerFast`: config.json, generation_config.json, model.safetensors under GPT-2's
  names and layouts (`hf_gpt2.py`), tokenizer.json, tokenizer_config.json and
  special_tokens_map.json. Only for the reference GPT; anything else is refused, naming what
  differs.
- `runwright`: model.safetensors under runwright's own names (`model.` prefix removed),
  config.json (the spec's model section, or the config the caller passed) and `tokenizer/`.
- `auto` (the default): hf-gpt2 when the weights are the reference GPT of the spec's model
  section, else runwright, with the reasons in release.json's `not_mapped`.

Both add release.json: the sha256 and size of every file, the source checkpoint's id, step and
manifest hash, the spec hash, the dataset id and the tokenizer's sha256. The checkpoint is
verified in full before anything is read, and the weights are read with plain DCP (no process
group: one process reads every shard). Inputs are checked before anything is written, and the
export is built in a sibling folder renamed into place at the end, so a failed export leaves
no partial folder behind.
"""

import contextlib
import json
import os
import shutil
import time
import warnings
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from pydantic import Field
from safetensors.torch import save_file
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from runwright.ckpt import hf_gpt2
from runwright.ckpt.catalog import CommittedCheckpoint
from runwright.ckpt.compat import MODEL_PREFIX
from runwright.ckpt.errors import CheckpointCorruptError, CheckpointError
from runwright.ckpt.export_source import ExportSource, TokenizerSource, file_sha256
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


class ExportFormat(StrEnum):
    """The layout of an export."""

    AUTO = "auto"
    """hf-gpt2 when the model maps onto GPT-2, else runwright (release.json says why)."""
    HF_GPT2 = "hf-gpt2"
    """Hugging Face transformers' GPT-2 (refused when the model does not map)."""
    RUNWRIGHT = "runwright"
    """runwright's own tensor names, any model."""


class ReleaseManifest(Record):
    """What an export contains and where it came from."""

    format: ExportFormat = ExportFormat.RUNWRIGHT
    """The layout written (hf-gpt2 or runwright)."""
    source_checkpoint_id: str
    """Checkpoint the weights came from."""
    source_step: int
    """Its step."""
    source_manifest_sha256: str
    """sha256 of its manifest.json."""
    run_id: str | None = None
    """The run the checkpoint belongs to, when the export named one."""
    spec_hash: str | None
    """Spec hash recorded in the checkpoint (else the spec's the export read)."""
    data_manifest_id: str | None = None
    """Dataset id recorded in the checkpoint (else the spec's dataset's)."""
    tokenizer_hash: str | None
    """Tokenizer hash recorded in the checkpoint."""
    tokenizer_sha256: str | None = None
    """sha256 of the tokenizer file the export carries."""
    config_origin: str | None = None
    """Where the model config came from (a run's spec.json, --spec, --model-config)."""
    parameters: int
    """Number of scalar parameters exported."""
    files: list[ExportedFile]
    """Every file of the export except release.json."""
    exported_unix_seconds: float
    """When the export was written."""
    not_mapped: list[str] = Field(default_factory=list)
    """Why the export is not hf-gpt2 (format auto fell back to runwright)."""
    notes: list[str] = Field(default_factory=list)
    """What the layout carries only in part."""


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


def _check_destination(out: Path) -> None:
    """Refuse, before anything is read or written, an export folder that already holds files
    or cannot be a folder."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CheckpointError(f"export folder {out} exists and is not a folder; choose another")
    if out.is_dir() and any(out.iterdir()):
        raise CheckpointError(
            f"export folder {out} is not empty; choose a new folder, so two exports never mix"
        )


def _tokenizer_file(tokenizer: TokenizerSource) -> Path:
    """The tokenizer.json an hf-gpt2 export copies: the file itself, or the one in a folder."""
    path = Path(tokenizer.path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(
            f"tokenizer {tokenizer.path}: no such file; transformers loads a HF `tokenizers` "
            "tokenizer.json: pass it with --tokenizer"
        )
    return path


def _check_tokenizer(
    source: ExportSource, checkpoint: CommittedCheckpoint, fmt: ExportFormat
) -> str | None:
    """The sha256 of the tokenizer file the export will carry, refused when it is not the one
    the dataset recorded or the checkpoint trained with, or when the model's vocabulary does
    not cover it."""
    tokenizer = source.tokenizer
    if tokenizer is None:
        return None
    path = Path(tokenizer.path)
    if not (path.is_file() or path.is_dir()):
        raise CheckpointError(
            f"tokenizer {path} is neither a file nor a folder; pass the tokenizer file or the "
            "folder that holds its files"
        )
    if path.is_dir() and fmt is ExportFormat.RUNWRIGHT:
        return None
    sha = file_sha256(_tokenizer_file(tokenizer))
    expected = {
        "the dataset's manifest": tokenizer.sha256,
        "the checkpoint": checkpoint.manifest.tokenizer_hash,
    }
    for who, value in expected.items():
        if value is not None and value != sha:
            raise CheckpointError(
                f"tokenizer {tokenizer.path} has sha256 {sha[:16]}..., but {who} records "
                f"{value[:16]}...: it is not the tokenizer the model trained with. Pass the "
                "tokenizer.json of the run's dataset with --tokenizer"
            )
    if source.model and tokenizer.vocab_size and tokenizer.vocab_size > source.model.vocab_size:
        raise CheckpointError(
            f"the tokenizer has {tokenizer.vocab_size:,} ids but the model only "
            f"{source.model.vocab_size:,} rows; it cannot be the model's tokenizer"
        )
    return sha


def read_weights(
    storage: CheckpointStorage, checkpoint: CommittedCheckpoint
) -> dict[str, torch.Tensor]:
    """The checkpoint's model tensors, runwright's names without the `model.` prefix."""
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
    return {k.removeprefix(MODEL_PREFIX): v.contiguous() for k, v in weights.items()}


def _mapping_problems(source: ExportSource, checkpoint: CommittedCheckpoint) -> list[str]:
    """Why the checkpoint's model cannot be exported as GPT-2 (empty when it can); reads the
    manifest's logical keys only."""
    if source.model is None:
        return [
            f"no model section to build GPT-2's config from ({source.origin}); export a run, or "
            "pass --spec with the job spec it trained under"
        ]
    shapes = {
        name.removeprefix(MODEL_PREFIX): tuple(key.shape or ())
        for name, key in checkpoint.manifest.logical_keys.items()
        if name.startswith(MODEL_PREFIX) and key.kind == "tensor"
    }
    positions = source.n_positions or shapes.get("wpe.weight", (0,))[0]
    return hf_gpt2.mapping_problems(shapes, source.model, positions)


def export_model(
    storage: CheckpointStorage,
    checkpoint: CommittedCheckpoint,
    out_dir: str | os.PathLike[str],
    *,
    source: ExportSource,
    format: ExportFormat = ExportFormat.AUTO,
) -> ReleaseManifest:
    """Write the export of `checkpoint` into `out_dir` (new or empty) in `format`."""
    final = Path(out_dir).absolute()
    _check_destination(final)
    not_mapped: list[str] = []
    if format is not ExportFormat.RUNWRIGHT:
        not_mapped = _mapping_problems(source, checkpoint)
        if not_mapped and format is ExportFormat.HF_GPT2:
            raise hf_gpt2.UnmappableModelError(
                f"not exporting as hf-gpt2: the checkpoint's model does not map onto GPT-2 "
                f"(model section from {source.origin}): " + "; ".join(not_mapped) + ". "
                "--format runwright exports any model under runwright's own names"
            )
    fmt = ExportFormat.RUNWRIGHT if not_mapped else format
    if fmt is ExportFormat.AUTO:
        fmt = ExportFormat.HF_GPT2
    tokenizer_sha = _check_tokenizer(source, checkpoint, fmt)
    report = verify_checkpoint(storage, checkpoint.path, checkpoint.manifest, "full")
    if not report.ok:
        raise CheckpointCorruptError(
            f"not exporting {checkpoint.folder}: {report.summary()}. Export an older checkpoint."
        )
    weights = read_weights(storage, checkpoint)
    if fmt is ExportFormat.HF_GPT2:
        assert source.model is not None  # _mapping_problems refused a source without one
        positions = source.n_positions or weights["wpe.weight"].shape[0]
        tensors = hf_gpt2.gpt2_weights(weights, source.model, positions)
    else:
        tensors = weights
    release = ReleaseManifest(
        format=fmt,
        source_checkpoint_id=checkpoint.record.checkpoint_id,
        source_step=checkpoint.record.step,
        source_manifest_sha256=checkpoint.record.manifest_sha256,
        run_id=source.run_id,
        spec_hash=checkpoint.manifest.spec_hash or source.spec_hash,
        data_manifest_id=checkpoint.manifest.data_manifest_id or source.dataset_id,
        tokenizer_hash=checkpoint.manifest.tokenizer_hash,
        tokenizer_sha256=tokenizer_sha,
        config_origin=source.origin,
        parameters=sum(t.numel() for t in weights.values()),
        files=[],
        exported_unix_seconds=time.time(),
        not_mapped=not_mapped,
        notes=_notes(fmt, source),
    )
    out = final.with_name(f"{final.name}.partial-{os.getpid()}")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        if fmt is ExportFormat.HF_GPT2:
            _write_hf(out, tensors, checkpoint, source)
        else:
            _write_runwright(out, tensors, checkpoint, source)
        release = _seal(out, release)
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


def _notes(fmt: ExportFormat, source: ExportSource) -> list[str]:
    notes = list(hf_gpt2.NOTES) if fmt is ExportFormat.HF_GPT2 else []
    if source.tokenizer is None:
        notes.append(
            "no tokenizer: the run trained on synthetic data or none was named; pass "
            "--tokenizer to carry one"
        )
    elif source.tokenizer.eod_token_id is None and fmt is ExportFormat.HF_GPT2:
        notes.append("no EOD token known (a --tokenizer of no dataset): bos/eos are not set")
    return notes


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def _write_hf(
    out: Path,
    tensors: dict[str, torch.Tensor],
    checkpoint: CommittedCheckpoint,
    source: ExportSource,
) -> None:
    """GPT2LMHeadModel's files and, with a tokenizer, PreTrainedTokenizerFast's."""
    assert source.model is not None
    # transformers refuses a safetensors file whose metadata lacks format=pt.
    metadata = {"format": "pt", "checkpoint_id": checkpoint.folder}
    save_file(tensors, out / "model.safetensors", metadata=metadata)
    wte = tensors[hf_gpt2.HF_PREFIX + "wte.weight"]
    positions = tensors[hf_gpt2.HF_PREFIX + "wpe.weight"].shape[0]
    tokenizer = source.tokenizer
    eod_id = tokenizer.eod_token_id if tokenizer else None
    _write_json(
        out / "config.json", hf_gpt2.gpt2_config(source.model, positions, eod_id, wte.dtype)
    )
    if eod_id is not None:
        _write_json(
            out / "generation_config.json", {"bos_token_id": eod_id, "eos_token_id": eod_id}
        )
    if tokenizer is None:
        return
    shutil.copyfile(_tokenizer_file(tokenizer), out / "tokenizer.json")
    specials = {"bos_token": tokenizer.eod_token, "eos_token": tokenizer.eod_token}
    specials = {k: v for k, v in specials.items() if v is not None}
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": positions,
            # The dataset's tokenizer adds no special tokens when encoding; packing adds EOD.
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            **specials,
        },
    )
    _write_json(out / "special_tokens_map.json", specials)


def _write_runwright(
    out: Path,
    tensors: dict[str, torch.Tensor],
    checkpoint: CommittedCheckpoint,
    source: ExportSource,
) -> None:
    save_file(tensors, out / "model.safetensors", metadata={"checkpoint_id": checkpoint.folder})
    if source.given_config is not None:
        config: dict[str, Any] = source.given_config
    elif source.model is not None:
        # What `runwright.train.model.GPT(ModelSpec(**model), max_positions)` rebuilds it from.
        config = {
            "model": source.model.model_dump(mode="json"),
            "max_positions": source.n_positions,
        }
        if source.tokenizer is not None:
            config["eod_token_id"] = source.tokenizer.eod_token_id
    else:
        config = {}
    _write_json(out / "config.json", config)
    if source.tokenizer is not None:
        given = Path(source.tokenizer.path)
        target = out / "tokenizer"
        if given.is_dir():
            shutil.copytree(given, target, dirs_exist_ok=True)
        else:
            target.mkdir(exist_ok=True)
            shutil.copy2(given, target / given.name)


def _seal(out: Path, release: ReleaseManifest) -> ReleaseManifest:
    """`release` listing every file written, saved as release.json."""
    files = [
        ExportedFile(
            name=str(p.relative_to(out)), size_bytes=p.stat().st_size, sha256=file_sha256(p)
        )
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != RELEASE_FILE
    ]
    release = release.model_copy(update={"files": files})
    (out / RELEASE_FILE).write_text(release.model_dump_json(indent=1) + "\n")
    return release
