"""`runwright data build`: recipe -> content-addressed dataset folder.

Stages: list inputs -> partitions (read, normalise, filter, hash, MinHash; in parallel processes)
-> exact dedup, eval split, near dedup (one pass, in order) -> tokenizer (load or train on train)
-> tokenize and shard -> manifest (sealed: dataset_id = sha256 of its canonical form).

Fault handling (seed 000, "data processing DAG retry boundaries"): a finished partition writes a
completion marker keyed by its inputs and stage parameters, so a re-run redoes only what did not
finish; I/O errors retry with doubling backoff up to `max_attempts` and, if they persist, fail
the build naming the partitions to re-run; deterministic errors (undecodable bytes, schema
mismatch, oversized record, unparseable file) send the record to `quarantine/` with its reason and
the build continues. Work files live in `<root>/datasets/.work/<recipe key>/`. The partition
runner (retries, markers, quarantine of records) is `partitions.py`; this module assembles their
results into shards and the manifest.
"""

import json
import pickle
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from runwright import __version__
from runwright.data.builder.dedup import MINHASH_SCHEME, Candidate, decide
from runwright.data.builder.partitions import (
    PartitionResult,
    PartitionTask,
    plan_partitions,
    run_partitions,
)
from runwright.data.builder.progress import progress_bar
from runwright.data.builder.recipe import Recipe, load_recipe
from runwright.data.builder.tokenizer import load_tokenizer, save_and_describe, train_bpe
from runwright.data.format.dataset import file_sha256
from runwright.data.format.indexed_shard import token_dtype
from runwright.data.format.manifest import (
    MANIFEST_FILE,
    BuildInfo,
    DatasetManifest,
    InputRecord,
    Lineage,
    SourceStatistics,
    SplitBoundary,
    StageRecord,
    Statistics,
    read_manifest,
    write_manifest,
)
from runwright.data.format.pretokenized import length_histogram
from runwright.data.format.shard_set import ShardSet
from runwright.spec import canonical_json, sha256_hex

BUILD_ALGORITHM = "build-v1"


@dataclass(frozen=True)
class BuildResult:
    """A finished build."""

    dataset_id: str
    folder: Path
    manifest: DatasetManifest
    partitions_run: int
    partitions_reused: int
    quarantined: int
    seconds: float


def _lineage_sources(recipe: Recipe) -> list[dict[str, Any]]:
    # Paths stay out of the hashed part: they are machine-specific; inputs are recorded by
    # relative path and digest instead.
    return [s.model_dump(exclude={"paths", "files_per_partition"}) for s in recipe.sources]


def build_dataset(
    recipe: Recipe | str | Path,
    root: str | Path,
    *,
    variables: dict[str, str] | None = None,
    show_progress: bool = False,
    console: Console | None = None,
) -> BuildResult:
    """Build (or find already built) the dataset a recipe describes under `<root>/datasets/`."""
    began = time.perf_counter()
    recipe_path = ""
    if not isinstance(recipe, Recipe):
        recipe_path = str(recipe)
        recipe = load_recipe(recipe, variables)
    root = Path(root)
    hashed_recipe = recipe.model_dump(exclude={"build"})
    hashed_recipe["sources"] = _lineage_sources(recipe)
    work = root / "datasets" / ".work" / sha256_hex(canonical_json(hashed_recipe))[:16]
    parts_dir = work / "partitions"
    parts_dir.mkdir(parents=True, exist_ok=True)
    with progress_bar(show_progress, console) as progress:
        tasks = plan_partitions(recipe, parts_dir)
        todo = [t for t in tasks if not t.finished]
        assembly = _assembly_key(recipe, tasks)
        if not todo:
            done = _already_assembled(root, work, assembly, len(tasks), began)
            if done is not None:
                return done
        run_partitions(todo, recipe.build.workers, progress)
        result = _assemble(
            recipe, recipe_path, root, work, tasks, len(todo), began, progress, console
        )
    marker = work / ASSEMBLED_FILE
    staged = marker.with_suffix(".tmp")
    staged.write_text(json.dumps({"assembly": assembly, "dataset_id": result.dataset_id}))
    staged.replace(marker)
    return result


