"""Budgets: device-hours, tokens and wall time, accumulated from the store's records.

Device-seconds are allocated time: world size x (end - start) of every attempt, running ones up
to now. Tokens are committed progress: last healthy step x tokens per step (plan). Wall time runs
from the first attempt's start.
"""

import time

from runwright.records import Record
from runwright.spec import JobSpec
from runwright.store import AttemptRecord, RunRecord


class BudgetUsage(Record):
    device_hours: float
    tokens: int
    wall_seconds: float


class BudgetCheck(Record):
    """Which limits are near (warn) and which is reached (stop)."""

    usage: BudgetUsage
    warnings: list[str]
    """Kinds past warn_fraction of their limit, e.g. `tokens`."""
    exceeded: str | None
    """The first kind at or past its limit, with the numbers."""


def usage_of(
    spec: JobSpec, run: RunRecord, attempts: list[AttemptRecord], now: float | None = None
) -> BudgetUsage:
    now = time.time() if now is None else now
    device_seconds = sum(
        a.world_size * ((a.ended_unix_s or now) - a.started_unix_s) for a in attempts
    )
    tokens_per_step = int(spec.plan.tokens_per_step.value or 0)
    first = min((a.started_unix_s for a in attempts), default=now)
    return BudgetUsage(
        device_hours=device_seconds / 3600.0,
        tokens=(run.last_step or 0) * tokens_per_step,
        wall_seconds=now - first,
    )


def check(spec: JobSpec, usage: BudgetUsage) -> BudgetCheck:
    budget = spec.budget
    limits = {
        "device_hours": budget.device_hours,
        "tokens": budget.tokens,
        "wall_seconds": budget.wall_seconds,
    }
    warnings, exceeded = [], None
    for kind, limit in limits.items():
        if limit is None:
            continue
        used = float(getattr(usage, kind))
        if used >= limit and exceeded is None:
            exceeded = f"{kind} used {used:,.4g} of {limit:,.4g}"
        elif used >= budget.warn_fraction * limit:
            warnings.append(kind)
    return BudgetCheck(usage=usage, warnings=warnings, exceeded=exceeded)
