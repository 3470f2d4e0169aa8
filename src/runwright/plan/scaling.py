"""Scaling efficiency from measured throughput (seed 000, 8.6 "scaling efficiency"):

    E(N) = throughput(N) / (N x throughput(1))

1.0 means N devices deliver N times one device's throughput. When no single-device run was
measured, the smallest measured world size N0 is the baseline and
E(N) = (throughput(N) / N) / (throughput(N0) / N0), which equals the formula above when
N0 = 1. Several measurements at one world size are reduced to their median, so a noisy run
does not set the baseline on its own.
"""

import statistics
from collections.abc import Iterable

from pydantic import Field

from runwright.plan.base import Record
from runwright.plan.errors import PlanError


class ScalingPoint(Record):
    """Throughput at one world size, and its efficiency against the baseline."""

    world_size: int = Field(ge=1)
    """N: devices in the run."""
    tokens_per_second: float
    """Median measured throughput at this world size."""
    measurements: int
    """How many measurements the median is over."""
    tokens_per_second_per_device: float
    """throughput(N) / N."""
    speedup: float
    """throughput(N) / throughput(N0)."""
    efficiency: float
    """E(N) = (throughput(N) / N) / (throughput(N0) / N0)."""


class ScalingReport(Record):
    """The scaling curve, ordered by world size."""

    baseline_world_size: int
    """N0: the world size the efficiencies are relative to (1 when measured)."""
    points: list[ScalingPoint]
    """One point per measured world size, smallest first."""


def scaling_efficiency(measurements: Iterable[tuple[int, float]]) -> ScalingReport:
    """E(N) for every measured world size from (world_size, tokens_per_second) pairs."""
    by_size: dict[int, list[float]] = {}
    for world_size, tokens_per_second in measurements:
        if isinstance(world_size, bool) or int(world_size) != world_size or world_size < 1:
            raise PlanError(f"world size {world_size!r} must be a whole number of devices >= 1")
        if not tokens_per_second > 0:
            raise PlanError(
                f"throughput {tokens_per_second!r} tokens/s at world size {world_size} must be "
                "positive; drop failed or empty runs from the measurements"
            )
        by_size.setdefault(int(world_size), []).append(float(tokens_per_second))
    if not by_size:
        raise PlanError(
            "no measurements: give at least one (world_size, tokens_per_second) pair, "
            "ideally including world size 1"
        )
    baseline = min(by_size)
    base_per_device = statistics.median(by_size[baseline]) / baseline
    points = []
    for n in sorted(by_size):
        throughput = statistics.median(by_size[n])
        points.append(
            ScalingPoint(
                world_size=n,
                tokens_per_second=throughput,
                measurements=len(by_size[n]),
                tokens_per_second_per_device=throughput / n,
                speedup=throughput / (base_per_device * baseline),
                efficiency=(throughput / n) / base_per_device,
            )
        )
    return ScalingReport(baseline_world_size=baseline, points=points)
