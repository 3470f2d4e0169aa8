"""Learning-rate schedule: linear warm-up, then cosine (or linear, or constant) decay to
min_lr_ratio x peak, as a multiplier for torch's LambdaLR."""

import math

from runwright.spec import ScheduleSpec


def lr_multiplier(step: int, total_steps: int, schedule: ScheduleSpec) -> float:
    """Multiplier of the peak rate for optimizer step `step` (0-based count of steps taken)."""
    if schedule.warmup_steps and step < schedule.warmup_steps:
        return (step + 1) / schedule.warmup_steps
    if schedule.decay == "constant" or total_steps <= schedule.warmup_steps:
        return 1.0
    progress = min(1.0, (step - schedule.warmup_steps) / (total_steps - schedule.warmup_steps))
    floor = schedule.min_lr_ratio
    if schedule.decay == "linear":
        return floor + (1 - floor) * (1 - progress)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
