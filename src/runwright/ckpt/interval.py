"""When to checkpoint: fixed steps, fixed seconds, or the Young/Daly optimum.

Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):
    T_young = sqrt(2 * C * M)
Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps",
FGCS 22(3), eq. 37, for C < 2M:
    T_daly = sqrt(2 * C * M) * (1 + sqrt(C / (2M)) / 3 + (C / (2M)) / 9) - C,   and M otherwise,
with C the measured blocking cost of one checkpoint (seconds) and M the mean time between
failures (seconds). Seed 003 gives the waste model W(T) = C/T + T/(2M) + (R+D)/M these minimise.
Example: C = 20 s, M = 86,400 s (one failure a day) -> T_young = sqrt(2*20*86400) = 1,859 s.
"""

import math
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict

from runwright.spec.policies import CheckpointIntervalSpec


def young_interval_seconds(stall_seconds: float, mtbf_seconds: float) -> float:
    """Young's first-order optimum sqrt(2CM) (Young 1974)."""
    return math.sqrt(2.0 * stall_seconds * mtbf_seconds)


def daly_interval_seconds(stall_seconds: float, mtbf_seconds: float) -> float:
    """Daly's higher-order optimum (Daly 2006, eq. 37); M when C >= 2M."""
    c, m = stall_seconds, mtbf_seconds
    if c >= 2.0 * m:
        return m
    ratio = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - c


def expected_waste_fraction(interval_seconds: float, stall_seconds: float, mtbf: float) -> float:
    """Seed 003's W(T) without the per-failure restart terms: C/T + T/(2M)."""
    return stall_seconds / interval_seconds + interval_seconds / (2.0 * mtbf)


class IntervalChoice(BaseModel):
    """The interval in force and the inputs it came from (recorded with INTERVAL_CHOSEN)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    policy: Literal["steps", "seconds", "auto"]
    """The spec's interval policy."""
    every_steps: int | None = None
    """Steps between saves (policy steps)."""
    every_seconds: float | None = None
    """Seconds between saves (policy seconds, and auto)."""
    stall_seconds: float | None = None
    """C: blocking cost of one save that auto used."""
    stall_source: Literal["measured", "assumed"] | None = None
    """Whether C was measured on this run or assumed before the first save."""
    mtbf_seconds: float | None = None
    """M: mean time between failures that auto used."""
    mtbf_source: Literal["observed", "declared"] | None = None
    """Whether M was observed (passed in by the control plane) or declared in the spec."""
    formula: str | None = None
    """The formula used, with its source."""


class IntervalPolicy:
    """Decides at each step boundary whether a save is due; identical on every rank given the
    same inputs (the Checkpointer agrees time-based decisions across ranks)."""

    def __init__(
        self,
        spec: CheckpointIntervalSpec,
        *,
        assumed_stall_seconds: float = 10.0,
        observed_mtbf_seconds: float | None = None,
    ) -> None:
        self.spec = spec
        self._assumed_stall_seconds = assumed_stall_seconds
        self._measured_stall_seconds: float | None = None
        self._observed_mtbf_seconds = observed_mtbf_seconds
        self._last_save_monotonic = time.monotonic()

    def observe_stall(self, stall_seconds: float) -> None:
        """Record the blocking cost of a save (exponential average, weight 0.5 on the newest)."""
        old = self._measured_stall_seconds
        self._measured_stall_seconds = stall_seconds if old is None else 0.5 * (old + stall_seconds)

    def observe_mtbf(self, mtbf_seconds: float) -> None:
        """Replace the declared MTBF with one observed by the control plane."""
        self._observed_mtbf_seconds = mtbf_seconds

    def mark_saved(self, now_monotonic: float | None = None) -> None:
        self._last_save_monotonic = time.monotonic() if now_monotonic is None else now_monotonic

    def choice(self) -> IntervalChoice:
        spec = self.spec
        if spec.policy == "steps":
            return IntervalChoice(policy="steps", every_steps=spec.every_steps)
        if spec.policy == "seconds":
            return IntervalChoice(policy="seconds", every_seconds=spec.every_seconds)
        measured = self._measured_stall_seconds
        stall = measured if measured is not None else self._assumed_stall_seconds
        observed = self._observed_mtbf_seconds
        mtbf = observed if observed is not None else float(spec.mtbf_seconds or 0.0)
        return IntervalChoice(
            policy="auto",
            every_seconds=daly_interval_seconds(stall, mtbf),
            stall_seconds=stall,
            stall_source="measured" if measured is not None else "assumed",
            mtbf_seconds=mtbf,
            mtbf_source="observed" if observed is not None else "declared",
            formula="Daly 2006 eq. 37 (Young 1974 sqrt(2CM) to first order)",
        )

    def due(self, step: int, now_monotonic: float | None = None) -> bool:
        choice = self.choice()
        if choice.every_steps is not None:
            return step > 0 and step % choice.every_steps == 0
        now = time.monotonic() if now_monotonic is None else now_monotonic
        return now - self._last_save_monotonic >= float(choice.every_seconds or 0.0)
