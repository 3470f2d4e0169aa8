"""One life of the 2-rank checkpoint writer, under torchrun (gloo, CPU).

Usage: torchrun --standalone --nproc-per-node 2 dist_life.py ROOT LIFE SAVES MODE
Rank 0 advances the fence and the others wait at a barrier for it, every rank restores and checks
its own state, then all save SAVES more steps (DCP collectives over gloo) with keep_last=2.
"""

import os
import sys
from pathlib import Path

import torch.distributed as dist
from workloads import AckSink, append_line, differences, read_lines, state_at

from runwright.ckpt import Checkpointer, LocalFence
from runwright.spec.policies import CheckpointSpec


def main() -> None:
    root, life, saves, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    folder = Path(root).parent
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    append_line(folder / "pids.jsonl", {"life": life, "rank": rank, "pid": os.getpid()})
    acked = [a["step"] for a in read_lines(folder / "acks.jsonl")]
    fence = LocalFence(root)
    if rank == 0:
        fence.advance_generation()
    dist.barrier()
    policy = CheckpointSpec(
        mode=mode, keep_last=2, interval={"policy": "steps", "every_steps": 1}, max_inflight=2
    )
    saver = Checkpointer(
        root, policy=policy, fence=fence, events=AckSink(str(folder / "acks.jsonl"))
    )
    state = state_at(0)
    restored = saver.restore(state)
    step = restored.step if restored is not None else 0
    append_line(
        folder / "verdicts.jsonl",
        {
            "life": life,
            "rank": rank,
            "restored": step if restored is not None else None,
            "acked": max(acked, default=None),
            "differences": differences(state, step) if restored is not None else [],
        },
    )
    for next_step in range(step + 1, step + saves + 1):
        saver.save(next_step, state_at(next_step))
    saver.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
