"""The loss-spike guard: what the trainer does when a step's loss jumps far above its recent
average (seed 004's loss-spike guard: skip the step, roll back, or pause for a person)."""

from typing import Literal

from pydantic import Field, PositiveInt

from runwright.spec import limits
from runwright.spec.base import Section


class LossSpikeSpec(Section):
    """A step whose global loss exceeds `threshold_ratio` x the mean of the last `window_steps`
    accepted steps' losses is a spike. On by default with a conservative threshold: early in a
    run the loss falls, so a step above 4 x its trailing mean is a spike, not progress. The
    decision reads the all-reduced loss, so every rank takes the same one."""

    enabled: bool = True
    """Whether the guard acts at all (the loss_spike alert rule still watches)."""
    threshold_ratio: float = Field(default=4.0, gt=1.0, le=1e6)
    """Spike when loss > threshold_ratio x the trailing mean (a ratio, > 1)."""
    window_steps: PositiveInt = Field(default=20, le=limits.MAX_STEPS)
    """Accepted steps in the trailing mean; the guard is idle until the window is full."""
    action: Literal["skip", "rollback", "pause"] = "skip"
    """`skip`: drop the step's update (the data cursor still advances; LOSS_SPIKE_SKIPPED).
    `rollback`: fail the step, so recovery restarts from the newest committed checkpoint and
    skips the offending step's batch (as `recovery.on_nan: rollback_skip` does).
    `pause`: drop the update, then stop at the step boundary with a save and wait in PAUSED
    for a person (`runwright resume RUN`)."""
