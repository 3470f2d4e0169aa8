"""`runwright data build`: recipe -> content-addressed dataset folder.

Stages (stages.py; each has its parameters, its counters and its own lineage record): list
inputs -> partitions (Read, Normalise, [LanguageId], Filter, [Pii], then the hash and MinHash; in
parallel processes) -> [LanguageFilter], ExactDedup, EvalSplit, NearDedup (over every document,
in order) -> Tokenize (load, or train on train) -> Shard -> manifest (sealed: dataset_id = sha256
of its canonical form). The manifest's lineage is the records of the stages that ran and its
statistics are their counters.

Fault handling (seed 000, "data processing DAG retry boundaries"): a finished partition writes a
completion marker keyed by its inputs and stage parameters, so a re-run redoes only what did not
finish; I/O errors retry with doubling backoff up to `max_attempts` and, if they persist, fail
the build naming the partitions to re-run; deterministic errors (undecodable bytes, schema
mismatch, oversized record, unparseable file) send the record to `quarantine/` with its reason and
the build continues. Work files live in `<root>/datasets/.work/<recipe key>/`. The partition
runner (retries, markers) is `partitions.py`; this module runs the stages over their results and
seals the manifest. The bracketed stages run when the recipe declares them (language.py,
pii.py); the statistics' profile (per source and language, tokenizer anomalies) is counted along
the way (profile.py).
"""

import json
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from runwright import __version__
from runwright.data.builder.functions import check_code
from runwright.data.builder.language import LanguageFilter, LanguageId
from runwright.data.builder.partitions import (
    PartitionTask,
    load_partition,
    plan_partitions,
    run_partitions,
)
from runwright.data.builder.pii import Pii
from runwright.data.builder.profile import ProfileCounter, tally
from runwright.data.builder.progress import progress_bar
from runwright.data.builder.recipe import Recipe, check_tokenizer_path, load_recipe
from runwright.data.builder.stages import (
    Document,
    EvalSplit,
    ExactDedup,
    Filter,
    NearDedup,
    Normalise,
    Read,
    Shard,
    Stage,
    Tokenize,
    source_lineage,
)
from runwright.data.format.dataset import file_sha256
from runwright.data.format.indexed_shard import token_dtype
from runwright.data.format.manifest import (
    MANIFEST_FILE,
    BuildInfo,
    DatasetManifest,
    Lineage,
    SplitBoundary,
    Statistics,
    read_manifest,
    write_manifest,
)
from runwright.layout import dataset_dir, dataset_work_dir
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


def build_dataset(
    recipe: Recipe | str | Path,
    root: str | Path,
    *,
    variables: dict[str, str] | None = None,
    allow_code: bool = False,
    show_progress: bool = False,
    console: Console | None = None,
) -> BuildResult:
    """Build (or find already built) the dataset a recipe describes under `<root>/datasets/`.

    `allow_code` lets the recipe name `module:function` filters and extractors (code that runs as
    the caller); without it only registered functions run (builder/functions.py, docs/trust.md).
    Everything a recipe can get wrong is refused before anything is written.
    """
    began = time.perf_counter()
    recipe_path = ""
    if not isinstance(recipe, Recipe):
        recipe_path = str(recipe)
        recipe = load_recipe(recipe, variables, allow_code=allow_code)
    else:
        check_tokenizer_path(recipe)
        check_code(recipe, allow_code)
    root = Path(root)
    hashed_recipe = recipe.model_dump(exclude={"build"})
    hashed_recipe["sources"] = [source_lineage(s) for s in recipe.sources]
    work = dataset_work_dir(root, sha256_hex(canonical_json(hashed_recipe))[:16])
    parts_dir = work / "partitions"
    with progress_bar(show_progress, console) as progress:
        tasks = plan_partitions(recipe, parts_dir)  # lists the inputs: may refuse the recipe
        parts_dir.mkdir(parents=True, exist_ok=True)
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
    dataset_id = str(marker.get("dataset_id"))
    if marker.get("assembly") != assembly or not re.fullmatch(r"[0-9a-f]{64}", dataset_id):
        return None
    folder = dataset_dir(root, dataset_id)
    if not (folder / MANIFEST_FILE).exists():
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
    read = Read(recipe.sources)
    clean = Normalise(recipe.normalise)
    filters = Filter(recipe.filters)
    language = LanguageId(recipe.language) if recipe.language is not None else None
    pii = Pii(recipe.pii) if recipe.pii is not None else None
    counted = ProfileCounter([s.name for s in recipe.sources], language is not None)
    docs: list[Document] = []
    for task in tasks:
        part = load_partition(task)
        for stage in (read, clean, filters, language):
            if stage is not None:
                stage.counters.add(part.counters[stage.name])
        if pii is not None and part.pii is not None:
            pii.add(part.pii)
        counted.partitions.add(part.profile)
        read.inputs += part.inputs
        read.quarantine += part.quarantine
        docs += part.docs

    by_language = (
        LanguageFilter(recipe.language, _identified(counted))
        if recipe.language is not None
        and (recipe.language.keep is not None or recipe.language.min_share is not None)
        else None
    )
    if by_language is not None:
        docs = list(by_language.run(docs))
    exact = ExactDedup(recipe.dedup.exact)
    evals = EvalSplit(recipe.eval)
    near = NearDedup(recipe.dedup.near)
    after_exact = list(tally(exact.run(tally(docs, counted.language_kept)), counted.after_exact))
    kept = list(tally(near.run(evals.run(after_exact)), counted.after_near))
    del after_exact
    out = work / "out"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tokenize = Tokenize(recipe.tokenizer)
    tokenizer = tokenize.prepare(kept, out)
    counted.unknown_token_id = tokenize.unknown_token_id()
    shard = Shard(recipe.max_tokens_per_shard, token_dtype(tokenizer.vocab_size))
    bar = progress.add_task("tokenize, shard", total=len(kept)) if progress else None
    advance = (lambda n: progress.advance(bar, n)) if progress and bar is not None else None
    shards = shard.run(counted.encoded(tokenize.run(kept, advance)), out)

    # build-v1 lists near-dedup before eval-split although the split runs first (near dedup
    # needs it); the list is part of the hashed manifest, so that order stays. The language
    # and PII stages are listed only when the recipe has them, so recipes without them keep
    # their dataset ids.
    stages: list[Stage] = [
        s
        for s in (read, clean, language, filters, pii, by_language, exact, near, evals)
        if s is not None
    ] + [tokenize, shard]
    statistics = _statistics(recipe, read, filters, exact, near, shard, (pii, by_language))
    sources = [s.name for s in recipe.sources]
    if pii is not None:
        counted.pii_found = pii.found
        counted.pii_documents.update({s: sum(c.values()) for s, c in pii.documents.items()})
    profile = counted.profile(
        read.counters.seen_per_source(sources), read.counters.dropped_per_source(sources)
    )
    manifest = DatasetManifest(
        name=recipe.name,
        shards=shards,
        tokenizer=tokenizer,
        lineage=Lineage(
            recipe_name=recipe.name,
            inputs=read.inputs,
            stages=[s.lineage() for s in stages],
            code_version=f"runwright {__version__} {BUILD_ALGORITHM}",
        ),
        split=_split_boundary(recipe, shard, near),
        statistics=statistics.model_copy(update={"profile": profile}),
        tags=recipe.tags,
    ).sealed()
    quarantine_file = _write_quarantine(out, read.quarantine)
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
    final = dataset_dir(root, manifest.dataset_id)
    if final.exists():
        shutil.rmtree(out)
    else:
        out.replace(final)
    if console is not None and quarantine_file is not None:
        console.print(f"{len(read.quarantine)} records quarantined: see {final / quarantine_file}")
    return BuildResult(
        dataset_id=manifest.dataset_id,
        folder=final,
        manifest=manifest,
        partitions_run=partitions_run,
        partitions_reused=len(tasks) - partitions_run,
        quarantined=len(read.quarantine),
        seconds=seconds,
    )


