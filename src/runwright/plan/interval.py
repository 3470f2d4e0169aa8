"""The checkpoint interval: Young's first-order optimum, Daly's higher-order one, and the
expected waste across a table of intervals (seed 003, "saving frequency is a model with
assumptions"; seed 004, "checkpoint frequency is not better the higher").

Symbols, all in seconds: C the blocking cost of one checkpoint, M the job's mean time between
interruptions, R the rendezvous/restore/verify time after one, D the detect/isolate/requeue
delay, T the useful compute between two completed checkpoints.

    expected waste    W(T) = C/T + T/(2M) + (R + D)/M          (seed 003, after Young 1974)
    Young             T* = sqrt(2 C M)                          (dW/dT = -C/T^2 + 1/(2M) = 0)
    Daly              T* = sqrt(2 C M) [1 + (1/3) sqrt(C/(2M)) + (1/9) C/(2M)] - C,  C < 2M
                      T* = M,  C >= 2M                          (Daly 2006)
    pause share       C / (T + C)                               (seed 004: 75/(1200+75) = 5.9%)

Daly's complete cost model (Daly 2006) gives the wall-clock time of a job of T_s useful
seconds as T_w = M e^(R/M) (e^((T + C)/M) - 1) T_s / T, so the lost fraction is
1 - T_s/T_w; the table reports it beside W(T) as a check on the first-order model.

Young's model assumes independent, exponentially distributed interruptions, constant costs,
blocking checkpoints that never fail themselves, and C << T << M. `plan_interval` refuses
inputs where C is not small against M, measured by how far the first-order optimum strays
from Daly's higher-order one.
"""

import math

from runwright.plan.base import Record
from runwright.plan.errors import PlanError

MAX_MODEL_DISAGREEMENT = 0.10
"""Largest relative gap between Young's and Daly's optima for which C counts as << M. The gap
grows like sqrt(C/M): about 1.5% at C/M = 0.001, 5% at 0.01 and 11% at 0.05."""

DEFAULT_INTERVAL_MULTIPLES = (0.25, 0.5, 1.0, 2.0, 4.0)
"""Intervals tabulated by default, as multiples of Young's optimum."""


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0 or not math.isfinite(value):
            raise PlanError(f"{name}={value} must be a positive number of seconds")


def young_interval_seconds(checkpoint_seconds: float, mtbf_seconds: float) -> float:
    """Young 1974: T = sqrt(2 C M), the minimiser of the first-order waste W(T)."""
    _check_positive(checkpoint_seconds=checkpoint_seconds, mtbf_seconds=mtbf_seconds)
    return math.sqrt(2.0 * checkpoint_seconds * mtbf_seconds)


def daly_interval_seconds(checkpoint_seconds: float, mtbf_seconds: float) -> float:
    """Daly 2006: the higher-order optimum of his complete Poisson cost model."""
    _check_positive(checkpoint_seconds=checkpoint_seconds, mtbf_seconds=mtbf_seconds)
    c, m = checkpoint_seconds, mtbf_seconds
    if c >= 2.0 * m:
        return m
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


def expected_waste_fraction(
    interval_seconds: float,
    checkpoint_seconds: float,
    mtbf_seconds: float,
    restart_seconds: float = 0.0,
    detect_seconds: float = 0.0,
) -> float:
    """W(T) = C/T + T/(2M) + (R + D)/M: the expected share of run time lost (seed 003)."""
    _check_positive(
        interval_seconds=interval_seconds,
        checkpoint_seconds=checkpoint_seconds,
        mtbf_seconds=mtbf_seconds,
    )
    t, c, m = interval_seconds, checkpoint_seconds, mtbf_seconds
    return c / t + t / (2.0 * m) + (restart_seconds + detect_seconds) / m


def daly_waste_fraction(
    interval_seconds: float,
    checkpoint_seconds: float,
    mtbf_seconds: float,
    restart_seconds: float = 0.0,
) -> float:
    """1 - T_s/T_w under Daly's complete model, T_w = M e^(R/M) (e^((T+C)/M) - 1) T_s/T."""
    _check_positive(
        interval_seconds=interval_seconds,
        checkpoint_seconds=checkpoint_seconds,
        mtbf_seconds=mtbf_seconds,
    )
    t, c, m, r = interval_seconds, checkpoint_seconds, mtbf_seconds, restart_seconds
    wall_per_useful = m * math.exp(r / m) * math.expm1((t + c) / m) / t
    return 1.0 - 1.0 / wall_per_useful


def pause_share(interval_seconds: float, checkpoint_seconds: float) -> float:
    """C / (T + C): the share of wall-clock spent paused in checkpoints (seed 004)."""
    _check_positive(interval_seconds=interval_seconds, checkpoint_seconds=checkpoint_seconds)
    return checkpoint_seconds / (interval_seconds + checkpoint_seconds)


