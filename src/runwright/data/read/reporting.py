"""What a loader tells the run it belongs to (loader.py's docstring).

Data-parallel rank 0 reports DATA_STAGE_READY when the loader opens its dataset, a
MIXTURE_WINDOW at the end of each drift window (drift.py), MIXTURE_ACTUAL when the loader or
the run closes, a staged mixture's MIXTURE_STAGE_STARTED when it hands out a stage's first step
and DATA_SOURCE_CHANGED when it takes a declared new dataset version. Every rank adds the last
batch's facts (its sample range, token counts, input wait and what quarantine has cost so far)
to the STEP_HEALTHY its script reports, and keeps the consumed-sample ledger of the batches it
handed out. Outside a run `emit` is a no-op.
"""

from collections.abc import Callable
from typing import Any

from runwright.data.format.manifest import DatasetManifest
from runwright.data.read.baseline import build_baseline
from runwright.data.read.batch import Batch
from runwright.data.read.cursor import DataCursor, SourceChange
from runwright.data.read.drift import Counts, DriftWindow, normalised
from runwright.data.read.ledger import ConsumptionLedger, record_steps
from runwright.data.read.stages import Stage
from runwright.data.read.step_plan import CursorPoint
from runwright.data.read.stream import StreamState
from runwright.events import EventType, emit, report_with_each_step
from runwright.spec import DataSpec


