"""What watching for corrupt or missing shards costs a step (data.on_corrupt_shard, issue 16).

Two parts, both paid at every batch the loader hands out:
1. the check (both policies): `BatchPlan.shards_read` (which shards the rank's rows touched) and
   `ShardWatch.check` (a stat of each one's .bin, compared with the identity it was verified
   with), on a dataset of 32 shards at S = 2048, against the loader's own time per
   batch with the check in it;
2. the agreement (`skip` with more than one rank): one int64 MAX all-reduce on the loader's gloo
   side group when nothing was found, measured between two local processes, next to a bare
   all-reduce of the same tensor.
Medians over `--batches` batches and `--reduces` all-reduces. Writes
benchmarks/results/shard_guard.json.

    .venv/bin/python benchmarks/shard_guard.py [--batches 400] [--reduces 2000]
"""

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from runwright.data import DataLoader, write_pretokenized
from runwright.data.read.agreement import ShardAgreement
from runwright.spec import DataSpec

RESULTS = Path(__file__).resolve().parent / "results" / "shard_guard.json"
VOCAB = 32_000
SEQUENCE = 2048
GLOBAL_BATCH = 32


def make_dataset(folder: Path) -> int:
    """Two sources of 4 Mi tokens (median document 400 tokens), in shards of 256 Ki tokens."""
    rng = np.random.default_rng(0)
    docs = {}
    for name in ("code", "prose"):
        out, total = [], 0
        while total < 1 << 22:
            n = max(1, int(rng.lognormal(np.log(400), 0.8)))
            out.append(rng.integers(1, VOCAB, size=n, dtype=np.int64))
            total += n
        docs[name] = out
    manifest = write_pretokenized(
        folder, docs, vocab_size=VOCAB, eod_token_id=0, max_tokens_per_shard=1 << 18
    )
    return sum(1 for s in manifest.shards if s.split == "train")


def check_cost(folder: Path, batches: int) -> dict:
    spec = DataSpec.model_validate({"sequence_length": SEQUENCE, "seed": 1})
    loader = DataLoader(folder, spec, global_batch_samples=GLOBAL_BATCH, read_workers=0)
    planner = loader._make_planner()
    plans = [planner.next_batch() for _ in range(batches)]
    watch = loader._guard.watch
    shards, checks = [], []
    read_counts = []
    for plan in plans:
        began = time.perf_counter()
        read = plan.shards_read()
        middle = time.perf_counter()
        watch.check(read)
        ended = time.perf_counter()
        shards.append(middle - began)
        checks.append(ended - middle)
        read_counts.append(len(read))
    steps = []
    batches_iter = iter(loader)
    for _ in range(batches):
        began = time.perf_counter()
        next(batches_iter)
        steps.append(time.perf_counter() - began)
    loader.close()
    check_us = statistics.median(s + c for s, c in zip(shards, checks, strict=True)) * 1e6
    step_us = statistics.median(steps) * 1e6
    return {
        "shards_read_per_batch_median": statistics.median(read_counts),
        "shards_read_us_median": round(statistics.median(shards) * 1e6, 1),
        "watch_check_us_median": round(statistics.median(checks) * 1e6, 1),
        "check_us_median": round(check_us, 1),
        "loader_batch_us_median": round(step_us, 1),
        "check_share_of_batch": round(check_us / step_us, 4),
    }


def _reducer(rank: int, world: int, init: str, reduces: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    agreement = ShardAgreement(32)
    bare = torch.zeros(1, dtype=torch.int64)
    timings: dict[str, list[float]] = {"agree": [], "bare": []}
    for _ in range(reduces):
        for name in ("agree", "bare"):
            began = time.perf_counter()
            if name == "agree":
                agreement.agree({})
            else:
                dist.all_reduce(bare, op=dist.ReduceOp.MAX)
            timings[name].append(time.perf_counter() - began)
    if rank == 0:
        Path(out).write_text(json.dumps({k: statistics.median(v) for k, v in timings.items()}))
    dist.destroy_process_group()


def agreement_cost(reduces: int, work: Path) -> dict:
    out = work / "reduce.json"
    init = f"file://{work / 'rendezvous'}"
    mp.spawn(_reducer, args=(2, init, reduces, str(out)), nprocs=2, join=True)
    medians = json.loads(out.read_text())
    return {
        "ranks": 2,
        "agree_nothing_found_us_median": round(medians["agree"] * 1e6, 1),
        "bare_all_reduce_us_median": round(medians["bare"] * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--reduces", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shards = make_dataset(work / "ds")
        result = {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "train_shards": shards,
            "sequence_length": SEQUENCE,
            "global_batch_samples": GLOBAL_BATCH,
            "check": check_cost(work / "ds", args.batches),
            "agreement": agreement_cost(args.reduces, work),
        }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
