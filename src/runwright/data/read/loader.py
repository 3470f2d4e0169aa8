"""DataLoader: a deterministic, resumable mixture/packing loader for any PyTorch script.

    planner (under a lock, in step order) -> read workers (materialise, in parallel)
        -> reorder buffer -> prefetch queue (prefetch_batches) -> __next__

The pipeline (prefetch.py) is bounded, so a slow consumer applies back-pressure all the way to
planning. Each batch carries the cursor *after* it; `state_dict()` returns the cursor of the last
batch handed to the caller, never one the prefetch ran ahead to, so restoring it neither skips
nor repeats. This module owns identity (dataset, tokenizer, algorithms) and the cursor.

Inside a run (`runwright.init()`) the loader reports what the run reads (reporting.py): the
dataset it opened, the mixture drawn per drift window and at close, and with each step the
script reports, the last batch's sample range, token counts and input wait, which the
consumed-sample ledger, the token accounting and the input-wait share read.
"""

import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ValidationError

from runwright.data.errors import CursorMismatchError, DataError, ManifestError
from runwright.data.format.dataset import OpenDataset, Verification, open_dataset
from runwright.data.format.manifest import DatasetManifest
from runwright.data.read.batch import Batch, LoaderStats, materialise
from runwright.data.read.cursor import DataCursor, reconcile
from runwright.data.read.drift import DRIFT_WINDOW_STEPS, Counts
from runwright.data.read.growth import coverage_change, take_source_change
from runwright.data.read.kernels import ShardTable
from runwright.data.read.ledger import ConsumptionLedger
from runwright.data.read.loss_groups import DEFAULT_LENGTH_EDGES, LossGroups
from runwright.data.read.mixture import MIXTURES
from runwright.data.read.packing import PACKERS
from runwright.data.read.prefetch import END, ReadPipeline
from runwright.data.read.quarantine import ShardGuard
from runwright.data.read.reporting import LoaderReports
from runwright.data.read.shuffle import SHUFFLES
from runwright.data.read.stages import resolve_stages
from runwright.data.read.step_plan import BatchPlan, CursorPoint, Planner
from runwright.data.read.stream import DocStream, StreamState
from runwright.data.read.tables import identity_cursor, source_tables
from runwright.events import report_at_close
from runwright.protocol import ENV_SKIP_SHARDS
from runwright.spec import DataSpec


def operator_skips() -> dict[str, str]:
    """The shards an operator told this run to skip (shard -> reason), as the controller passes
    them (protocol.ENV_SKIP_SHARDS); none outside a run or without one."""
    text = os.environ.get(ENV_SKIP_SHARDS)
    if not text:
        return {}
    try:
        named = json.loads(text)
    except ValueError as exc:
        raise DataError(
            f"{ENV_SKIP_SHARDS} is not JSON ({exc}): the controller writes it"
        ) from None
    if not isinstance(named, dict):
        raise DataError(f"{ENV_SKIP_SHARDS} must map shard names to reasons, got {text[:80]!r}")
    return {str(k): str(v) for k, v in named.items()}