def _split_boundary(recipe: Recipe, shard: Shard, near: NearDedup) -> SplitBoundary:
    return SplitBoundary(
        eval_fraction=recipe.eval.fraction,
        eval_seed=recipe.eval.seed,
        eval_documents=sum(s.documents for s in shard.statistics().get("eval", {}).values()),
        train_removed_as_eval_duplicates=near.counters.dropped_for("near-duplicate-of-eval"),
        near_dedup_threshold=near.spec.threshold if near.spec else None,
    )


def _identified(counted: ProfileCounter) -> dict[str, Counter[str]]:
    """Source -> language -> documents the language stage saw (every partition's)."""
    out: dict[str, Counter[str]] = {}
    for (source, lang), n in counted.partitions.identified.items():
        out.setdefault(source, Counter())[lang] += n
    return out


def _statistics(
    recipe: Recipe,
    read: Read,
    filters: Filter,
    exact: ExactDedup,
    near: NearDedup,
    shard: Shard,
    dropping: tuple[Stage | None, ...] = (),
) -> Statistics:
    """The hashed statistics. The PII and language filter drops count with the filters'
    (`pii:dropped`, `language:<reason>`), only when those stages ran."""
    sources = [s.name for s in recipe.sources]
    filtered = filters.counters.reasons_per_source(sources)
    for stage in dropping:
        if stage is not None:
            for source, reasons in stage.counters.reasons_per_source(sources).items():
                filtered[source] = dict(sorted({**filtered[source], **reasons}.items()))
    exact_dropped = exact.counters.dropped_per_source(sources)
    near_dropped = near.counters.dropped_per_source(sources)
    candidates = sum(exact.counters.seen.values())  # documents that passed the filters
    duplicates = sum(exact_dropped.values()) + sum(near_dropped.values())
    return Statistics(
        splits=shard.statistics(),
        records_read=read.counters.seen_per_source(sources),
        filtered=filtered,
        exact_duplicates=exact_dropped,
        near_duplicates=near_dropped,
        quarantined=read.counters.dropped_per_source(sources),
        duplicate_rate=round(duplicates / candidates, 6) if candidates else 0.0,
    )


def _write_quarantine(out: Path, quarantine: list[dict[str, Any]]) -> str | None:
    """`quarantine/records.jsonl` inside the dataset folder, when anything was quarantined."""
    if not quarantine:
        return None
    qdir = out / "quarantine"
    qdir.mkdir()
    with open(qdir / "records.jsonl", "w", encoding="utf-8") as fh:
        for q in quarantine:
            fh.write(json.dumps(q, sort_keys=True) + "\n")
    return "quarantine/records.jsonl"
