"""One life of the 2-rank checkpoint writer, under torchrun (gloo, CPU).

Usage: torchrun --standalone --nproc-per-node 2 dist_life.py ROOT LIFE SAVES MODE
Rank 0 advances the fence and the others wait at a barrier for it, every rank restores and checks
its own state, then all save SAVES more steps (DCP collectives over gloo) with keep_last=2.
"""

import os
import sys
from pathlib import Path

import torch.distributed as dist
from workloads import append_line, read_lines, saving_life

from runwright.ckpt import LocalFence


def main() -> None:
    root, life, saves, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    folder = Path(root).parent
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    append_line(folder / "pids.jsonl", {"life": life, "rank": rank, "pid": os.getpid()})
    acked = [a["step"] for a in read_lines(folder / "acks.jsonl")]
    if rank == 0:
        LocalFence(root).advance_generation()
    dist.barrier()
    saving_life(root, mode, saves, life, acked, rank=rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
