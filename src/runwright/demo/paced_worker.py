"""A paced stand-in for a training program: it reports like one and costs almost nothing.

Each rank takes `--step-seconds` of wall time per step (asleep, on a fixed schedule so reporting
does not stretch it) and reports every step as the skeleton worker does: one STEP_HEALTHY per rank
per step, plus the heartbeats `runwright.runtime.init()` starts. It runs the plan's total steps and
stops early, at a step boundary, on a stop request (a stop file or SIGTERM), acknowledged as the
step loop does. It imports `runwright.runtime` and nothing heavier, so many runs fit on a small
machine and a benchmark of the controller (benchmarks/controller_reconcile.py) sees the
controller's cost rather than its workers'; and it runs against an older revision's runtime too,
started as a script (`code.entrypoint: <path to this file>`) with that revision first on
PYTHONPATH.

It does not iterate `ctx.step_loop`: the loop agrees on a stop across ranks with a
torch.distributed all-reduce, and importing torch would cost each rank about 1.5 CPU seconds and
250 MB RSS (src/runwright/runtime/stop.py, `OverlappedStopVote`). Here every rank reads the
same stop file or gets the same SIGTERM on its own, so the ranks stop within a step of one
another.
"""

import argparse
import sys
import time

import runwright.runtime


def stop_requested(ctx: runwright.runtime.RunContext, step: int) -> bool:
    """At the boundary after `step`: whether to stop, acknowledging the request as
    `StepLoop` does (with the fencing token a cancel hands over)."""
    request = ctx.stop_watcher.local_request()
    if request is None:
        return False
    request = ctx.stop_watcher.read_file() or request
    if request.fence_generation is not None:
        ctx.adopt_generation(request.fence_generation)
    ctx.event(
        "STOP_ACKNOWLEDGED",
        step=step,
        reason=request.reason,
        save=request.save,
        event_id=f"g{ctx.generation}-r{ctx.rank}-stop",
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--step-seconds", type=float, default=0.5, help="wall seconds each step takes"
    )
    args = parser.parse_args(argv)

    ctx = runwright.runtime.init()
    try:
        steps = int(ctx.plan.total_steps.value) if ctx.plan else 10
        started = time.monotonic()
        for step in range(1, steps + 1):
            if stop_requested(ctx, step - 1):
                return 0
            # Step n ends at started + n * step_seconds, however long the reports before it took.
            time.sleep(max(0.0, started + step * args.step_seconds - time.monotonic()))
            ctx.step_healthy(step, step_seconds=args.step_seconds)
        return 0
    finally:
        ctx.close()


if __name__ == "__main__":
    sys.exit(main())