ASSEMBLED_FILE = "assembled.json"
"""In a build's work folder: which assembly produced which dataset, so an unchanged rebuild
returns the published dataset instead of tokenizing and sharding every document again."""


def _assembly_key(recipe: Recipe, tasks: list[PartitionTask]) -> str:
    """Everything assembly reads besides the recipe (which keys the work folder itself)."""
    tokenizer = recipe.tokenizer.path
    return sha256_hex(
        canonical_json(
            {
                "partitions": [t.key for t in tasks],
                "tokenizer_sha256": file_sha256(tokenizer) if tokenizer else None,
                "code": f"runwright {__version__} {BUILD_ALGORITHM}",
            }
        )
    )


def _already_assembled(
    root: Path, work: Path, assembly: str, partitions: int, began: float
) -> BuildResult | None:
    """The published dataset of an identical earlier assembly, if it is still there."""
    try:
        marker = json.loads((work / ASSEMBLED_FILE).read_text())
    except (OSError, ValueError):
        return None
    folder = root / "datasets" / str(marker.get("dataset_id"))
    if marker.get("assembly") != assembly or not (folder / MANIFEST_FILE).exists():
        return None
    manifest = read_manifest(folder)
    return BuildResult(
        dataset_id=manifest.dataset_id,
        folder=folder,
        manifest=manifest,
        partitions_run=0,
        partitions_reused=partitions,
        quarantined=sum(manifest.statistics.quarantined.values()),
        seconds=time.perf_counter() - began,
    )


