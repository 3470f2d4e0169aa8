"""The capacity plan of a training run: tokens -> steps -> device-hours, checkpoints and their
storage, expected failures with a retry margin, and cost (seed 000, 8.1; seed 004, cost).

Symbols: N tokens to train, B tokens per optimizer step, X the whole job's throughput in tokens
per second, G devices, K steps between checkpoints, C the blocking seconds of one checkpoint, S
the bytes of one checkpoint, M the job's mean time between interruptions (seconds), R + D the
restart and detection seconds after one, P the price of a device-hour.

    steps              n = ceil(N / B)
    compute            t_c = n B / X                     (seconds of useful steps)
    step time          t_s = B / X;  interval T = K t_s
    checkpoints        k = floor(n / K);  pause k C;  written k S;  at most min(keep_last + 1, k) S
                       on the volume (retention's kept ones and the one being written)
    failures           f = t_w / M over the run's wall time t_w (Poisson, rate 1/M)
    lost per failure   T/2 + C/2 + R + D               (half an interval of work on average,
                                                         as in Young's first-order model)
    wall time          t_w = (t_c + k C) / (1 - (T/2 + C/2 + R + D)/M)
                       (each second of the run loses that share to failures; the fixed point of
                       t_w = t_c + k C + f (T/2 + C/2 + R + D))
    retry margin       f + 2 sqrt(f) failures (a Poisson count's mean plus two of its standard
                       deviations: about 98 % of runs have no more), priced like the expected ones
    device-hours       G t_w / 3600;  cost = P x device-hours

What it leaves out: evaluation and compile time, data-loader stalls, queueing before the start,
and failures that lose more than the work since the last checkpoint (a corrupt checkpoint, a
rollback for a loss spike). A throughput measured on a run (the report's effective tokens per
second) already includes whatever its steps paid.
"""

import math

from pydantic import Field

from runwright.plan.base import Record
from runwright.plan.errors import PlanError

SECONDS_PER_HOUR = 3600.0
MAX_LOST_SHARE = 0.5
"""A plan that loses half its time to failures is refused: the model's assumptions (failures
rare against checkpoints) no longer hold, and the answer is to checkpoint more often."""


class CapacityInputs(Record):
    """What a capacity plan is computed from (see the module docstring for the symbols)."""

    tokens: float = Field(gt=0)
    tokens_per_step: float = Field(gt=0)
    tokens_per_second: float = Field(gt=0)
    """The whole job's throughput (all devices together)."""
    devices: int = Field(gt=0)
    checkpoint_every_steps: int | None = Field(default=None, gt=0)
    """None: no checkpoints (then a failure loses the run up to it: half the run on average)."""
    checkpoint_seconds: float = Field(default=0.0, ge=0)
    checkpoint_bytes: float = Field(default=0.0, ge=0)
    keep_last: int = Field(default=3, gt=0)
    mtbf_seconds: float | None = Field(default=None, gt=0)
    """The job's mean time between interruptions; None: no failures planned."""
    restart_seconds: float = Field(default=0.0, ge=0)
    detect_seconds: float = Field(default=0.0, ge=0)
    device_hour_price: float | None = Field(default=None, ge=0)


class CapacityPlan(Record):
    """The plan, every figure with its unit in its name."""

    inputs: CapacityInputs
    steps: int
    step_seconds: float
    compute_seconds: float
    checkpoints: int
    checkpoint_pause_seconds: float
    checkpoint_written_bytes: float
    checkpoint_kept_bytes: float
    interval_seconds: float | None
    lost_seconds_per_failure: float
    expected_failures: float
    margin_failures: float
    lost_seconds: float
    wall_seconds: float
    margin_wall_seconds: float
    device_hours: float
    margin_device_hours: float
    useful_share: float
    """compute / wall: the share of the paid device time that trains."""
    cost: float | None
    margin_cost: float | None
    assumptions: str


def plan_capacity(inputs: CapacityInputs) -> CapacityPlan:
    """The plan of `inputs` (module docstring); PlanError when failures would dominate."""
    i = inputs
    steps = math.ceil(i.tokens / i.tokens_per_step)
    step_seconds = i.tokens_per_step / i.tokens_per_second
    compute = steps * step_seconds
    every = i.checkpoint_every_steps
    checkpoints = steps // every if every else 0
    pause = checkpoints * i.checkpoint_seconds
    interval = every * step_seconds if every else None
    # Without checkpoints a failure loses everything up to it: half the run, on average.
    half_work = interval / 2 if interval is not None else compute / 2
    lost_each = half_work + i.checkpoint_seconds / 2 + i.restart_seconds + i.detect_seconds
    if i.mtbf_seconds is None:
        wall, failures, margin = compute + pause, 0.0, 0.0
    else:
        share = lost_each / i.mtbf_seconds
        if share >= MAX_LOST_SHARE:
            raise PlanError(
                f"each failure loses {lost_each:,.0f} s (half a checkpoint interval plus restart "
                f"and detection) against a mean of {i.mtbf_seconds:,.0f} s between failures: "
                f"the run would lose {100 * share:.0f} % or more of its time; checkpoint more "
                "often (a smaller interval) or plan on more reliable devices"
            )
        wall = (compute + pause) / (1 - share)
        failures = wall / i.mtbf_seconds
        margin = failures + 2 * math.sqrt(failures)
    margin_wall = compute + pause + margin * lost_each
    hours = i.devices * wall / SECONDS_PER_HOUR
    margin_hours = i.devices * margin_wall / SECONDS_PER_HOUR
    price = i.device_hour_price
    return CapacityPlan(
        inputs=i,
        steps=steps,
        step_seconds=step_seconds,
        compute_seconds=compute,
        checkpoints=checkpoints,
        checkpoint_pause_seconds=pause,
        checkpoint_written_bytes=checkpoints * i.checkpoint_bytes,
        checkpoint_kept_bytes=min(i.keep_last + 1, checkpoints) * i.checkpoint_bytes,
        interval_seconds=interval,
        lost_seconds_per_failure=lost_each if i.mtbf_seconds is not None else 0.0,
        expected_failures=failures,
        margin_failures=margin,
        lost_seconds=failures * lost_each,
        wall_seconds=wall,
        margin_wall_seconds=margin_wall,
        device_hours=hours,
        margin_device_hours=margin_hours,
        useful_share=compute / wall,
        cost=None if price is None else price * hours,
        margin_cost=None if price is None else price * margin_hours,
        assumptions=(
            "constant throughput; failures independent and exponentially distributed; each "
            "loses half an interval of work plus restart and detection; no evaluation, compile, "
            "loader stalls or queueing"
        ),
    )
