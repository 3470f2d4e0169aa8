"""The collective preflight under plain torchrun: `--stall-rank R` keeps rank R from the barrier
(as a rank stuck in data loading or a dead network would) past `--timeout` seconds."""

import argparse
import time

import torch.distributed as dist

import runwright
from runwright.runtime.collectives import CollectiveCheckError

parser = argparse.ArgumentParser()
parser.add_argument("--stall-rank", type=int, default=-1)
parser.add_argument("--timeout", type=float, default=30.0)
args = parser.parse_args()

ctx = runwright.init(heartbeat=False)
dist.init_process_group("gloo")
if dist.get_rank() == args.stall_rank:
    # Never reaches the barrier within the timeout: what rank 0 must name.
    time.sleep(args.timeout * 4)
try:
    print("checked", ctx.check_collectives(timeout_seconds=args.timeout), flush=True)
except CollectiveCheckError as exc:
    print(f"rank {dist.get_rank()} CollectiveCheckError: {exc}", flush=True)
    raise SystemExit(3) from None
ctx.close()
# Leave together: a rank whose peers already tore gloo down aborts at exit otherwise.
dist.barrier()
dist.destroy_process_group()
