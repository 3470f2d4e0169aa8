"""Worker for the torchrun integration test: each rank reads its share of N global steps.

Rank 0 gathers every rank's rows (gloo) and writes the global rows of each step, the cursor
after the last step and the ledger to --out. Usage:
    python -m torch.distributed.run --nproc-per-node K torchrun_reader.py DATASET STEPS OUT [STATE]
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
    "seed": 11,
    "mixture": {"sources": [{"name": "code", "weight": 3}, {"name": "prose", "weight": 1}]},
}
GLOBAL_BATCH = 8


def main() -> None:
    dataset, steps, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"])
    loader = DataLoader(
        dataset,
        DataSpec.model_validate(SPEC),
        global_batch_samples=GLOBAL_BATCH,
        dp_rank=rank,
        dp_size=world,
    )
    if len(sys.argv) > 4:
        loader.load_state_dict(json.loads(Path(sys.argv[4]).read_text()))
    rows = []
    for _, batch in zip(range(steps), loader, strict=False):
        shards = [torch.zeros_like(batch.tokens) for _ in range(world)]
        dist.all_gather(shards, batch.tokens.contiguous())
        rows.append(torch.cat(shards).tolist())
    state = loader.state_dict()
    loader.close()
    if rank == 0:
        out.write_text(
            json.dumps({"rows": rows, "cursor": state, "ledger": loader.ledger.model_dump()})
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
