"""Data drift per window of steps (issue 15; seeds 000/003): what the loader handed out in the
last `window_steps` steps against the recipe, so a drift shows while the run trains rather than
in the report after it.

Each window (data-parallel rank 0's view; the cursor's counts are global) reports MIXTURE_WINDOW:
the draws and units per source in the window and their shares against the recipe's normalised
weights (`max_deviation`: the largest |actual share - target share|, in the mixture's unit), the
loss-token share of the device tokens, and the lengths of the document pieces packed into rank
0's rows, bucketed. The control plane's `mixture_drift` alert rule reads `max_deviation`.
With the build's statistics as baseline (baseline.py) it also reports `baseline` and
`baseline_deviation`: the shares against what each source is of the dataset as built.

A window across a mixture stage's start (stages.py) was drawn to two sets of weights: its
`targets` are the stages' weights blended by the steps the window spent in each, and
`stage_parts` lists each part (its steps and weights). Judging the whole window against the
new stage's weights alone reported a drift the recipe itself had asked for.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from runwright.data.read.batch import Batch

DRIFT_WINDOW_STEPS = 50
"""Steps per window unless the loader is told otherwise."""
LENGTH_BUCKETS = (64, 256, 1024, 4096)
"""Upper bounds (tokens) of the piece-length buckets; a last bucket holds the longer ones."""


@dataclass(frozen=True)
class Counts:
    """A cursor's position in its epoch: draws and units per source so far in `epoch`."""

    epoch: int
    draws: dict[str, int]
    units: dict[str, int]


def _between(
    before: Counts, now: Counts, epoch_end: Callable[[int], Counts | None]
) -> tuple[dict[str, int], dict[str, int]]:
    """Draws and units per source from `before` to `now`. The cursor's counts restart at 0 with
    each epoch, so a window across an epoch boundary adds the rest of each epoch it left (to the
    counts that epoch ended with) to what the new one drew."""
    draws: dict[str, int] = {}
    units: dict[str, int] = {}
    start, epoch = before, before.epoch
    while epoch < now.epoch:
        end = epoch_end(epoch)
        if end is not None:
            for name, value in end.draws.items():
                draws[name] = draws.get(name, 0) + value - start.draws.get(name, 0)
            for name, value in end.units.items():
                units[name] = units.get(name, 0) + value - start.units.get(name, 0)
        start, epoch = Counts(epoch + 1, {}, {}), epoch + 1
    for name, value in now.draws.items():
        draws[name] = draws.get(name, 0) + value - start.draws.get(name, 0)
    for name, value in now.units.items():
        units[name] = units.get(name, 0) + value - start.units.get(name, 0)
    return draws, units


def normalised(weights: dict[str, float]) -> dict[str, float]:
    """Weights as shares that sum to 1; empty when there are none (or they sum to 0)."""
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()} if total > 0 else {}