def _assemble(
    recipe: Recipe,
    recipe_path: str,
    root: Path,
    work: Path,
    tasks: list[PartitionTask],
    partitions_run: int,
    began: float,
    progress: Progress | None,
    console: Console | None,
) -> BuildResult:
    sources = [s.name for s in recipe.sources]
    records_read = dict.fromkeys(sources, 0)
    filtered: dict[str, dict[str, int]] = {s: {} for s in sources}
    quarantine: list[dict[str, Any]] = []
    inputs: list[InputRecord] = []
    texts: list[str] = []
    candidates: list[Candidate] = []
    for task in tasks:
        with open(task.out, "rb") as fh:
            part: PartitionResult = pickle.load(fh)
        name = task.source.name
        records_read[name] += part.records_read
        for reason, n in part.filtered.items():
            filtered[name][reason] = filtered[name].get(reason, 0) + n
        quarantine += [{"source": name, **q} for q in part.quarantine]
        inputs += [
            InputRecord(source=name, path=rel, bytes=size, sha256=digest)
            for rel, size, digest in part.inputs
        ]
        for text, digest, sig in part.docs:
            texts.append(text)
            candidates.append(Candidate(name, digest, sig))
    decisions = decide(candidates, recipe.dedup, recipe.eval)
    exact = dict.fromkeys(sources, 0)
    near = dict.fromkeys(sources, 0)
    removed_for_eval = 0
    for c, d in zip(candidates, decisions, strict=True):
        if d.reason == "exact-duplicate":
            exact[c.source] += 1
        elif d.reason is not None:
            near[c.source] += 1
            removed_for_eval += d.reason == "near-duplicate-of-eval"

    out = work / "out"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    train_texts = (t for t, d in zip(texts, decisions, strict=True) if d.split == "train")
    if recipe.tokenizer.path is not None:
        tok, trained = load_tokenizer(recipe.tokenizer), False
    else:
        tok, trained = train_bpe(train_texts, recipe.tokenizer), True
    tok_record = save_and_describe(tok, out, recipe.tokenizer, trained)
    dtype = token_dtype(tok_record.vocab_size)
    shards = ShardSet(out, dtype, recipe.max_tokens_per_shard)
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    kept = [k for k, d in enumerate(decisions) if d.split is not None]
    bar = progress.add_task("tokenize, shard", total=len(kept)) if progress else None
    chunk = 512
    for start in range(0, len(kept), chunk):
        idx = kept[start : start + chunk]
        encoded = tok.encode_batch([texts[k] for k in idx], add_special_tokens=False)
        for k, enc in zip(idx, encoded, strict=True):
            split = decisions[k].split or "train"
            source = candidates[k].source
            shards.add(source, split, enc.ids)
            c = counts.setdefault((split, source), {"docs": 0, "tokens": 0, "chars": 0, "lens": []})
            c["docs"] += 1
            c["tokens"] += len(enc.ids)
            c["chars"] += len(texts[k])
            c["lens"].append(len(enc.ids))
        if progress is not None and bar is not None:
            progress.advance(bar, len(idx))
    records = shards.finish()

    splits: dict[str, dict[str, SourceStatistics]] = {}
    for (split, source), c in sorted(counts.items()):
        splits.setdefault(split, {})[source] = SourceStatistics(
            documents=c["docs"],
            tokens=c["tokens"],
            chars=c["chars"],
            chars_per_token=round(c["chars"] / c["tokens"], 4) if c["tokens"] else 0.0,
            length_histogram=length_histogram(c["lens"]),
        )
    quarantined = dict.fromkeys(sources, 0)
    for q in quarantine:
        quarantined[q["source"]] += 1
    near_spec = recipe.dedup.near
    manifest = DatasetManifest(
        name=recipe.name,
        shards=records,
        tokenizer=tok_record,
        lineage=Lineage(
            recipe_name=recipe.name,
            inputs=inputs,
            stages=[
                StageRecord(name="read", parameters={"sources": _lineage_sources(recipe)}),
                StageRecord(name="normalise", parameters=recipe.normalise.model_dump()),
                StageRecord(
                    name="filter", parameters={"filters": [f.model_dump() for f in recipe.filters]}
                ),
                StageRecord(name="exact-dedup", parameters={"enabled": recipe.dedup.exact}),
                StageRecord(
                    name="near-dedup",
                    parameters={**near_spec.model_dump(), "scheme": MINHASH_SCHEME}
                    if near_spec
                    else {"enabled": False},
                ),
                StageRecord(name="eval-split", parameters=recipe.eval.model_dump()),
                StageRecord(
                    name="tokenize",
                    parameters={
                        "trained": trained,
                        "train": recipe.tokenizer.train.model_dump()
                        if recipe.tokenizer.train
                        else None,
                        "eod_token": recipe.tokenizer.eod_token,
                    },
                ),
                StageRecord(
                    name="shard",
                    parameters={
                        "format": "megatron-mmidx-v1",
                        "dtype": dtype.name,
                        "max_tokens_per_shard": recipe.max_tokens_per_shard,
                    },
                ),
            ],
            code_version=f"runwright {__version__} {BUILD_ALGORITHM}",
        ),
        split=SplitBoundary(
            eval_fraction=recipe.eval.fraction,
            eval_seed=recipe.eval.seed,
            eval_documents=sum(s.documents for s in splits.get("eval", {}).values()),
            train_removed_as_eval_duplicates=removed_for_eval,
            near_dedup_threshold=near_spec.threshold if near_spec else None,
        ),
        statistics=Statistics(
            splits=splits,
            records_read=records_read,
            filtered=filtered,
            exact_duplicates=exact,
            near_duplicates=near,
            quarantined=quarantined,
            duplicate_rate=round((sum(exact.values()) + sum(near.values())) / len(candidates), 6)
            if candidates
            else 0.0,
        ),
        tags=recipe.tags,
    ).sealed()
    quarantine_file = None
    if quarantine:
        qdir = out / "quarantine"
        qdir.mkdir()
        with open(qdir / "records.jsonl", "w", encoding="utf-8") as fh:
            for q in quarantine:
                fh.write(json.dumps(q, sort_keys=True) + "\n")
        quarantine_file = "quarantine/records.jsonl"
    seconds = time.perf_counter() - began
    manifest = manifest.model_copy(
        update={
            "build": BuildInfo(
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                recipe_path=recipe_path,
                quarantine_file=quarantine_file,
                seconds=round(seconds, 3),
            )
        }
    )
    write_manifest(out, manifest)
    final = root / "datasets" / manifest.dataset_id
    if final.exists():
        shutil.rmtree(out)
    else:
        out.replace(final)
    if console is not None and quarantine:
        console.print(f"{len(quarantine)} records quarantined: see {final / quarantine_file}")
    return BuildResult(
        dataset_id=manifest.dataset_id,
        folder=final,
        manifest=manifest,
        partitions_run=partitions_run,
        partitions_reused=len(tasks) - partitions_run,
        quarantined=len(quarantine),
        seconds=seconds,
    )
