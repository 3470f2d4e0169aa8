"""A data-parallel script whose rank sits in a data read that never returns, for hang
attribution (tests/control/test_hang_live.py, benchmarks/collective_telemetry.py).

DDP over gloo with runwright's recording gradient hook (`record_ddp`), the step loop, and the
loss averaged through `ctx.all_reduce`. At `--stall-at-step`, `--stall-rank` marks a data wait on
`--stall-shard` and blocks in it (its heartbeat thread goes on, as a rank stuck on a storage read
does); its peers go on into the gradient all-reduce and wait there. `--once-dir` makes the stall
happen on the first attempt only, so the restarted generation trains to the end.
"""

import argparse
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

import runwright.runtime
from runwright.runtime import record_ddp


@record
def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stall-at-step", type=int)
    parser.add_argument("--stall-rank", type=int, default=1)
    parser.add_argument("--stall-shard", default="00017")
    parser.add_argument("--once-dir")
    parser.add_argument("--step-sleep", type=float, default=0.05)
    args = parser.parse_args()

    ctx = runwright.runtime.init()
    dist.init_process_group("gloo")
    spec, plan = ctx.spec, ctx.plan
    assert spec is not None and plan is not None
    torch.manual_seed(spec.training.seed)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    record_ddp(model)  # every gradient bucket in the collective log
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.training.optimizer.lr)
    marker = Path(args.once_dir) / "stalled" if args.once_dir else None
    loop = ctx.step_loop(0, int(plan.total_steps.value))
    for step in loop:
        with loop.marking("data_wait", shard=args.stall_shard):
            stall = step == args.stall_at_step and ctx.rank == args.stall_rank
            if stall and (marker is None or not marker.exists()):
                if marker is not None:
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.write_text("stalled\n")
                threading.Event().wait()  # the read that never returns
            g = torch.Generator().manual_seed(10_000 * step + ctx.rank)
            x = torch.randn(4, 8, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        ctx.all_reduce(mean, label="loss")
        loop.complete(step, loss=float(mean) / ctx.world_size, samples=4)
        time.sleep(args.step_sleep)
    ctx.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
