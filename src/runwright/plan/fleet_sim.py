"""The fleet simulation over several seeds (`runwright plan fleet`): each seed is one independent
run of the same window (`fleet_engine`), and the report gives every figure's mean and spread,
the distribution of the work each failure lost, and the first-order model beside it.

    ETTR                 productive seconds / wall seconds       (Kokolis et al. 2024, sec. V)
    goodput fraction     productive device-hours / device-hours held, spare nodes included
    measured MTTF        wall window / unplanned interruptions

Seeds are paired across calls: seed s draws the same failures (times and classes) whatever the
save policy, so two policies compared on the same seeds differ only by the policy (common random
numbers; `fleet_sweep` compares them so).
"""

import statistics
from collections.abc import Sequence

from runwright.plan.fleet_engine import WALL_USES, RunOutcome, simulate_run
from runwright.plan.fleet_model import (
    SECONDS_PER_HOUR,
    AnalyticCheck,
    FleetInputs,
    FleetReport,
    LostPerFailure,
    Spread,
)
from runwright.plan.interval import (
    daly_interval_seconds,
    expected_waste_fraction,
    young_interval_seconds,
)

DEFAULT_SEEDS = 8
"""Runs per report: enough for a spread, and ~10 ms each for a 16,384-device, 54-day run."""

ASSUMPTIONS = (
    "failures independent and exponentially distributed per class (no correlated bursts, no "
    "lemon nodes, no ageing); constant save, detect, restart and restore times; one async save "
    "in flight at most; restarts succeed unless another failure strikes; a failure loses the "
    "training since the newest durable save"
)


def spread(values: Sequence[float]) -> Spread:
    """Mean, sample standard deviation and range of one figure over the seeds."""
    return Spread(
        mean=statistics.fmean(values),
        std=statistics.stdev(values) if len(values) > 1 else 0.0,
        min=min(values),
        max=max(values),
    )


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (0 for none)."""
    if not ordered:
        return 0.0
    rank = max(1, round(q / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def _lost_per_failure(runs: Sequence[RunOutcome]) -> LostPerFailure:
    lost = sorted(x for run in runs for x in run.lost_per_failure)
    return LostPerFailure(
        count=len(lost),
        mean_seconds=statistics.fmean(lost) if lost else 0.0,
        p50_seconds=_percentile(lost, 50),
        p90_seconds=_percentile(lost, 90),
        p99_seconds=_percentile(lost, 99),
        max_seconds=lost[-1] if lost else 0.0,
    )


def analytic_check(inputs: FleetInputs, interval_seconds: float) -> AnalyticCheck | None:
    """Young's first-order model at the same inputs; None without an unplanned rate."""
    unplanned = [c for c in inputs.classes if not c.planned and c.rate_per_device_hour > 0]
    if not unplanned:
        return None
    m = inputs.job_mtbf_seconds
    c = max(inputs.save.blocking_seconds, 1e-9)
    weight = sum(k.rate_per_device_hour for k in unplanned)
    recovery = (
        inputs.save.restore_seconds
        + sum(k.rate_per_device_hour * (k.detect_seconds + k.restart_seconds) for k in unplanned)
        / weight
    )
    waste = expected_waste_fraction(interval_seconds, c, m, restart_seconds=recovery)
    return AnalyticCheck(
        job_mtbf_seconds=m,
        expected_interruptions=inputs.rate_per_second * inputs.wall_seconds,
        young_seconds=young_interval_seconds(c, m),
        daly_seconds=daly_interval_seconds(c, m),
        mean_recovery_seconds=recovery,
        first_order_ettr=1.0 - waste,
    )


def simulate_fleet(
    inputs: FleetInputs, seeds: int = DEFAULT_SEEDS, first_seed: int = 0
) -> FleetReport:
    """Simulate seeds first_seed .. first_seed + seeds - 1 and report mean and spread."""
    seed_list = list(range(first_seed, first_seed + seeds))
    runs = [simulate_run(inputs, s) for s in seed_list]
    return report(inputs, seed_list, runs)


def report(inputs: FleetInputs, seeds: list[int], runs: Sequence[RunOutcome]) -> FleetReport:
    """The report of runs already simulated (one per seed)."""
    wall = inputs.wall_seconds
    spare_devices = (inputs.spares.nodes or 0) * inputs.devices_per_node
    held = inputs.devices + spare_devices
    productive = [r.wall["productive"] for r in runs]
    unplanned = [r.unplanned for r in runs]
    classes = [c.name for c in inputs.classes]
    lost = [r.wall["lost"] for r in runs]
    interval = spread([r.interval_seconds for r in runs])
    return FleetReport(
        inputs=inputs,
        seeds=seeds,
        interval_seconds=interval,
        ettr=spread([p / wall for p in productive]),
        goodput_fraction=spread([p * inputs.devices / (wall * held) for p in productive]),
        productive_device_hours=spread([p * inputs.devices / SECONDS_PER_HOUR for p in productive]),
        interruptions=spread([sum(r.interruptions.values()) for r in runs]),
        unplanned_interruptions=spread(unplanned),
        interruptions_by_class={
            name: statistics.fmean(r.interruptions[name] for r in runs) for name in classes
        },
        mttf_hours=spread([wall / max(n, 1) / SECONDS_PER_HOUR for n in unplanned]),
        lost_seconds=spread(lost),
        lost_steps=(
            None if inputs.step_seconds is None else spread([x / inputs.step_seconds for x in lost])
        ),
        lost_per_failure=_lost_per_failure(runs),
        checkpoints=spread([r.checkpoints for r in runs]),
        abandoned_saves=spread([r.abandoned for r in runs]),
        bytes_written=spread([r.bytes_written for r in runs]),
        spare_wait_seconds=spread([r.wall["spare_wait"] for r in runs]),
        wall_breakdown_seconds={
            use: statistics.fmean(r.wall[use] for r in runs) for use in WALL_USES
        },
        analytic=analytic_check(inputs, interval.mean),
        assumptions=ASSUMPTIONS,
    )
