"""The loss-spike guard (`training.loss_spike`): a step whose global loss is above
threshold_ratio x the mean of the last window_steps accepted losses does not commit its update.

    skip      drop the update (zero the gradients, no optimizer step); the data cursor and the LR
              schedule advance as for any step, and LOSS_SPIKE_SKIPPED records it
    rollback  raise LossSpikeError: recovery restarts from the newest committed checkpoint and
              skips the offending step's batch (control/recovery.py, as for a NaN)
    pause     drop the update as skip does, then ask the run to pause: the group stops at this
              step boundary with a save and the controller moves it to PAUSED (control/pause.py)

The loss read is the all-reduced one, so every rank takes the same decision. The window is
checkpointed (`TrainState.extra["loss_spike"]`), so a restored run guards exactly as the run that
never stopped would have, and recovery stays bitwise.
"""

import argparse
from collections import deque

from runwright.events import EventType
from runwright.protocol import write_stop_request
from runwright.runtime import LossSpikeError, RunContext
from runwright.spec import LossSpikeSpec

PAUSE_REASON = "pause"
"""The stop request's reason the controller turns into PAUSED (control/pause.py's)."""


def add_spike_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--spike-at-step",
        type=int,
        default=None,
        help="fault injection: every rank's loss (and so its gradients) is multiplied by "
        "--spike-factor at this step, in --fault-generation only (a loss spike)",
    )
    parser.add_argument("--spike-factor", type=float, default=100.0, help="the spike's factor")


class SpikeGuard:
    """The trailing window of accepted losses, and the decision for each new one."""

    def __init__(self, spec: LossSpikeSpec) -> None:
        self.spec = spec
        self.recent: deque[float] = deque(maxlen=spec.window_steps)

    def spiked(self, loss: float) -> float | None:
        """The trailing mean when `loss` is a spike; None when it is not (or the window is not
        yet full, or the guard is off)."""
        if not self.spec.enabled or len(self.recent) < self.spec.window_steps:
            return None
        mean = sum(self.recent) / len(self.recent)
        return mean if loss > self.spec.threshold_ratio * mean else None

    def accept(self, loss: float) -> None:
        self.recent.append(loss)

    def refuse(self, ctx: RunContext, step: int, loss: float, mean: float) -> None:
        """Act on a spike at `step`, whose update the caller drops: rollback raises (LOSS_SPIKE
        names the step recovery skips); skip and pause report LOSS_SPIKE_SKIPPED, and pause asks
        the group to stop at this boundary with a save (every rank writes the same request)."""
        facts = {"loss": loss, "mean": mean, "threshold_ratio": self.spec.threshold_ratio,
                 "window_steps": self.spec.window_steps, "action": self.spec.action}  # fmt: skip
        if self.spec.action == "rollback":
            if ctx.rank == 0:  # every rank decided alike: one event names the step
                ctx.report(EventType.LOSS_SPIKE, key=f"spike-{step}", step=step, **facts)
            raise LossSpikeError(
                f"loss {loss:.4g} at step {step} exceeds training.loss_spike.threshold_ratio "
                f"{self.spec.threshold_ratio:g} x the mean {mean:.4g} of the last "
                f"{self.spec.window_steps} steps; rolling back past its batch"
            )
        if ctx.rank == 0:
            ctx.report(EventType.LOSS_SPIKE_SKIPPED, key=f"spike-{step}", step=step, **facts)
        if self.spec.action == "pause":
            write_stop_request(ctx.run_dir, ctx.generation, PAUSE_REASON, save=True)
            if ctx.rank == 0:  # what `runwright pause` records, so the controller ends in PAUSED
                ctx.report(EventType.STOP_REQUESTED, key=f"spike-pause-{step}", step=step,
                           reason=PAUSE_REASON, save=True, stopping_generation=ctx.generation,
                           detail=f"loss spike at step {step}")  # fmt: skip

    # Stateful: the window is part of the run's state (see the module doc).
    def state_dict(self) -> dict[str, list[float]]:
        return {"recent": list(self.recent)}

    def load_state_dict(self, state: dict[str, list[float]]) -> None:
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.spec.window_steps)
