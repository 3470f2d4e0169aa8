"""A worker of an old generation, for the `stale_worker` fault (drill/injectors.py).

    python -m runwright.drill.stale_worker --step N    # RUNWRIGHT_GENERATION: an old one

It stops itself (SIGSTOP) before it writes anything, as a worker frozen while its generation was
replaced. Once the drill sends SIGCONT it does what such a worker does when it wakes: saves a
checkpoint of step N and reports step N healthy, both under its old generation through the
public runtime API. The fence and the store must reject both (STALE_WRITE_REJECTED); it prints
the save's status.

It stops before it imports torch: ready within an interpreter's start-up of the launch, where
importing first (seconds on a busy machine) let the live group reach the fault's step, and end,
before the stale worker was ready to be let go.
"""

import argparse
import os
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--step", type=int, required=True, help="the step it saves and reports")
    args = parser.parse_args(argv)
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen here until the drill lets it go on
    import torch
    import torch.distributed as dist

    import runwright.runtime
    from runwright.ckpt import TrainState

    ctx = runwright.runtime.init(heartbeat=False)
    dist.init_process_group("gloo")
    checkpointer = ctx.checkpointer()
    saved = checkpointer.save(args.step, TrainState(model=torch.nn.Linear(8, 1)))
    print(f"generation {ctx.generation} saved step {args.step}: {saved.status}", flush=True)
    ctx.step_healthy(args.step, loss=0.0)
    checkpointer.close()
    ctx.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
