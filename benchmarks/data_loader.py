"""Loader throughput against raw memmap slicing of the same shards, in one run.

The loader does the full work (permute-v1 shuffle, quota-v1 two-source mixture, concat-v1
packing with position/segment ids and loss mask, reorder slots, the prefetch bound); the
baseline slices S + 1 tokens at random offsets of the same .bin memmaps and makes int64
tokens/labels tensors, i.e. the least any loader must do. Both run pinned to one core
(`--cores`), at sequence lengths 512 and 2048, and report wall-clock tokens/s (the figure the
target is about) and tokens per CPU-second of the process (steadier when other work shares the
machine). The loader runs with the read workers it picks for the cores it has (none on one
core: the caller reads), and once more with one forced background worker, to show what the
hand-off between threads costs. The cases are interleaved for `--rounds` rounds and each
figure is the median over rounds (the machine is shared, so one round can be unlucky). Writes
benchmarks/results/data_loader.json with the kernel, the pinned cores and the threads used.

    .venv/bin/python benchmarks/data_loader.py [--seconds 2] [--rounds 3] [--cores 1]
"""

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from runwright.data import DataLoader, open_shard, write_pretokenized
from runwright.spec import DataSpec

RESULTS = Path(__file__).resolve().parent / "results" / "data_loader.json"
GLOBAL_BATCH = 32
VOCAB = 32_000


def make_dataset(folder: Path, tokens_per_source: int, seed: int) -> dict:
    """Two sources with log-normal document lengths (median 400 tokens, like web/code mixes)."""
    rng = np.random.default_rng(seed)
    docs: dict[str, list[np.ndarray]] = {}
    for name, sigma in (("code", 1.0), ("prose", 0.6)):
        out, total = [], 0
        while total < tokens_per_source:
            n = max(1, int(rng.lognormal(np.log(400), sigma)))
            out.append(rng.integers(1, VOCAB, size=n, dtype=np.int64))
            total += n
        docs[name] = out
    write_pretokenized(folder, docs, vocab_size=VOCAB, eod_token_id=0, max_tokens_per_shard=1 << 22)
    lengths = np.array([d.size for ds in docs.values() for d in ds])
    return {
        "documents": int(lengths.size),
        "tokens": int(lengths.sum()),
        "mean_document_tokens": round(float(lengths.mean()), 1),
        "median_document_tokens": float(np.median(lengths)),
    }


def raw_slicing(folder: Path, seq_len: int, seconds: float) -> dict:
    shards = [open_shard(p.with_suffix("")) for p in sorted(folder.glob("*-train-*.bin"))]
    views = [np.asarray(s.tokens) for s in shards]
    limits = np.array([v.shape[0] - seq_len - 1 for v in views])
    rng = np.random.default_rng(0)
    steps, began, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - began < seconds:
        # One vectorised draw of (shard, offset) per step, then one slice per row.
        which = rng.integers(0, len(views), size=GLOBAL_BATCH)
        starts = (rng.random(GLOBAL_BATCH) * limits[which]).astype(np.int64)
        rows = [
            views[w][s : s + seq_len + 1]
            for w, s in zip(which.tolist(), starts.tolist(), strict=True)
        ]
        window = np.stack(rows).astype(np.int64)
        tokens, labels = torch.from_numpy(window[:, :-1]), torch.from_numpy(window[:, 1:])
        assert tokens.shape == labels.shape
        steps += 1
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {
        "steps": steps,
        "seconds": round(elapsed, 3),
        "tokens_per_second": steps * GLOBAL_BATCH * seq_len / elapsed,
        "tokens_per_cpu_second": steps * GLOBAL_BATCH * seq_len / cpu,
        "threads": 1,
    }


