"""Worker for the disagreement test: two torchrun ranks that see a shard differently.

Each rank reads its own copy of the dataset (`ROOT/rank<R>`, as ranks on two nodes read two
caches); rank 1 rewrites SHARD in its copy before it takes step AT, rank 0's copy stays whole. So
rank 0 finds the shard good and rank 1 bad, and only the agreement can keep them together. Rank
0 gathers every rank's rows and cursor into OUT. Usage:
    python -m torch.distributed.run --nproc-per-node 2 quarantine_reader.py ROOT SHARD AT STEPS OUT
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from runwright.data import DataLoader
from runwright.spec import DataSpec

SPEC = {
    "sequence_length": 32,
    "seed": 3,
    "on_corrupt_shard": "skip",
    "mixture": {"sources": [{"name": "code", "weight": 2}, {"name": "prose", "weight": 1}]},
}
GLOBAL_BATCH = 8


def main() -> None:
    root, shard, at, steps, out = sys.argv[1:6]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    folder = Path(root) / f"rank{rank}"
    loader = DataLoader(
        folder,
        DataSpec.model_validate(SPEC),
        global_batch_samples=GLOBAL_BATCH,
        dp_rank=rank,
        dp_size=world,
    )
    rows, batches = [], iter(loader)
    for step in range(int(steps)):
        if rank == 1 and step == int(at):
            with open(folder / f"{shard}.bin", "r+b") as fh:
                fh.write(b"\xff" * 16)
                fh.flush()
                os.fsync(fh.fileno())
        tokens = next(batches).tokens.contiguous()
        parts = [torch.zeros_like(tokens) for _ in range(world)]
        dist.all_gather(parts, tokens)
        rows.append(torch.cat(parts).tolist())
    cursors = [None] * world
    dist.all_gather_object(cursors, loader.state_dict())
    loader.close()
    if rank == 0:
        Path(out).write_text(json.dumps({"rows": rows, "cursors": cursors}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
