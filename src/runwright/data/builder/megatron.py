"""Megatron-LM interop: import their `.bin`/`.idx` corpora, export ours in their conventions.

A Megatron corpus (e.g. from `tools/preprocess_data.py`) has token shards but no manifest: no
digests, no tokenizer hash, no lineage. `import_megatron` reads every pair with the same reader
the loader uses (`indexed.open_shard`, written from the format description), checks the token
ids against the vocabulary, and writes a content-addressed dataset whose lineage names each
input pair by file name and sha256. Importing the same pairs with the same options twice gives
the same dataset id, and an existing dataset folder is reused, never overwritten.

Each Megatron sequence becomes one document. `preprocess_data.py --append-eod` stores the EOD
token at the end of every document, while runwright's packers add an EOD slot themselves:
`strip_eod=True` removes a trailing EOD so the packed stream has one per document, not two.

The other way: a runwright shard already is a valid Megatron pair, but it stores documents
without EOD, and Megatron's GPT dataset concatenates documents as stored, so it would see no
boundaries. `export_megatron` writes one pair per source named as `preprocess_data.py` names
its output (`<prefix>_<source>_document`), with the EOD appended to every document by default,
in the shard dtype (uint16 or int32).
"""

import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress

from runwright.data.builder.progress import progress_bar
from runwright.data.errors import DataError
from runwright.data.format.dataset import file_sha256, open_dataset
from runwright.data.format.indexed_shard import IndexedShard, IndexedWriter, open_shard
from runwright.data.format.manifest import (
    MANIFEST_FILE,
    MAX_VOCAB_SIZE,
    DatasetManifest,
    InputRecord,
    StageRecord,
)
from runwright.data.format.pretokenized import write_pretokenized
from runwright.data.format.untrusted import check_name
from runwright.layout import datasets_dir


@dataclass(frozen=True)
class ImportResult:
    """A finished import."""

    dataset_id: str
    folder: Path
    manifest: DatasetManifest
    documents: int
    """Documents imported (one per Megatron sequence)."""
    tokens: int
    """Tokens imported (after any stripped EOD)."""
    eod_stripped: int
    """Documents whose trailing EOD was removed."""
    reused: bool
    """True when a dataset with this id was already there."""


def _prefix(path: str | Path) -> Path:
    """`corpus_text_document`, `corpus_text_document.bin` and `.idx` all name the same pair."""
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".bin", ".idx") else path


def _open_checked(prefix: Path, vocab_size: int) -> IndexedShard:
    if not prefix.with_suffix(".idx").exists():
        raise DataError(
            f"{prefix.with_suffix('.idx')} does not exist; pass the prefix of a Megatron "
            "`.bin`/`.idx` pair (e.g. data/corpus_text_document)"
        )
    shard = open_shard(prefix)
    if shard.dtype.kind not in "iu":
        raise DataError(f"{prefix.name}.idx: dtype {shard.dtype} does not hold token ids")
    if shard.tokens.shape[0]:
        low, high = int(shard.tokens.min()), int(shard.tokens.max())
        if low < 0 or high >= vocab_size:
            bad = high if high >= vocab_size else low
            raise DataError(
                f"{prefix.name}.bin holds token id {bad}, outside [0, vocab_size={vocab_size}); "
                "pass the vocabulary size of the tokenizer that made it (--vocab-size)"
            )
    return shard


