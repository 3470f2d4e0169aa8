"""The README's two-line integration and nothing else: `runwright.init()` and
`ctx.step_healthy(step)` on every rank of a DDP-style loop (one all-reduce a step). Ranks run at
different speeds, so a stop seen by one is a step ahead of the other's view."""

import sys
import time

import torch
import torch.distributed as dist

import runwright

ctx = runwright.init()
dist.init_process_group("gloo")
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
for step in range(1, steps + 1):
    grad = torch.ones(1)
    dist.all_reduce(grad)
    time.sleep(0.02 * (1 + dist.get_rank()))
    ctx.step_healthy(step, loss=float(grad))
print(f"rank {dist.get_rank()} finished all {steps} steps", flush=True)
