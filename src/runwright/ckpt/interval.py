"""When to checkpoint: fixed steps, fixed seconds, or the Young/Daly optimum.

The formulas live once, in `runwright.plan.interval` (Young 1974, Daly 2006 eq. 37, seed 003's
waste model), with their derivation; this module applies Daly's optimum to the measured blocking
cost C of a save and the mean time between failures M.
Example: C = 20 s, M = 86,400 s (one failure a day) -> T_young = sqrt(2*20*86400) = 1,859 s.
"""

import time
from typing import Literal

from runwright.plan.interval import daly_interval_seconds
from runwright.records import Record
from runwright.spec.policies import CheckpointIntervalSpec

MIN_STALL_SECONDS = 1e-3
"""A measured save that blocked for less than this counts as this (the formulas need C > 0)."""


class IntervalChoice(Record):
    """The interval in force and the inputs it came from (recorded with INTERVAL_CHOSEN)."""

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
            every_seconds=daly_interval_seconds(max(stall, MIN_STALL_SECONDS), mtbf),
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
