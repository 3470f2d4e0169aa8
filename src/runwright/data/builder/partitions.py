"""Build partitions: some input files of one source, read, cleaned, filtered and hashed.

A partition is the build's retry and resume unit (seed 000, "data processing DAG retry
boundaries"): it runs in its own process, writes its result next to a completion marker keyed by
its inputs and stage parameters, so a re-run redoes only partitions whose marker is missing or
stale. Reading retries transient I/O errors with doubling backoff. The work itself is the Read,
Normalise and Filter stages (stages.py), with the language stage before the filters and the PII
stage after them when the recipe has them (language.py, pii.py), then the hash and MinHash
signature of each document that passed: a record that cannot be used (undecodable, oversized, a
failing custom reader) goes to the quarantine list with its reason.
"""

import multiprocessing
import os
import pickle
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich.progress import Progress

from runwright.data.builder.dedup import signature, text_hash
from runwright.data.builder.language import LanguageId, preload
from runwright.data.builder.pii import Pii
from runwright.data.builder.profile import PartitionProfile, tally
from runwright.data.builder.recipe import (
    LanguageSpec,
    NearDedupSpec,
    NormaliseSpec,
    PiiSpec,
    Recipe,
    SourceSpec,
)
from runwright.data.builder.sources import READERS, InputFile, list_inputs, read_bytes
from runwright.data.builder.stages import Counters, Document, Filter, Normalise, Read
from runwright.data.errors import BuildError
from runwright.data.format.manifest import InputRecord
from runwright.lifetime import die_with_pid
from runwright.spec import canonical_json, sha256_hex

TRANSIENT = (TimeoutError, ConnectionError, InterruptedError, BlockingIOError)
T = TypeVar("T")


def with_retries(
    fn: Callable[[], T],
    attempts: int,
    backoff_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
    transient: tuple[type[BaseException], ...] = TRANSIENT,
) -> T:
    """Call fn, retrying transient errors with doubling delays (b, 2b, 4b, ...)."""
    for attempt in range(attempts):
        try:
            return fn()
        except transient:
            if attempt == attempts - 1:
                raise
            sleep(backoff_seconds * (1 << attempt))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class PartitionTask:
    """One unit of work: some input files of one source."""

    source: SourceSpec
    normalise: NormaliseSpec
    filters: list[Any]
    near: NearDedupSpec | None
    inputs: list[InputFile]
    key: str
    out: Path
    attempts: int
    backoff_seconds: float
    language: LanguageSpec | None = None
    pii: PiiSpec | None = None

    @property
    def finished(self) -> bool:
        """Its completion marker exists and names the same inputs and parameters."""
        marker = self.out.with_suffix(".done")
        return marker.exists() and marker.read_text() == self.key


RESULT_FORMAT = "partition-result-v4"
"""What a partition's pickle holds, in its key: a marker written by code whose result differs is
stale, so that partition is redone instead of failing to load. v1: tuples, pickled from
runwright.data.partitions; v2: the same from runwright.data.builder.partitions; v3: Documents
and what each stage counted (stages.py); v4: the language and PII stages and the profile's
counts (profile.py)."""


@dataclass
class PartitionResult:
    """What a partition produced (pickled next to its marker)."""

    docs: list[Document] = field(default_factory=list)
    """Documents that passed the filters, hashed (and signed when near dedup is on)."""
    inputs: list[InputRecord] = field(default_factory=list)
    """Inputs read, with their digests."""
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    """Records sent to quarantine, with their reasons."""
    counters: dict[str, Counters] = field(default_factory=dict)
    """Stage name -> what that stage counted in this partition."""
    profile: PartitionProfile = field(default_factory=PartitionProfile)
    """Anomalies and per-language counts (profile.py)."""
    pii: Pii | None = None
    """The PII stage with its counts by kind, when the recipe has one."""


