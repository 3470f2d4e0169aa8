"""One life of the 2-rank checkpoint writer, under torchrun (gloo, CPU).

Usage: torchrun --standalone --nproc-per-node 2 dist_life.py ROOT LIFE SAVES MODE
Rank 0 advances the fence and the others wait at a barrier for it, every rank restores and checks
its own state, then all save SAVES more steps (DCP collectives over gloo) with keep_last=2.
"""

import sys

import torch.distributed as dist
from workloads import rank_life


def main() -> None:
    root, life, saves, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo")
    rank_life(root, mode, saves, life)


if __name__ == "__main__":
    main()
