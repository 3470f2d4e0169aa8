"""The loss by mixture source and by document length bucket (issue 26), as the report's table and
the run charts' lines: read from the timeline's step points (observe/timeline.py merges every
rank's `source_loss` / `length_loss` into token-weighted means per step).

Replayed steps (executed again after a restore) are drawn, like the train loss, but counted once
in the table: a step's figures are its first execution's.
"""

from typing import Any, Literal

from pydantic import Field

from runwright.observe.timeline import StepPoint, Timeline
from runwright.records import Record

MAX_BREAKDOWN_LINES = 16
"""Sources (and buckets) drawn one line each; the table lists every one."""
BreakdownKind = Literal["source", "length"]
FIELDS: dict[BreakdownKind, str] = {"source": "source_loss", "length": "length_loss"}


class LossBreakdownRow(Record):
    """One source's (or length bucket's) loss over the run."""

    kind: BreakdownKind
    """`source` (a mixture source) or `length` (a document length bucket, in tokens)."""
    name: str
    """The source's name or the bucket's range (`129-512`)."""
    steps: int = Field(ge=0)
    """Accepted steps with loss tokens of it."""
    loss_tokens: int = Field(ge=0)
    """Its loss tokens over those steps."""
    first_loss: float
    """Mean per-token loss at its first step."""
    last_loss: float
    """Mean per-token loss at its newest step."""
    mean_loss: float
    """Token-weighted mean per-token loss over every accepted step."""


def breakdown_rows(timeline: Timeline) -> list[LossBreakdownRow]:
    """Every source, then every length bucket, with its loss over the run's accepted steps."""
    accepted = [p for p in timeline.steps if not p.replay]
    rows = []
    for kind, field in FIELDS.items():
        seen: dict[str, list[tuple[float, float]]] = {}
        for p in accepted:
            for name, (loss, tokens) in getattr(p, field).items():
                seen.setdefault(name, []).append((loss, tokens))
        for name, figures in sorted(seen.items(), key=lambda item: _bucket_order(kind, item[0])):
            tokens = sum(t for _, t in figures)
            rows.append(
                LossBreakdownRow(
                    kind=kind,
                    name=name,
                    steps=len(figures),
                    loss_tokens=int(tokens),
                    first_loss=figures[0][0],
                    last_loss=figures[-1][0],
                    mean_loss=sum(loss * t for loss, t in figures) / tokens,
                )
            )
    return rows


def breakdown_series(points: list[StepPoint]) -> dict[str, dict[str, list[float | None]]]:
    """`source_loss` and `length_loss`: name -> its mean loss at each step point (None where the
    step had no loss tokens of it), the first MAX_BREAKDOWN_LINES names of each."""
    series: dict[str, dict[str, list[float | None]]] = {}
    for kind, field in FIELDS.items():
        names = sorted(
            {name for p in points for name in getattr(p, field)},
            key=lambda name, kind=kind: _bucket_order(kind, name),
        )[:MAX_BREAKDOWN_LINES]
        series[field] = {
            name: [_loss(getattr(p, field).get(name)) for p in points] for name in names
        }
    return series


def _loss(entry: Any) -> float | None:
    return float(entry[0]) if entry else None


def _bucket_order(kind: BreakdownKind, name: str) -> tuple[int, str]:
    """Sources by name; buckets by their lower bound (`1-128` < `129-512` < `>512`)."""
    if kind == "source":
        return 0, name
    low = name.lstrip(">").split("-")[0]
    bound = int(low) + (1 if name.startswith(">") else 0) if low.isdigit() else 0
    return bound, name
