"""Interval policies compared by simulation: the same seeds (so the same failures) under each
candidate, and the one with the highest simulated ETTR. `runwright plan fleet --compare` sweeps
the policies; `runwright plan interval --simulate` sweeps intervals around Young's optimum for
one job-level MTBF, next to the analytic optima.

Each row also gives its ETTR gain over the reference row (Young) seed by seed: the seeds share
their failures, so the paired difference spreads less than either ETTR (at C = 30 s, M = 6 h,
0.08 points against 0.12 per seed), and `gain_vs_reference.std / sqrt(seeds)` is the standard
error to judge a gain by.
"""

from collections.abc import Sequence

from runwright.plan.base import Record
from runwright.plan.fleet_engine import simulate_run
from runwright.plan.fleet_model import (
    MAX_DAYS,
    SECONDS_PER_DAY,
    FailureClass,
    FleetInputs,
    SavePolicy,
    SaveSpec,
    Spread,
)
from runwright.plan.fleet_sim import DEFAULT_SEEDS, spread
from runwright.plan.interval import IntervalPlan

GRID_MULTIPLES = tuple(2 ** (k / 4) for k in range(-8, 9))
"""Intervals searched by `plan interval --simulate`, as multiples of Young's optimum: 0.25 to 4
in steps of 2^(1/4) (19 % apart)."""

FAILURES_PER_SEED = 800
"""`plan interval --simulate` simulates a window of this many mean times between failures per
seed: with 8 seeds, 6,400 failures put the ETTR's standard error near 0.02 points."""


class SweepRow(Record):
    """One candidate policy or interval, simulated on the sweep's seeds."""

    label: str
    policy: SavePolicy
    interval_seconds: float
    """Mean interval over the seeds (the adaptive policy's varies)."""
    ettr: Spread
    gain_vs_reference: Spread
    """ETTR minus the reference row's ETTR, seed by seed (same failures)."""


class IntervalSweep(Record):
    """Candidates ranked by simulated ETTR."""

    seeds: list[int]
    days: float
    """The simulated window of each seed."""
    reference: str
    """The row gains are measured against (`young`)."""
    rows: list[SweepRow]
    """Candidates, shortest interval first."""
    best: SweepRow
    """The candidate with the highest mean simulated ETTR (from the rows or the search grid)."""


def sweep(
    inputs: FleetInputs,
    candidates: Sequence[tuple[str, SaveSpec]],
    seeds: int = DEFAULT_SEEDS,
    first_seed: int = 0,
    reference: str = "young",
    search: Sequence[tuple[str, SaveSpec]] = (),
) -> IntervalSweep:
    """Simulate every candidate (and every `search` one, which is ranked but not listed) on the
    same seeds; `reference` must be one of the candidates."""
    seed_list = list(range(first_seed, first_seed + seeds))
    runs: dict[str, tuple[SaveSpec, list[float], list[float]]] = {}
    for label, save in [*candidates, *search]:
        one = inputs.model_copy(update={"save": save})
        outcomes = [simulate_run(one, s) for s in seed_list]
        ettr = [o.wall["productive"] / inputs.wall_seconds for o in outcomes]
        runs[label] = (save, ettr, [o.interval_seconds for o in outcomes])
    base = runs[reference][1]

    def row(label: str) -> SweepRow:
        save, ettr, intervals = runs[label]
        return SweepRow(
            label=label,
            policy=save.policy,
            interval_seconds=sum(intervals) / len(intervals),
            ettr=spread(ettr),
            gain_vs_reference=spread([a - b for a, b in zip(ettr, base, strict=True)]),
        )

    listed = sorted((row(label) for label, _ in candidates), key=lambda r: r.interval_seconds)
    ranked = [*listed, *(row(label) for label, _ in search)]
    return IntervalSweep(
        seeds=seed_list,
        days=inputs.days,
        reference=reference,
        rows=listed,
        best=max(ranked, key=lambda r: r.ettr.mean),
    )


def policy_candidates(inputs: FleetInputs) -> list[tuple[str, SaveSpec]]:
    """Young, Daly, measured-adaptive, and the fixed interval when the inputs give one."""
    save = inputs.save
    out = [
        (p.value, save.model_copy(update={"policy": p}))
        for p in (SavePolicy.YOUNG, SavePolicy.DALY, SavePolicy.ADAPTIVE)
    ]
    if save.interval_seconds is not None:
        out.append(("fixed", save.model_copy(update={"policy": SavePolicy.FIXED})))
    return out


def _fixed(save: SaveSpec, seconds: float) -> SaveSpec:
    return save.model_copy(update={"policy": SavePolicy.FIXED, "interval_seconds": seconds})


def simulate_interval_plan(
    plan: IntervalPlan, seeds: int = DEFAULT_SEEDS, first_seed: int = 0
) -> IntervalSweep:
    """`plan interval`'s rows simulated on one job-level failure process (rate 1/M; detect D,
    restart R; blocking synchronous saves of C), plus a search grid around Young's optimum."""
    mtbf = plan.mtbf_seconds
    inputs = FleetInputs(
        devices=1,
        devices_per_node=1,
        days=min(MAX_DAYS, FAILURES_PER_SEED * mtbf / SECONDS_PER_DAY),
        classes=[
            FailureClass(
                name="job",
                rate_per_device_hour=3600.0 / mtbf,
                detect_seconds=plan.detect_seconds,
                restart_seconds=plan.restart_seconds,
            )
        ],
        save=SaveSpec(stall_seconds=plan.checkpoint_seconds, policy=SavePolicy.YOUNG),
    )
    save = inputs.save
    candidates = [
        (r.label, save if r.label == "young" else _fixed(save, r.interval_seconds))
        for r in plan.rows
    ]
    candidates.append(("adaptive", save.model_copy(update={"policy": SavePolicy.ADAPTIVE})))
    listed = {label for label, _ in candidates}
    search = [
        (f"{k:.3g} x young", _fixed(save, k * plan.young_seconds))
        for k in GRID_MULTIPLES
        if f"{k:.3g} x young" not in listed and k != 1.0
    ]
    return sweep(inputs, candidates, seeds, first_seed, search=search)