def loader(folder: Path, seq_len: int, seconds: float, workers: int | None) -> dict:
    spec = DataSpec(
        sequence_length=seq_len,
        seed=1,
        mixture={"sources": [{"name": "code", "weight": 3}, {"name": "prose", "weight": 1}]},
    )
    with DataLoader(
        folder, spec, global_batch_samples=GLOBAL_BATCH, read_workers=workers, verification="size"
    ) as it:
        next(it)  # start-up (thread start, first plan) is not throughput
        steps, began, cpu = 0, time.perf_counter(), time.process_time()
        loss_tokens = 0
        while time.perf_counter() - began < seconds:
            batch = next(it)
            loss_tokens += batch.loss_tokens
            steps += 1
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        stats = it.stats
        workers = it.read_workers
    return {
        "steps": steps,
        "seconds": round(elapsed, 3),
        "tokens_per_second": steps * GLOBAL_BATCH * seq_len / elapsed,
        "tokens_per_cpu_second": steps * GLOBAL_BATCH * seq_len / cpu,
        "loss_tokens_per_second": loss_tokens / elapsed,
        "input_wait_seconds_total": round(stats.input_wait_seconds_total, 3),
        "read_workers": workers,
        # The caller's thread plus the read workers (which also plan and reorder).
        "threads": 1 + workers,
    }


def median_run(runs: list[dict]) -> dict:
    """The round with the median tokens/s, plus every round's figure."""
    ordered = sorted(runs, key=lambda r: r["tokens_per_second"])
    middle = dict(ordered[len(ordered) // 2])
    middle["tokens_per_second_by_round"] = [round(r["tokens_per_second"]) for r in runs]
    return middle


def ratio(ours: dict, raw: dict, key: str) -> float:
    return round(ours[key] / raw[key], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measurement time per case")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--cores", type=int, default=1, help="CPU cores to pin to (0: no pin)")
    parser.add_argument("--tokens-per-source", type=int, default=4_000_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.cores])
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "ds"
        data = make_dataset(folder, args.tokens_per_source, seed=0)
        cases = []
        for seq_len in (512, 2048):
            runs: dict[str, list[dict]] = {"raw": [], "loader": [], "one_worker": []}
            for _ in range(args.rounds):
                runs["raw"].append(raw_slicing(folder, seq_len, args.seconds))
                runs["loader"].append(loader(folder, seq_len, args.seconds, workers=None))
                runs["one_worker"].append(loader(folder, seq_len, args.seconds, workers=1))
            raw, ours, one = (median_run(runs[k]) for k in ("raw", "loader", "one_worker"))
            cases.append(
                {
                    "sequence_length": seq_len,
                    "global_batch_samples": GLOBAL_BATCH,
                    "raw_memmap": raw,
                    "loader": ours,
                    "loader_one_worker": one,
                    "loader_to_raw_ratio": ratio(ours, raw, "tokens_per_second"),
                    "loader_to_raw_cpu_ratio": ratio(ours, raw, "tokens_per_cpu_second"),
                    "one_worker_to_raw_ratio": ratio(one, raw, "tokens_per_second"),
                }
            )
    result = {
        "benchmark": "data_loader",
        "pipeline": "permute-v1 + quota-v1 (code 3 : prose 1) + concat-v1",
        "cores": args.cores or os.cpu_count(),
        "pinned_cpus": sorted(os.sched_getaffinity(0)) if args.cores else None,
        "rounds": args.rounds,
        "seconds_per_case": args.seconds,
        "kernel": f"{platform.system()} {platform.release()}",
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "dataset": data,
        "cases": cases,
        "target_ratio": 0.5,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"loader vs raw memmap slicing, {result['cores']} core(s), medians")
    for column in ("S", "raw M tok/s", "loader M tok/s", "ratio", "per CPU-s", "1 worker"):
        table.add_column(column, justify="right")
    for c in cases:
        table.add_row(
            str(c["sequence_length"]),
            f"{c['raw_memmap']['tokens_per_second'] / 1e6:.1f}",
            f"{c['loader']['tokens_per_second'] / 1e6:.1f}",
            f"{c['loader_to_raw_ratio']:.2f}",
            f"{c['loader_to_raw_cpu_ratio']:.2f}",
            f"{c['one_worker_to_raw_ratio']:.2f}",
        )
    Console().print(table)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
