"""Checkpoint benchmark: runwright vs plain DCP, a host memcpy and a raw sequential write.

    .venv/bin/python benchmarks/checkpoint.py [--megabytes 512] [--repeats 2] [--dir PATH]

For a model state of about `--megabytes` MB (float32 Linear layers) it measures, on the same
disk (a temporary folder under --dir, deleted afterwards):
  - sync save (runwright, sha256 on) vs plain `dcp.save` with FileSystemWriter(sync_files=True)
    of the same state dict                                             target ratio <= 1.1
  - async stall (time the training loop is blocked) vs a plain host memcpy of the same tensors
    into preallocated buffers                                          target ratio <= 1.5
  - async persist bandwidth vs a raw sequential write + fsync of the same number of bytes
                                                                       target ratio >= 0.8
  - restore time (full verification + DCP load)
Each figure is the best of --repeats runs. Results: benchmarks/results/checkpoint.json.
"""

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from rich.console import Console
from rich.table import Table
from torch.distributed.checkpoint import FileSystemWriter

from runwright.ckpt import Checkpointer, LocalFence, MemorySink, TrainState
from runwright.ckpt.state import capture
from runwright.spec.policies import CheckpointSpec

RESULTS = Path(__file__).parent / "results" / "checkpoint.json"


def build_state(megabytes: int) -> TrainState:
    # 2048 x 4096 float32 = 33.5 MB per layer; 16 layers = 537 MB
    layers = max(1, round(megabytes * 2**20 / (2048 * 4096 * 4)))
    model = torch.nn.Sequential(*(torch.nn.Linear(2048, 4096, bias=False) for _ in range(layers)))
    return TrainState(model=model)


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None, help="Folder on the disk to measure (default: cwd).")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rw-ckpt-bench-", dir=args.dir or os.getcwd()))
    try:
        figures = run(work, args.megabytes, args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    table = Table(title=f"checkpoint benchmark, {figures['state_bytes'] / 1e6:.0f} MB state")
    for column in ("measure", "runwright", "baseline", "ratio", "target"):
        table.add_column(column)
    for row in figures["comparisons"]:
        table.add_row(
            row["measure"],
            f"{row['runwright']:.3f}",
            f"{row['baseline']:.3f}",
            f"{row['ratio']:.2f}",
            row["target"],
        )
    table.add_row("restore (s)", f"{figures['restore_seconds']:.3f}", "", "", "")
    Console().print(table)
    print(f"wrote {RESULTS}")


def run(work: Path, megabytes: int, repeats: int) -> dict:
    state = build_state(megabytes)
    sd = capture(state, step=0, rank=0)
    tensors = [p.detach() for p in state.model.parameters()]
    state_bytes = sum(t.numel() * t.element_size() for t in tensors)
    counter = iter(range(10_000))

    def raw_write() -> None:
        with open(work / f"raw-{next(counter)}.bin", "wb") as handle:
            for t in tensors:
                handle.write(memoryview(t.numpy()).cast("B"))
            handle.flush()
            os.fsync(handle.fileno())

    def plain_dcp() -> None:
        writer = FileSystemWriter(work / f"dcp-{next(counter)}", sync_files=True)
        dcp.save(sd, storage_writer=writer, no_dist=True)

    raw_seconds = best(raw_write, repeats)
    dcp_seconds = best(plain_dcp, repeats)

    root = str(work / "ckpt")
    fence = LocalFence(root)
    sync = Checkpointer(root, policy=CheckpointSpec(keep_last=1), fence=fence, events=MemorySink())
    step = iter(range(1, 10_000))
    sync_seconds = best(lambda: sync.save(next(step), state), repeats)

    buffers = [torch.empty_like(t) for t in tensors]

    def memcpy() -> None:
        for src, dst in zip(tensors, buffers, strict=True):
            dst.copy_(src)

    memcpy_seconds = best(memcpy, repeats)
    policy = CheckpointSpec(mode="async", max_inflight=1, keep_last=1)
    asynchronous = Checkpointer(root, policy=policy, fence=fence, events=MemorySink())
    stalls, persists = [], []
    for _ in range(repeats + 1):  # the first save allocates the pooled buffers
        result = asynchronous.save(next(step), state)
        stalls.append(result.stall_seconds)
        asynchronous.wait()
    asynchronous.close()
    committed = [e for e in asynchronous.events.events if e.type.value == "CHECKPOINT_COMMITTED"]
    persists = [e.attributes["persist"] for e in committed]
    stall_seconds = min(stalls[1:])
    persist_seconds = min(persists)
    bandwidth = state_bytes / persist_seconds
    raw_bandwidth = state_bytes / raw_seconds

    target = build_state(megabytes)

    def restore() -> None:
        Checkpointer(root, policy=CheckpointSpec(), fence=fence, events=MemorySink()).restore(
            target
        )

    restore_seconds = best(restore, repeats)
    return {
        "state_bytes": state_bytes,
        "repeats": repeats,
        "raw_write_fsync_seconds": raw_seconds,
        "plain_dcp_save_seconds": dcp_seconds,
        "sync_save_seconds": sync_seconds,
        "host_memcpy_seconds": memcpy_seconds,
        "async_stall_seconds": stall_seconds,
        "async_first_stall_seconds": stalls[0],
        "async_persist_seconds": persist_seconds,
        "persist_bytes_per_second": bandwidth,
        "raw_bytes_per_second": raw_bandwidth,
        "restore_seconds": restore_seconds,
        "comparisons": [
            {
                "measure": "sync save vs plain DCP (s)",
                "runwright": sync_seconds,
                "baseline": dcp_seconds,
                "ratio": sync_seconds / dcp_seconds,
                "target": "<= 1.1",
            },
            {
                "measure": "async stall vs host memcpy (s)",
                "runwright": stall_seconds,
                "baseline": memcpy_seconds,
                "ratio": stall_seconds / memcpy_seconds,
                "target": "<= 1.5",
            },
            {
                "measure": "persist vs raw write+fsync (GB/s)",
                "runwright": bandwidth / 1e9,
                "baseline": raw_bandwidth / 1e9,
                "ratio": bandwidth / raw_bandwidth,
                "target": ">= 0.8",
            },
        ],
    }


if __name__ == "__main__":
    main()
