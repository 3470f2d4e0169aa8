"""A run's world size and measured throughput, read from the store: the input the scaling
planner (`runwright.plan.scaling_efficiency`, issue 7) takes for a measured run.

Throughput is loss tokens per second of productive time:

    tokens_per_second = loss tokens of the first executions of healthy steps
                        / productive wall seconds

The numerator leaves out replayed steps (seed 000: "lost steps, recomputed tokens" are not
progress); the denominator is the cost split's productive wall seconds
(`runwright.observe.accounting`: first executions of healthy steps, checkpoint stalls excluded).
Productive time rather than the end-to-end wall clock, because launch, rendezvous, recovery and
checkpoint stalls do not scale with the world size; counting them would bend the scaling curve
by how often a run failed, not by how well it scales. e.g. 4 steps x 2 ranks x 152 loss tokens
= 1,216 tokens over 4 x 2.0 s less a 0.4 s stall = 7.6 s gives 160 tokens/s.
"""

from typing import Any

from pydantic import ValidationError

from runwright.errors import RunwrightError
from runwright.observe import figures
from runwright.observe.accounting import account
from runwright.observe.timeline import build_timeline
from runwright.spec import ResourcesSpec
from runwright.store import RunRecord, Store


class MeasurementError(RunwrightError):
    """A run cannot serve as a throughput measurement; the message says why and what to do."""


def run_world_size(run: RunRecord) -> int:
    """Devices the run trained on: the allocation's `world_size` (what the controller actually
    launched), else the spec's `resources.nodes x resources.devices_per_node`."""
    allocated: Any = (run.allocation or {}).get("world_size")
    if isinstance(allocated, int) and not isinstance(allocated, bool) and allocated >= 1:
        return allocated
    try:
        return ResourcesSpec.model_validate(run.spec.get("resources") or {}).world_size
    except ValidationError as exc:
        raise MeasurementError(
            f"run {run.run_id} has no allocation world size and its spec's resources are "
            f"invalid ({exc.errors()[0]['msg']}); give its throughput with --point N:TOKENS_PER_S"
        ) from None


def run_throughput(store: Store, run_id: str) -> tuple[int, float]:
    """(world size, loss tokens per productive second) of one run (formula in the module
    docstring). Raises `MeasurementError` when the run has no healthy steps to measure."""
    run = store.get_run(run_id)
    events = store.events(run.run_id)
    timeline = build_timeline(events)
    first_executions = [p for p in timeline.steps if not p.replay]
    if not first_executions:
        raise MeasurementError(
            f"run {run.run_id} has no healthy steps (no STEP_HEALTHY events) to measure "
            f"throughput from; drop --run {run.run_id}, or wait until it has trained a few steps"
        )
    loss_tokens = sum(p.loss_tokens for p in first_executions)
    if loss_tokens <= 0:
        raise MeasurementError(
            f"run {run.run_id}'s healthy steps report no loss_tokens, so its throughput is "
            "unknown; give it with --point N:TOKENS_PER_SECOND instead of --run"
        )
    split = account(events, store.attempts(run.run_id), timeline.steps)
    rate = figures.tokens_per_second(loss_tokens, split.wall_seconds.productive)
    if rate is None:
        raise MeasurementError(
            f"run {run.run_id}'s healthy steps report no step_seconds, so it has no productive "
            "time to divide by; give its throughput with --point N:TOKENS_PER_SECOND"
        )
    return run_world_size(run), rate