class IntervalRow(Record):
    """One candidate interval and what it costs."""

    interval_seconds: float
    """T: useful compute between two completed checkpoints."""
    interval_steps: int | None
    """T in optimizer steps (rounded, at least 1); None without a step time."""
    expected_waste_fraction: float
    """W(T), the first-order expected share of run time lost."""
    pause_share: float
    """C / (T + C), the share of wall-clock paused in checkpoints."""
    daly_waste_fraction: float
    """Lost share under Daly's complete model, a check on W(T)."""
    label: str
    """`young`, `daly`, or the multiple of Young's optimum this row is."""


class IntervalPlan(Record):
    """The recommended interval, its inputs, and a table of alternatives."""

    checkpoint_seconds: float
    """C: measured blocking cost of one checkpoint."""
    mtbf_seconds: float
    """M: job-level mean time between interruptions."""
    restart_seconds: float
    """R: rendezvous, restore and verify time after an interruption."""
    detect_seconds: float
    """D: detection, isolation and requeue delay after an interruption."""
    step_seconds: float | None
    """Optimizer step time used to express intervals in steps."""
    young_seconds: float
    """Young's first-order optimum sqrt(2 C M)."""
    daly_seconds: float
    """Daly's higher-order optimum."""
    model_disagreement: float
    """|Young - Daly| / Daly: small when C << M."""
    rows: list[IntervalRow]
    """Candidate intervals, shortest first."""
    assumptions: str
    """What the model assumes; outside these, measure instead."""


ASSUMPTIONS = (
    "independent, exponentially distributed interruptions at the job's measured rate; constant "
    "C, R, D; blocking checkpoints that do not fail; restarts that succeed; C << T << M"
)


def _steps(seconds: float, step_seconds: float | None) -> int | None:
    return None if step_seconds is None else max(1, round(seconds / step_seconds))


def plan_interval(
    checkpoint_seconds: float,
    mtbf_seconds: float,
    restart_seconds: float = 0.0,
    detect_seconds: float = 0.0,
    step_seconds: float | None = None,
    intervals_seconds: list[float] | None = None,
) -> IntervalPlan:
    """Young's and Daly's optima and a waste table; refuses inputs outside the model."""
    c, m = checkpoint_seconds, mtbf_seconds
    _check_positive(checkpoint_seconds=c, mtbf_seconds=m)
    if restart_seconds < 0 or detect_seconds < 0:
        raise PlanError(
            f"restart_seconds={restart_seconds} and detect_seconds={detect_seconds} must be "
            "zero or more"
        )
    if step_seconds is not None:
        _check_positive(step_seconds=step_seconds)
    young = young_interval_seconds(c, m)
    daly = daly_interval_seconds(c, m)
    gap = abs(young - daly) / daly
    if c >= m or gap > MAX_MODEL_DISAGREEMENT:
        raise PlanError(
            f"checkpoint cost C={c:g} s is not small against the MTBF M={m:g} s "
            f"(C/M = {c / m:.3g}): Young's first-order optimum sqrt(2CM) = {young:.0f} s and "
            f"Daly's higher-order optimum = {daly:.0f} s differ by {100 * gap:.0f}% "
            f"(> {100 * MAX_MODEL_DISAGREEMENT:.0f}%), so the model's assumption C << T << M "
            "fails. Shorten the blocking part of a checkpoint (asynchronous staging), measure "
            "the job-level MTBF over a longer window, or simulate the schedule instead."
        )
    lost = (restart_seconds + detect_seconds) / m
    if lost >= 1.0:
        raise PlanError(
            f"recovery takes R + D = {restart_seconds + detect_seconds:g} s, at least the MTBF "
            f"M={m:g} s: the job would make no progress; fix recovery time before tuning the "
            "checkpoint interval"
        )
    candidates: dict[str, float] = {"young": young, "daly": daly}
    if intervals_seconds is None:
        for k in DEFAULT_INTERVAL_MULTIPLES:
            if k != 1.0:
                candidates[f"{k:g} x young"] = k * young
    else:
        for t in intervals_seconds:
            _check_positive(interval_seconds=t)
            candidates[f"{t:g} s"] = t
    rows = [
        IntervalRow(
            interval_seconds=t,
            interval_steps=_steps(t, step_seconds),
            expected_waste_fraction=expected_waste_fraction(
                t, c, m, restart_seconds, detect_seconds
            ),
            pause_share=pause_share(t, c),
            daly_waste_fraction=daly_waste_fraction(t, c, m, restart_seconds + detect_seconds),
            label=label,
        )
        for label, t in sorted(candidates.items(), key=lambda item: item[1])
    ]
    return IntervalPlan(
        checkpoint_seconds=c,
        mtbf_seconds=m,
        restart_seconds=restart_seconds,
        detect_seconds=detect_seconds,
        step_seconds=step_seconds,
        young_seconds=young,
        daly_seconds=daly,
        model_disagreement=gap,
        rows=rows,
        assumptions=ASSUMPTIONS,
    )
