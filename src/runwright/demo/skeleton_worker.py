"""A small but real data-parallel training program for the walking skeleton.

Each rank fits a linear model to synthetic data with DDP over gloo (CPU) and reports every step to
the controller through the runtime. `--fail-at-step N` makes rank `--fail-rank` exit with code 3 at
step N, which the skeleton's failure test uses.
"""

import argparse
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import runwright.runtime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fail-at-step", type=int, default=None)
    parser.add_argument("--fail-rank", type=int, default=1)
    args = parser.parse_args(argv)

    ctx = runwright.runtime.init()
    dist.init_process_group("gloo")
    try:
        spec, plan = ctx.spec, ctx.plan
        steps = int(plan.total_steps.value) if plan else 10
        per_rank = (int(plan.global_batch_samples.value) // ctx.world_size) if plan else 8
        seed = spec.training.seed if spec else 0
        lr = spec.training.optimizer.lr if spec else 0.05
        torch.manual_seed(seed)
        true_w = torch.randn(16, 1)
        model = DistributedDataParallel(torch.nn.Linear(16, 1))
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        data_rng = torch.Generator().manual_seed(seed * 1000 + ctx.rank)
        for step in range(1, steps + 1):
            x = torch.randn(per_rank, 16, generator=data_rng)
            y = x @ true_w
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if args.fail_at_step == step and ctx.rank == args.fail_rank:
                print(f"rank {ctx.rank}: injected failure at step {step}", file=sys.stderr)
                return 3
            ctx.step_healthy(step, loss=float(loss.detach()), samples=per_rank)
        dist.barrier()
        return 0
    finally:
        ctx.close()
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