def import_megatron(
    sources: Mapping[str, Sequence[str | Path]],
    root: str | Path,
    *,
    vocab_size: int,
    eod_token_id: int,
    tokenizer_file: str | Path | None = None,
    strip_eod: bool = False,
    name: str = "megatron-import",
    max_tokens_per_shard: int = 1 << 26,
    show_progress: bool = False,
    console: Console | None = None,
) -> ImportResult:
    """Import Megatron pairs (source name -> shard prefixes) into `<root>/datasets/<id>/`."""
    if not sources or not all(sources.values()):
        raise DataError("nothing to import: give every source at least one shard prefix")
    for source in sources:
        try:
            check_name(source, "source name")
        except ValueError as exc:
            raise DataError(f"{exc} (pass SOURCE=PREFIX with a plain source name)") from None
    if not 0 < vocab_size <= MAX_VOCAB_SIZE:
        raise DataError(
            f"vocab_size={vocab_size} must lie in [1, {MAX_VOCAB_SIZE:,}]; pass the tokenizer's "
            "vocabulary size (--vocab-size)"
        )
    if not 0 <= eod_token_id < vocab_size:
        raise DataError(
            f"eod_token_id={eod_token_id} must lie in [0, vocab_size={vocab_size}); pass the "
            "tokenizer's end-of-document id (--eod-token-id)"
        )
    opened: dict[str, list[IndexedShard]] = {}
    inputs: list[InputRecord] = []
    for source, prefixes in sources.items():
        for prefix in map(_prefix, prefixes):
            opened.setdefault(source, []).append(_open_checked(prefix, vocab_size))
            for suffix in (".bin", ".idx"):
                path = prefix.with_suffix(suffix)
                inputs.append(
                    InputRecord(
                        source=source,
                        path=path.name,
                        bytes=path.stat().st_size,
                        sha256=file_sha256(path),
                    )
                )
    total = sum(s.documents for shards in opened.values() for s in shards)
    counts = {"documents": 0, "tokens": 0, "stripped": 0}

    def documents(shards: list[IndexedShard], progress: Progress | None, task) -> Iterator:
        for shard in shards:
            for i in range(shard.documents):
                doc = shard.document(i)
                if strip_eod and doc.shape[0] and int(doc[-1]) == eod_token_id:
                    doc = doc[:-1]
                    counts["stripped"] += 1
                counts["documents"] += 1
                counts["tokens"] += int(doc.shape[0])
                if progress is not None and not counts["documents"] % 4096:
                    progress.update(task, completed=counts["documents"])
                yield np.asarray(doc)

    datasets = datasets_dir(Path(root))
    staging = datasets / f".import-{uuid.uuid4().hex[:12]}"
    stage = StageRecord(
        name="megatron-import",
        parameters={"strip_eod": strip_eod, "eod_token_id": eod_token_id},
    )
    try:
        with progress_bar(show_progress, console) as progress:
            task = progress.add_task("importing documents", total=total) if progress else None
            manifest = write_pretokenized(
                staging,
                {src: documents(shards, progress, task) for src, shards in opened.items()},
                vocab_size=vocab_size,
                eod_token_id=eod_token_id,
                name=name,
                tokenizer_file=tokenizer_file,
                max_tokens_per_shard=max_tokens_per_shard,
                inputs=inputs,
                stage=stage,
            )
            if progress is not None:
                progress.update(task, completed=total)
        folder = datasets / manifest.dataset_id
        reused = (folder / MANIFEST_FILE).exists()
        if not reused:
            if folder.exists():  # residue of an interrupted move: no manifest, nothing committed
                shutil.rmtree(folder)
            try:
                staging.rename(folder)
            except OSError:
                # A concurrent import of the same content got there first.
                if not (folder / MANIFEST_FILE).exists():
                    raise
                reused = True
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return ImportResult(
        dataset_id=manifest.dataset_id,
        folder=folder,
        manifest=manifest,
        documents=counts["documents"],
        tokens=counts["tokens"],
        eod_stripped=counts["stripped"],
        reused=reused,
    )


@dataclass(frozen=True)
class ExportResult:
    """A finished export: one Megatron pair per source."""

    prefixes: dict[str, Path]
    """Source name -> the written pair's prefix (`<prefix>.bin`, `<prefix>.idx`)."""
    documents: int
    tokens: int
    """Tokens written, EODs included."""


def export_megatron(
    dataset_path: str | Path,
    output_prefix: str | Path,
    *,
    split: str = "train",
    append_eod: bool = True,
    show_progress: bool = False,
    console: Console | None = None,
) -> ExportResult:
    """Write `<output_prefix>_<source>_document.bin/.idx` for every source of `split`.

    Documents keep the dataset's shard order. Existing files are refused, not overwritten.
    """
    dataset = open_dataset(dataset_path, verification="digest", split=split)
    manifest = dataset.manifest
    records = [r for r in manifest.shards if r.split == split]
    if not records:
        raise DataError(f"dataset {manifest.dataset_id[:12]} has no {split!r} shards")
    output_prefix = Path(output_prefix)
    sources = manifest.sources(split)
    targets = {src: Path(f"{output_prefix}_{src}_document") for src in sources}
    for target in targets.values():
        for suffix in (".bin", ".idx"):
            if target.with_suffix(suffix).exists():
                raise DataError(
                    f"{target.with_suffix(suffix)} exists; choose another output prefix or "
                    "remove it (an export never overwrites)"
                )
    output_prefix.parent.mkdir(parents=True, exist_ok=True)
    eod = np.array([manifest.tokenizer.eod_token_id])
    total = sum(r.documents for r in records)
    documents = tokens = 0
    with progress_bar(show_progress, console) as progress:
        task = progress.add_task("exporting documents", total=total) if progress else None
        for src, target in targets.items():
            mine = [r for r in records if r.source == src]
            writer = IndexedWriter(target, np.dtype(mine[0].dtype))
            for record in mine:
                shard = dataset.shards[record.name]
                for i in range(shard.documents):
                    doc = shard.document(i)
                    writer.add(np.concatenate([doc, eod.astype(doc.dtype)]) if append_eod else doc)
                if progress is not None:
                    progress.advance(task, shard.documents)
                documents += shard.documents
            writer.finish()
            tokens += writer.tokens
    return ExportResult(prefixes=targets, documents=documents, tokens=tokens)