class LoaderReports:
    """One loader's reports and ledger."""

    def __init__(
        self,
        manifest: DatasetManifest,
        spec: DataSpec,
        dp_rank: int,
        drift_window_steps: int | None,
        stages: list[Stage] | None = None,
    ) -> None:
        self.dataset_id = manifest.dataset_id
        self.stages = stages
        self._stage_at = {s.start_step: k for k, s in enumerate(stages or []) if k}
        """Steps consumed before a later stage -> its index."""
        self.spec = spec
        self.dp_rank = dp_rank
        self._ledger = ConsumptionLedger()
        # Steps consumed since the ledger was last built: [first_step, end_step, first_sample,
        # end_sample]; folded in when the ledger is read (a pydantic ledger per step is ~10 us).
        self._run: list[int] | None = None
        self._step_facts: dict[str, Any] = {}
        self._mixture_reported_step: int | None = None
        self.epoch_ends: dict[int, StreamState] = {}
        """Each epoch's end as the planner recorded it (the loader's streams fill it)."""
        self._drift = (
            DriftWindow(
                drift_window_steps,
                {s.name: s.weight for s in spec.mixture.sources},
                spec.mixture.unit,
                build_baseline(manifest, spec.mixture.unit),
            )
            if dp_rank == 0 and drift_window_steps
            else None
        )
        report_with_each_step(self.step_facts)
        if dp_rank == 0:
            emit(
                EventType.DATA_STAGE_READY,
                key="data",
                dataset_id=manifest.dataset_id,
                tokenizer_hash=manifest.tokenizer.sha256,
                shuffle=spec.shuffle,
                mixture=spec.mixture.algorithm,
                packing=spec.packing,
            )

    def start_at(self, cursor: DataCursor) -> None:
        """The loader continues after `cursor` (a restore): the drift window starts there."""
        if self._drift is not None:
            self._drift.start_at(cursor.epoch, dict(cursor.source_draws), dict(cursor.source_units))
            if self.stages is not None:
                self._drift.switch_targets(self.stages[self._stage_of(cursor.step)].weights)

    def _stage_of(self, steps: int) -> int:
        """The stage whose steps include the one after `steps` consumed ones."""
        assert self.stages is not None
        return max(k for k, s in enumerate(self.stages) if s.start_step <= steps)

    @property
    def ledger(self) -> ConsumptionLedger:
        if self._run is not None:
            self._ledger = record_steps(self._ledger, self.dataset_id, *self._run)
            self._run = None
        return self._ledger

    def handed_out(
        self,
        batch: Batch,
        cursor: CursorPoint,
        waited: float,
        counts: Callable[[], Counts],
        epoch_end: Callable[[int], Counts | None],
    ) -> None:
        """`batch` went to the script after `waited` seconds; `cursor` is the point after it."""
        run = self._run
        if run is not None and run[1] == batch.step and run[3] == batch.first_sample:
            run[1], run[3] = batch.step + 1, batch.end_sample
        else:
            _ = self.ledger  # fold the run so far in
            self._run = [batch.step, batch.step + 1, batch.first_sample, batch.end_sample]
        self._step_facts = {
            "samples": [batch.first_sample, batch.end_sample],
            "device_tokens": batch.device_tokens,
            "padded_tokens": batch.padded_tokens,
            "loss_tokens": batch.loss_tokens,
            "data_wait_seconds": waited,
        }
        if cursor.lost:
            # Lost to quarantine so far in this lineage, per shard: the report's figure.
            self._step_facts["data_lost"] = {
                q.shard: {"documents": docs, "tokens": tokens}
                for q, (docs, tokens) in zip(cursor.template.quarantined, cursor.lost, strict=True)
            }
        stage = self._stage_at.get(batch.step)
        if stage is not None:
            self._stage_started(stage, batch.step)
        if self._drift is not None:
            window = self._drift.add(batch, counts, epoch_end)
            if window is not None:
                emit(
                    EventType.MIXTURE_WINDOW,
                    key=f"mixture-window-{batch.step + 1}",
                    step=batch.step + 1,
                    **window,
                )

    def _stage_started(self, index: int, steps: int) -> None:
        """Rank 0 reports the stage; the drift windows measure against its weights from now."""
        assert self.stages is not None
        stage = self.stages[index]
        targets = normalised(stage.weights)
        if self._drift is not None:
            self._drift.switch_targets(targets)
        if self.dp_rank != 0:
            return
        emit(
            EventType.MIXTURE_STAGE_STARTED,
            key=f"mixture-stage-{index}",
            step=steps + 1,
            stage=stage.name,
            stage_index=index,
            previous=self.stages[index - 1].name,
            start_step=stage.start_step,
            unit=self.spec.mixture.unit,
            targets=targets,
        )

    def source_changed(self, change: SourceChange) -> None:
        """Rank 0 reports a new dataset version taken at a step boundary (declared, or a
        coverage-only resume's)."""
        if self.dp_rank != 0:
            return
        residual = change.dropped_residual
        emit(
            EventType.DATA_SOURCE_CHANGED,
            key=f"source-change-{change.at_step}-{change.to_dataset_id[:16]}",
            step=change.at_step,
            from_dataset_id=change.from_dataset_id,
            to_dataset_id=change.to_dataset_id,
            mapping=change.mapping,
            from_epoch=change.from_epoch,
            dropped_residual=residual.model_dump(mode="json") if residual else None,
        )

    def step_facts(self) -> dict[str, Any]:
        """What the last batch handed out adds to the step the script reports."""
        return self._step_facts

    def mixture(self, cursor: DataCursor) -> None:
        """MIXTURE_ACTUAL to the run, from data-parallel rank 0, once per cursor step."""
        if self.dp_rank != 0 or cursor.step == self._mixture_reported_step:
            return
        self._mixture_reported_step = cursor.step
        emit(
            EventType.MIXTURE_ACTUAL,
            key=f"mixture-{cursor.step}",
            step=cursor.step,
            unit=self.spec.mixture.unit,
            actual=dict(cursor.source_draws),
            actual_units=dict(cursor.source_units),
            targets={s.name: s.weight for s in self.spec.mixture.sources},
            **self._stage_facts(cursor),
        )

    def _stage_facts(self, cursor: DataCursor) -> dict[str, Any]:
        """A staged mixture's current stage: its name, its units per source so far in this
        epoch (what its exact quotas count) and its weights."""
        if self.stages is None:
            return {}
        stage = self.stages[cursor.stage]
        return {
            "stage": stage.name,
            "stage_units": {
                n: u - cursor.stage_units.get(n, 0)
                for n, u in cursor.source_units.items()
                if n in stage.weights
            },
            "stage_targets": dict(stage.weights),
        }
