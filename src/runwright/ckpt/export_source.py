"""What an export is built from besides the weights: the model's shape, its positions, the
tokenizer it trained with, and the provenance that goes into release.json.

Found, in this order of preference, from
1. the run: `<root>/runs/<run>/spec.json`, the spec the controller launched it with (a run id
   target, or a checkpoint root whose parent folder holds spec.json, which is a run's own);
2. `--spec FILE`: the job spec a script ran with under plain torchrun;
3. `--model-config FILE` (and `--tokenizer`): a JSON config for a checkpoint with no spec, kept
   verbatim as the runwright format's config.json and read as the spec's `model` section for
   hf-gpt2.

With a spec, the tokenizer is the dataset's (`data.dataset`/manifest.json names its file and
sha256) or `tokenizer.path`; a relative dataset path is read from the current folder (workers
read it from the folder the run was submitted from: run the export there).
"""

import hashlib
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runwright.ckpt.errors import CheckpointError
from runwright.layout import resolve_root, run_paths
from runwright.records import Record
from runwright.spec import JobSpec, ModelSpec, load_spec, spec_from_mapping

SPEC_FILE = "spec.json"
SPEC_MAX_BYTES = 16 << 20


class TokenizerSource(Record):
    """The tokenizer an export carries."""

    path: str
    """A tokenizer.json (HF `tokenizers`) or, for the runwright format only, a folder to copy."""
    sha256: str | None = None
    """Its sha256 as the dataset manifest records it (checked against the file when copied)."""
    eod_token: str | None = None
    """End-of-document token text: GPT-2's bos and eos token."""
    eod_token_id: int | None = None
    """Its id."""
    vocab_size: int | None = None
    """Ids the tokenizer produces (the model's vocabulary must cover them)."""


class ExportSource(Record):
    """Everything an export needs besides the weights, and where it came from."""

    origin: str
    """Where the model config came from (a spec file, a run's spec.json, --model-config)."""
    run_id: str | None = None
    """The run, when the export came from one."""
    spec_hash: str | None = None
    """Hash of the job spec the model trained under."""
    model: ModelSpec | None = None
    """The spec's model section (None: a config that is not one, so only the runwright format)."""
    n_positions: int | None = None
    """Positions the model was built with (data.sequence_length); None: from wpe's rows."""
    dataset_id: str | None = None
    """The dataset the run trained on."""
    given_config: dict[str, Any] | None = None
    """A caller-passed config, written verbatim as the runwright format's config.json."""
    tokenizer: TokenizerSource | None = None
    """The tokenizer to carry, if known."""


def resolve_source(
    target: str,
    checkpoint_root: str,
    root: str | os.PathLike[str] | None = None,
    *,
    spec_path: str | os.PathLike[str] | None = None,
    model_config: dict[str, Any] | None = None,
    tokenizer_path: str | os.PathLike[str] | None = None,
) -> ExportSource:
    """The export source of `runwright ckpt export TARGET`: the run's spec.json when TARGET is a
    run (a run id, as `inventory.checkpoint_root` reads it, or a run's `<run>/checkpoints`
    folder), else `--spec`, else `--model-config`; `--tokenizer` replaces the tokenizer."""
    names_run = root is not None or not ("/" in target or "://" in target or os.path.isdir(target))
    if names_run:
        run_spec: Path | None = run_paths(resolve_root(root), target).spec_file
        run_id: str | None = target
    else:
        run_spec = None if "://" in checkpoint_root else Path(checkpoint_root).parent / SPEC_FILE
        run_id = run_spec.parent.name if run_spec else None
    if run_spec is not None and run_spec.is_file():
        given = [n for n, v in (("--spec", spec_path), ("--model-config", model_config)) if v]
        if given:
            raise CheckpointError(
                f"{target} is a run: its model config comes from {run_spec}; leave out "
                f"{' and '.join(given)} (they are for checkpoint folders without a run)"
            )
        source = from_run_spec(run_spec, run_id, tokenizer_given=tokenizer_path is not None)
    elif spec_path is not None:
        if model_config is not None:
            raise CheckpointError("give --spec or --model-config, not both")
        source = from_spec_file(spec_path, tokenizer_given=tokenizer_path is not None)
    else:
        source = from_model_config(model_config)
    return with_tokenizer(source, tokenizer_path)