def run_partition(task: PartitionTask) -> str:
    """Process one partition and write its result and marker; returns its key."""
    read, clean, filters = Read([task.source]), Normalise(task.normalise), Filter(task.filters)

    def fetched() -> Iterator[tuple[str, bytes]]:
        for item in task.inputs:
            data = with_retries(
                lambda u=item.url: read_bytes(u), task.attempts, task.backoff_seconds
            )
            yield item.relative, data

    result = PartitionResult(inputs=read.inputs, quarantine=read.quarantine)
    profile = result.profile
    docs = profile.normalised(clean.run(profile.raw(read.run(task.source, fetched()))))
    language = LanguageId(task.language) if task.language is not None else None
    if language is not None:
        docs = language.run(docs)
    docs = tally(filters.run(tally(docs, profile.identified)), profile.passed_filters)
    result.pii = Pii(task.pii) if task.pii is not None else None
    if result.pii is not None:
        docs = result.pii.run(docs)
    for doc in tally(docs, profile.after_pii):
        doc.digest = text_hash(doc.text)
        if task.near is not None:
            doc.signature = signature(doc.text, task.near)
        result.docs.append(doc)
    result.counters = {s.name: s.counters for s in (read, clean, filters)}
    if language is not None:
        result.counters[language.name] = language.counters
    tmp = task.out.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(task.out)
    task.out.with_suffix(".done").write_text(task.key)
    return task.key


def load_partition(task: PartitionTask) -> PartitionResult:
    with open(task.out, "rb") as fh:
        return pickle.load(fh)


def plan_partitions(recipe: Recipe, parts_dir: Path) -> list[PartitionTask]:
    """Every source's inputs in chunks of `files_per_partition`, each keyed by what it reads."""
    near = recipe.dedup.near
    tasks: list[PartitionTask] = []
    for source in recipe.sources:
        READERS.get(source.kind)  # an unknown reader fails the build before anything is written
        inputs = list_inputs(source)
        size = source.files_per_partition
        for k in range(0, len(inputs), size):
            chunk = inputs[k : k + size]
            key = sha256_hex(
                canonical_json(
                    {
                        "source": source.model_dump(exclude={"paths"}),
                        "normalise": recipe.normalise.model_dump(),
                        "filters": [f.model_dump() for f in recipe.filters],
                        "near": near.model_dump() if near else None,
                        "language": recipe.language.model_dump() if recipe.language else None,
                        "pii": recipe.pii.model_dump() if recipe.pii else None,
                        "inputs": [[i.url, i.size] for i in chunk],
                        "result": RESULT_FORMAT,
                    }
                )
            )
            tasks.append(
                PartitionTask(
                    source=source,
                    normalise=recipe.normalise,
                    filters=list(recipe.filters),
                    near=near,
                    inputs=chunk,
                    key=key,
                    out=parts_dir / f"{source.name}-{k // size:05d}.pkl",
                    attempts=recipe.build.max_attempts,
                    backoff_seconds=recipe.build.backoff_seconds,
                    language=recipe.language,
                    pii=recipe.pii,
                )
            )
    return tasks


def run_partitions(todo: list[PartitionTask], workers: int, progress: Progress | None) -> None:
    bar = progress.add_task("read, clean, hash", total=len(todo)) if progress else None
    failed: list[str] = []
    if any(t.language is not None for t in todo):
        preload()  # once here, not once per forked worker
    pool = (
        ProcessPoolExecutor(
            max_workers=workers,
            # Workers die with the build (SIGKILL included): an orphaned worker blocks on its
            # task pipe forever. "fork" makes this process, not a fork server, their parent, and
            # the fork happens here on the thread that keeps the pool until it is shut down.
            mp_context=multiprocessing.get_context("fork"),
            initializer=die_with_pid,
            initargs=(os.getpid(),),
        )
        if workers > 1 and len(todo) > 1
        else None
    )
    with pool or nullcontext():
        if pool is not None:
            futures = {pool.submit(run_partition, t): t for t in todo}
            done_iter = ((futures[f], f) for f in as_completed(futures))
        else:
            done_iter = ((t, None) for t in todo)
        for task, future in done_iter:
            try:
                future.result() if future is not None else run_partition(task)
            except (OSError, *TRANSIENT) as exc:
                failed.append(f"{task.out.stem} ({type(exc).__name__}: {exc})")
            if progress is not None and bar is not None:
                progress.advance(bar)
    if failed:
        raise BuildError(
            "these partitions could not be read after retries: "
            + "; ".join(failed)
            + ". Fix access to their inputs and run the build again: finished partitions are "
            "kept and only these are redone."
        )