class DriftWindow:
    """Accumulates one window of batches; `add` returns the window's report when it closes."""

    def __init__(
        self,
        window_steps: int,
        targets: dict[str, float],
        unit: str,
        baseline: dict[str, float] | None = None,
    ) -> None:
        self.window_steps = window_steps
        self.targets = normalised(targets)
        """The weights the next batch is drawn to, as shares."""
        self.unit = unit
        self.baseline = baseline or {}
        """Source -> share in the build (baseline.py); empty when unknown."""
        self._reset(None)
        self._before = Counts(0, {}, {})

    def _reset(self, first_step: int | None) -> None:
        self._first = first_step
        self._steps = 0
        self._earlier: list[tuple[int, dict[str, float]]] = []
        """(steps, targets) of this window's steps drawn to weights since replaced."""
        self._device = 0
        self._loss = 0
        self._lengths = [0] * (len(LENGTH_BUCKETS) + 1)

    def switch_targets(self, targets: dict[str, float]) -> None:
        """From the next batch on, draws follow `targets` (a stage started); the steps already
        in this window keep the weights they were drawn to."""
        counted = self._steps - sum(steps for steps, _ in self._earlier)
        if counted:
            self._earlier.append((counted, self.targets))
        self.targets = normalised(targets)

    def _window_targets(self) -> tuple[dict[str, float], list[tuple[int, dict[str, float]]]]:
        """The closing window's targets, blended by steps over its parts, and the parts."""
        parts = [*self._earlier, (self._steps - sum(n for n, _ in self._earlier), self.targets)]
        parts = [(n, targets) for n, targets in parts if n]
        if len(parts) < 2:
            return self.targets, parts
        blended: dict[str, float] = {}
        for steps, targets in parts:
            for name, share in targets.items():
                blended[name] = blended.get(name, 0.0) + share * steps / self._steps
        return blended, parts

    def start_at(self, epoch: int, draws: dict[str, int], units: dict[str, int]) -> None:
        """Count from this cursor (a restore): windows measure what this process handed out."""
        self._before = Counts(epoch, dict(draws), dict(units))

    def add(
        self,
        batch: Batch,
        counts: Callable[[], "Counts"],
        epoch_end: Callable[[int], "Counts | None"],
    ) -> dict[str, Any] | None:
        """Count `batch`; at the window's last step, the report. `counts()` gives the cursor's
        epoch and draws and units per source so far in it; `epoch_end(e)` the counts epoch `e`
        ended with (None when unknown)."""
        # Steps as the cursor counts them (after batch k, k + 1): the training step numbers.
        if self._first is None:
            self._first = batch.step + 1
        self._steps += 1
        self._device += batch.device_tokens
        self._loss += batch.loss_tokens
        self._count_lengths(batch.segment_ids)
        if self._steps < self.window_steps:
            return None
        now = counts()
        window, units = _between(self._before, now, epoch_end)
        counted = window if self.unit == "documents" else units
        total = sum(counted.values())
        shares = {k: v / total for k, v in counted.items()} if total else {}
        targets, parts = self._window_targets()
        names = set(shares) | set(targets)
        deviation = (
            max((abs(shares.get(n, 0.0) - targets.get(n, 0.0)) for n in names), default=0.0)
            if targets
            else None  # no weights: every source in proportion to its size, nothing to miss
        )
        report = {
            "first_step": self._first,
            "last_step": batch.step + 1,
            "unit": self.unit,
            "draws": window,
            "units": units,
            "shares": {k: round(v, 6) for k, v in shares.items()},
            "targets": {k: round(v, 6) for k, v in targets.items()},
            "max_deviation": round(deviation, 6) if deviation is not None else None,
            "loss_token_share": round(self._loss / self._device, 6) if self._device else None,
            "length_buckets": {
                **{f"<={b}": n for b, n in zip(LENGTH_BUCKETS, self._lengths, strict=False)},
                f">{LENGTH_BUCKETS[-1]}": self._lengths[-1],
            },
        }
        if len(parts) > 1:
            report["stage_parts"] = [
                {"steps": steps, "targets": {k: round(v, 6) for k, v in shares_of.items()}}
                for steps, shares_of in parts
            ]
        if self.baseline:
            names = set(shares) | set(self.baseline)
            report["baseline"] = {k: round(v, 6) for k, v in self.baseline.items()}
            report["baseline_deviation"] = round(
                max(abs(shares.get(n, 0.0) - self.baseline.get(n, 0.0)) for n in names), 6
            )
        self._before = now
        self._reset(None)
        return report

    def _count_lengths(self, segments: torch.Tensor) -> None:
        """Lengths of the runs of equal segment ids in each row: the pieces of documents."""
        if segments.numel() == 0:
            return
        rows = segments.reshape(segments.shape[0], -1)
        change = torch.ones_like(rows, dtype=torch.bool)
        change[:, 1:] = rows[:, 1:] != rows[:, :-1]
        starts = change.flatten().nonzero().flatten()
        # A row's first column always starts a piece, so pieces never span two rows.
        ends = torch.cat([starts[1:], torch.tensor([rows.numel()])])
        bucket = torch.bucketize(ends - starts, torch.tensor(LENGTH_BUCKETS))
        counts = torch.bincount(bucket, minlength=len(self._lengths)).tolist()
        self._lengths = [a + b for a, b in zip(self._lengths, counts, strict=True)]