def from_spec(
    spec: JobSpec, origin: str, run_id: str | None = None, *, tokenizer_given: bool = False
) -> ExportSource:
    """The export source a job spec describes: its model section, its sequence length, and the
    tokenizer of its dataset (or `tokenizer.path`). With `tokenizer_given` (`--tokenizer`), a
    dataset that cannot be read (a URL, another machine's folder) is no error."""
    tokenizer = None
    dataset_id = None
    if spec.tokenizer.path is not None:
        tokenizer = TokenizerSource(
            path=spec.tokenizer.path,
            sha256=spec.tokenizer.hash,
            eod_token_id=spec.tokenizer.eod_token_id,
        )
    if spec.data.dataset is not None:
        try:
            manifest = _dataset_manifest(spec.data.dataset)
        except CheckpointError:
            if not tokenizer_given:
                raise
            return ExportSource(
                origin=origin,
                run_id=run_id,
                spec_hash=spec.spec_hash,
                model=spec.model,
                n_positions=spec.data.sequence_length,
                tokenizer=tokenizer,
            )
        dataset_id = manifest.dataset_id
        record = manifest.tokenizer
        if tokenizer is None:
            tokenizer = TokenizerSource(
                path=str(_local(spec.data.dataset) / record.file),
                sha256=record.sha256,
                eod_token=record.eod_token,
                eod_token_id=record.eod_token_id,
                vocab_size=record.vocab_size,
            )
    return ExportSource(
        origin=origin,
        run_id=run_id,
        spec_hash=spec.spec_hash,
        model=spec.model,
        n_positions=spec.data.sequence_length,
        dataset_id=dataset_id,
        tokenizer=tokenizer,
    )


def _local(dataset: str) -> Path:
    if "://" in dataset and not dataset.startswith("file://"):
        raise CheckpointError(
            f"data.dataset {dataset} is a URL; the export copies the tokenizer from a local "
            "folder: pass --tokenizer with the dataset's tokenizer.json"
        )
    return Path(dataset.removeprefix("file://")).expanduser()


def _dataset_manifest(dataset: str) -> Any:
    from runwright.data import DataError, read_manifest

    folder = _local(dataset)
    try:
        return read_manifest(folder)
    except DataError as exc:
        where = "" if folder.is_absolute() else f" (read from {Path.cwd()})"
        raise CheckpointError(
            f"data.dataset {dataset}{where}: {exc}. The export copies the run's tokenizer from "
            "that dataset: run it from the folder the run was submitted from, or pass "
            "--tokenizer with the tokenizer.json"
        ) from None


def from_run_spec(
    spec_file: Path, run_id: str | None, *, tokenizer_given: bool = False
) -> ExportSource:
    """The export source of a run launched by the controller, from its spec.json."""
    import json

    from runwright.ckpt.storage import read_local_record

    try:
        data = json.loads(read_local_record(spec_file, SPEC_MAX_BYTES))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the run's spec {spec_file}: {exc}") from None
    spec = spec_from_mapping(data, str(spec_file))
    return from_spec(spec, f"run spec {spec_file}", run_id, tokenizer_given=tokenizer_given)


def from_spec_file(path: str | os.PathLike[str], *, tokenizer_given: bool = False) -> ExportSource:
    """The export source of `--spec FILE` (a script's spec under plain torchrun)."""
    origin = f"spec {os.fspath(path)}"
    return from_spec(load_spec(path), origin, tokenizer_given=tokenizer_given)


def from_model_config(config: dict[str, Any] | None) -> ExportSource:
    """The export source of `--model-config` (or of nothing): kept verbatim for the runwright
    format, and read as the spec's `model` section for hf-gpt2 when it is one."""
    model = None
    if config is not None:
        try:
            model = ModelSpec.model_validate(config)
        except ValidationError:
            model = None  # not runwright's model section: the runwright format keeps it as is
    origin = "--model-config" if config is not None else "no model config given"
    return ExportSource(origin=origin, model=model, given_config=config)


def with_tokenizer(source: ExportSource, path: str | os.PathLike[str] | None) -> ExportSource:
    """`source` carrying the tokenizer at `path` (`--tokenizer`) instead of the one it names; the
    EOD token and vocabulary stay those the dataset recorded, if the sha256 matches."""
    if path is None:
        return source
    given = Path(path)
    if not (given.is_file() or given.is_dir()):
        raise CheckpointError(
            f"tokenizer {given} is neither a file nor a folder; pass the tokenizer file or the "
            "folder that holds its files"
        )
    known = source.tokenizer
    same = known is not None and given.is_file() and known.sha256 == file_sha256(given)
    tokenizer = (
        known.model_copy(update={"path": str(given)})
        if same and known is not None
        else TokenizerSource(path=str(given))
    )
    return source.model_copy(update={"tokenizer": tokenizer})


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()