def _useful_workers(requested: int) -> int:
    """Read workers worth starting: at most one fewer than the cores this process may use.

    The caller's thread reads too whenever nothing is ready (ReadPipeline.get), and on a
    single core a worker adds no throughput, only hand-offs (~10-15 us of CPU per batch,
    measured by benchmarks/data_loader.py).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(0, min(requested, (cores or 1) - 1))


class DataLoader:
    """Yields this rank's share of each global step, resumable from `state_dict()`.

    `global_batch_samples` packed sequences make a global step; rank `dp_rank` of `dp_size`
    gets `global_batch_samples // dp_size` of them. `resume` decides what `load_state_dict`
    accepts: `exact` refuses a cursor of another dataset, tokenizer, algorithm version, mixture,
    seed or sequence length; `coverage` keeps only per-source progress. `read_workers` defaults
    to the spec's, capped at the process's cores minus one; 0 reads on the caller's thread.

    A train shard that is corrupt or missing, at open or while it is read, is handled as
    `data_spec.on_corrupt_shard` says (data/read/quarantine.py). Under `skip` the ranks agree on
    it over `group` (a gloo-capable group; default: every rank of the default process group,
    and every rank must then construct a loader and take the same steps). `skip_shards` (shard
    name -> reason; default: what the controller passes in protocol.ENV_SKIP_SHARDS) are left
    out from the step the loader starts at, as an operator asked (quarantine reason `operator`).
    """

    def __init__(
        self,
        dataset_path: str | Path | None,
        data_spec: DataSpec,
        *,
        global_batch_samples: int,
        dp_rank: int = 0,
        dp_size: int = 1,
        epochs: int | None = None,
        resume: Literal["exact", "coverage"] = "exact",
        tokenizer_sha256: str | None = None,
        verification: Verification = "digest",
        cache_dir: str | Path | None = None,
        read_workers: int | None = None,
        prefetch_batches: int | None = None,
        reorder_capacity: int | None = None,
        drift_window_steps: int | None = DRIFT_WINDOW_STEPS,
        group: Any = None,
        loss_length_buckets: Sequence[int] | None = DEFAULT_LENGTH_EDGES,
        skip_shards: dict[str, str] | None = None,
    ) -> None:
        if dp_size < 1 or not 0 <= dp_rank < dp_size:
            raise DataError(f"dp_rank={dp_rank} must lie in [0, dp_size={dp_size})")
        if global_batch_samples < 1 or global_batch_samples % dp_size:
            raise DataError(
                f"global_batch_samples={global_batch_samples} must be a positive multiple of "
                f"dp_size={dp_size}; try {max(dp_size, global_batch_samples // dp_size * dp_size)}"
            )
        path = dataset_path if dataset_path is not None else data_spec.dataset
        if path is None:
            raise DataError("no dataset: pass dataset_path or set data.dataset in the spec")
        self.spec = data_spec
        self.global_batch_samples = global_batch_samples
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.epochs = epochs
        self.resume = resume
        self.read_workers = (
            read_workers if read_workers is not None else _useful_workers(data_spec.read_workers)
        )
        if self.read_workers < 0:
            raise DataError(f"read_workers={self.read_workers} must be 0 or more")
        self.prefetch_batches = prefetch_batches or data_spec.prefetch_batches
        self.reorder_capacity = reorder_capacity or max(2, 2 * self.read_workers)
        skip = data_spec.on_corrupt_shard == "skip"
        self.dataset: OpenDataset = open_dataset(
            path,
            verification=verification,
            cache_dir=cache_dir,
            split="train",
            broken="keep" if skip else "raise",
        )
        manifest = self.dataset.manifest
        if data_spec.manifest_id and data_spec.manifest_id != manifest.dataset_id:
            raise ManifestError(
                f"dataset at {path} has id {manifest.dataset_id}, the spec expects "
                f"{data_spec.manifest_id}; point data.dataset at the right build or update "
                "data.manifest_id"
            )
        if tokenizer_sha256 and tokenizer_sha256 != manifest.tokenizer.sha256:
            raise ManifestError(
                f"dataset tokenizer {manifest.tokenizer.sha256[:12]} differs from the expected "
                f"{tokenizer_sha256[:12]}; rebuild the dataset with that tokenizer"
            )
        self._shuffle = SHUFFLES.get(data_spec.shuffle)
        self._mixture = MIXTURES.get(data_spec.mixture.algorithm)
        self._packer = PACKERS.get(data_spec.packing)
        train = [s for s in manifest.shards if s.split == "train"]
        # A shard that could not be opened has no tokens to read: the planner never reads it.
        tokens = [
            self.dataset.shards[s.name].tokens
            if s.name in self.dataset.shards
            else np.zeros(0, dtype=np.dtype(s.dtype))
            for s in train
        ]
        # The shards' buffers, held once for the fill kernels (no per-step look-up).
        self._storage = ShardTable(tokens)
        self._itemsize = tokens[0].dtype.itemsize if tokens else 2
        tables = source_tables(self.dataset, data_spec, train)
        self._guard = ShardGuard(
            data_spec.on_corrupt_shard,
            self.dataset,
            train,
            tables,
            dp_rank,
            dp_size,
            group,
            operator=skip_shards if skip_shards is not None else operator_skips(),
        )
        self.sources = tables
        self.loss_groups: LossGroups | None = (
            None
            if loss_length_buckets is None
            else LossGroups(tuple(t.name for t in tables), tuple(loss_length_buckets))
        )
        """Each batch's labels by (source, length bucket), for runtime.SourceLoss; None: off."""
        self._stages = resolve_stages(data_spec, global_batch_samples)
        # Shards the cursor has quarantined, kept here: reading them off the cursor point of
        # every step would build its DataCursor (tens of us) at every step.
        self._quarantined: set[int] = set()
        self._origin = identity_cursor(self.dataset, data_spec, tables, self._stages)
        self._cursor: DataCursor | CursorPoint = self._origin
        self._wait_total = 0.0
        self._wait_last = 0.0
        self._bytes = 0
        self._batches = 0
        self._loss_tokens = 0
        self._padded_tokens = 0
        self._bytes_lock = threading.Lock()
        self._pipeline: ReadPipeline | None = None
        self._finished = False
        self._reports = LoaderReports(
            manifest, data_spec, dp_rank, drift_window_steps, self._stages
        )
        if dp_rank == 0:
            report_at_close(self.report_mixture)

    # ---- identity ----------------------------------------------------------------------------

    @property
    def manifest(self) -> DatasetManifest:
        return self.dataset.manifest

    @property
    def dataset_id(self) -> str:
        return self.manifest.dataset_id

    @property
    def eod_token_id(self) -> int:
        return self.manifest.tokenizer.eod_token_id

    @property
    def vocab_size(self) -> int:
        return self.manifest.tokenizer.vocab_size

    # ---- cursor and ledger -------------------------------------------------------------------

    @property
    def cursor(self) -> DataCursor:
        """Cursor after the last batch handed to the caller."""
        if isinstance(self._cursor, CursorPoint):
            self._cursor = self._cursor.resolve()
        return self._cursor

    def state_dict(self) -> dict[str, Any]:
        return self.cursor.model_dump(mode="json")

    def load_state_dict(self, state: dict[str, Any], *, coverage_only: bool | None = None) -> None:
        """Continue after the batches a saved cursor says were consumed."""
        try:
            saved = DataCursor.model_validate(state)
        except ValidationError as exc:
            raise CursorMismatchError(f"not a runwright data cursor: {exc}") from None
        coverage = self.resume == "coverage" if coverage_only is None else coverage_only
        if saved.dataset_id != self._origin.dataset_id:
            # Another dataset version: refused unless declared, recorded either way (growth.py).
            if coverage:
                saved, change = coverage_change(saved, self._origin)
            else:
                train = {s.name for s in self.manifest.shards if s.split == "train"}
                growth = self.spec.source_growth
                saved, change = take_source_change(saved, self._origin, growth, train)
            self._reports.source_changed(change)
        cursor = self._guard.restored(reconcile(saved, self._origin, coverage))
        stages = len(self._stages) if self._stages is not None else 1
        if cursor.stage >= stages:
            raise CursorMismatchError(
                f"the data cursor is in mixture stage {cursor.stage}, but this mixture has "
                f"{stages} stage(s); resume with the mixture.stages it was written for"
            )
        self._shutdown()
        self._cursor = cursor
        self.sources = self._guard.stream_tables(cursor)
        self._quarantined = self._guard.quarantined(cursor)
        self._finished = False
        self._reports.start_at(cursor)

    @property
    def ledger(self) -> ConsumptionLedger:
        return self._reports.ledger

    @property
    def stats(self) -> LoaderStats:
        return LoaderStats(
            input_wait_seconds_total=self._wait_total,
            last_input_wait_seconds=self._wait_last,
            queue_depth=self._pipeline.queue_depth if self._pipeline else 0,
            reorder_depth=self._pipeline.reorder_depth if self._pipeline else 0,
            bytes_read_total=self._bytes,
            batches_total=self._batches,
            loss_tokens_total=self._loss_tokens,
            padded_tokens_total=self._padded_tokens,
        )

    # ---- pipeline ----------------------------------------------------------------------------

    def _stream(self, c: DataCursor) -> DocStream:
        names = [t.name for t in self.sources]
        state = StreamState(
            epoch=c.epoch,
            draws=[c.source_draws.get(n, 0) for n in names],
            units=[c.source_units.get(n, 0) for n in names],
            stage=c.stage,
            base=tuple(c.stage_units.get(n, 0) for n in names) if c.stage_units else None,
        )
        tables = self.sources
        if self._stages is not None:
            tables = self._stages[c.stage].tables(self.sources)
        unit = self.spec.mixture.unit
        doc_units = None
        if unit != "documents":
            packer, seq = self._packer, self.spec.sequence_length

            def doc_units(lengths: np.ndarray) -> np.ndarray:
                return packer.units(lengths, unit, seq)

        return DocStream(
            sources=tables,
            shuffle=self._shuffle,
            mixture=self._mixture,
            doc_units=doc_units,
            dataset_id=self.manifest.dataset_id,
            seed=self.spec.seed,
            state=state,
            epochs=self.epochs,
            epoch_ends=self._reports.epoch_ends,
        )

    def _make_planner(self) -> Planner:
        c = self.cursor
        return Planner(
            self._stream(c),
            self._packer,
            self.sources,
            c,
            global_batch_samples=self.global_batch_samples,
            dp_rank=self.dp_rank,
            dp_size=self.dp_size,
            exclusion=self._guard.exclusion(c),
            stages=self._stages,
        )

    def _decide(self, read: list[int]) -> bool:
        """Apply data.on_corrupt_shard to the shards a batch read (none: before planning); True
        when shards were quarantined (agreed by every rank) from the step after the last batch
        handed out: the pipeline, planned ahead with them, is dropped and must be planned again."""
        decided = self._guard.decide(read, self._quarantined)
        if not decided:
            return False
        self._shutdown()
        cursor = self.cursor
        residual = None
        if cursor.residual is not None:
            i = [t.name for t in self.sources].index(cursor.residual.source)
            draw = np.array([cursor.residual.draw], dtype=np.int64)
            residual = (i, int(self._stream(cursor).lookup(i, draw, cursor.epoch)[0]))
        self._cursor = self._guard.apply(cursor, decided, residual)
        self.sources = self._guard.stream_tables(self._cursor)
        self._quarantined = self._guard.quarantined(self._cursor)
        return True

    def _start(self) -> None:
        self._decide([])
        planner = self._make_planner()
        self._pipeline = ReadPipeline(
            planner.next_batch,
            self._materialise,
            read_workers=self.read_workers,
            reorder_capacity=self.reorder_capacity,
            prefetch_batches=self.prefetch_batches,
        )

    def _materialise(self, plan: BatchPlan) -> tuple[Batch, CursorPoint, list[int]]:
        batch, stored_tokens = materialise(
            plan,
            self._packer,
            self._storage,
            self.spec.sequence_length,
            self.eod_token_id,
            self.loss_groups,
        )
        with self._bytes_lock:
            self._bytes += stored_tokens * self._itemsize
        return batch, plan.cursor, plan.shards_read()

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self._finished:
            raise StopIteration
        began = time.perf_counter()
        if self.spec.read_delay_seconds:
            # The spec's declared slow data path, on the caller's side of the prefetch queue so
            # no read-ahead hides it: every step waits this long for its batch.
            time.sleep(self.spec.read_delay_seconds)
        item = self._take()
        waited = time.perf_counter() - began
        self._wait_total += waited
        self._wait_last = waited
        if item is END:
            self._finished = True
            self._shutdown()
            raise StopIteration
        if isinstance(item, Exception):
            self._finished = True
            self._shutdown()
            raise item
        batch, cursor = item
        self._cursor = cursor
        self._reports.handed_out(batch, cursor, waited, self._counts, self._epoch_end)
        self._batches += 1
        self._loss_tokens += batch.loss_tokens
        self._padded_tokens += batch.padded_tokens
        return batch

    def _take(self) -> Any:
        """The next item in order: (batch, cursor point), END or an exception. A batch that
        read a shard found bad is dropped and the step planned again without the shard."""
        while True:
            if self._pipeline is None:
                self._start()
            try:
                item = self._pipeline.get()
            except RuntimeError:
                raise DataError(
                    "the loader's reader threads stopped; recreate the loader"
                ) from None
            if item is END or isinstance(item, Exception):
                return item
            batch, cursor, read = item
            if not self._decide(read):
                return batch, cursor

    def _counts(self) -> Counts:
        cursor = self.cursor
        return Counts(cursor.epoch, dict(cursor.source_draws), dict(cursor.source_units))

    def _epoch_end(self, epoch: int) -> Counts | None:
        """The counts `epoch` ended with, as the planner recorded them (it runs ahead of the
        batches handed out, so an epoch the cursor has left is always recorded)."""
        end = self._reports.epoch_ends.get(epoch)
        if end is None:
            return None
        names = [t.name for t in self.sources]
        return Counts(
            epoch,
            dict(zip(names, end.draws, strict=True)),
            dict(zip(names, end.units, strict=True)),
        )

    def _shutdown(self) -> None:
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None

    def close(self) -> None:
        """Stop the reader threads (the cursor and ledger stay readable) and report the
        mixture drawn."""
        self._shutdown()
        self.report_mixture()

    def report_mixture(self) -> None:
        """MIXTURE_ACTUAL to the run (data-parallel rank 0), once per cursor step."""
        self._reports.mixture(self.cursor)

    def __enter__(self) -> "DataLoader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
