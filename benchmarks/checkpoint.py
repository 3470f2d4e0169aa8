"""Checkpoint benchmark: runwright vs plain DCP, a host memcpy and a raw sequential write.

    .venv/bin/python benchmarks/checkpoint.py [--megabytes 512] [--rounds 7] [--threads 1]
                                              [--dir PATH]

For a model state of about `--megabytes` MB (float32 Linear layers) it measures, on the same
disk (a temporary folder under --dir, deleted afterwards):
  - sync save (runwright, sha256 on) vs plain `dcp.save` with FileSystemWriter(sync_files=True)
    of the same state dict                                             target ratio <= 1.1
  - async stall (time the training loop is blocked) vs a plain host memcpy of the same tensors
    into preallocated buffers                                          target ratio <= 1.5
  - async persist bandwidth vs a raw sequential write + fsync of the same number of bytes
                                                                       target ratio >= 0.8
  - restore time (full sha256 verification + DCP load), next to a plain `dcp.load`
  - retention: deleting one committed checkpoint (its own line, never inside a timed save)

Fairness. A shared disk drifts by 2x within minutes, so every compared pair is measured
back to back inside one round, the order alternating (A B, then B A) so neither side always runs
on the disk state the other left; the figures are medians over `--rounds` rounds after one
discarded warm-up round, and each round's own ratio is reported. Both sides use the same DCP
thread count and fsync every data file (DCP's FileSystemWriter does by default; runwright's
writer additionally fsyncs its sidecar, manifest, commit record and folders, which is the commit
protocol's cost). Every checkpoint is deleted outside the timed region, so each save writes to a
disk holding the same data. The page cache is not dropped (the machine is shared): restores read
files that were just written, so restore figures are warm-cache figures.
Results: benchmarks/results/checkpoint.json.
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from rich.console import Console
from rich.table import Table
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from runwright.ckpt import (
    Checkpointer,
    LocalFence,
    MemorySink,
    SaveResult,
    SaveStatus,
    TrainState,
)
from runwright.ckpt.retention import delete_checkpoint
from runwright.ckpt.state import capture
from runwright.events import EventType
from runwright.spec.policies import CheckpointSpec

RESULTS = Path(__file__).parent / "results" / "checkpoint.json"
# Retention must never run inside a timed save: keep more checkpoints than a run ever makes and
# delete each one explicitly, timed on its own line.
_KEEP_ALL = 1_000_000


def build_state(megabytes: int) -> TrainState:
    # 2048 x 4096 float32 = 33.5 MB per layer; 16 layers = 537 MB
    layers = max(1, round(megabytes * 2**20 / (2048 * 4096 * 4)))
    model = torch.nn.Sequential(*(torch.nn.Linear(2048, 4096, bias=False) for _ in range(layers)))
    return TrainState(model=model)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def pair(
    first: Callable[[], float], second: Callable[[], float], flip: bool
) -> tuple[float, float]:
    """Run both measurements back to back, in the order given or flipped."""
    if flip:
        b = second()
        a = first()
    else:
        a = first()
        b = second()
    return a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=7, help="Measured rounds (after 1 warm-up).")
    parser.add_argument("--threads", type=int, default=1, help="DCP writer threads, both sides.")
    parser.add_argument("--dir", default=None, help="Folder on the disk to measure (default: cwd).")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rw-ckpt-bench-", dir=args.dir or os.getcwd()))
    try:
        figures = run(work, args.megabytes, args.rounds, args.threads)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    render(figures)
    print(f"wrote {RESULTS}")


def render(figures: dict) -> None:
    title = (
        f"checkpoint benchmark, {figures['state_bytes'] / 1e6:.0f} MB state, "
        f"median of {figures['rounds']} interleaved rounds"
    )
    table = Table(title=title)
    for column in ("measure", "runwright", "baseline", "ratio", "per-round ratios", "target"):
        table.add_column(column)
    for row in figures["comparisons"]:
        table.add_row(
            row["measure"],
            f"{row['runwright']:.3f}",
            "" if row["baseline"] is None else f"{row['baseline']:.3f}",
            "" if row["ratio"] is None else f"{row['ratio']:.2f}",
            " ".join(f"{r:.2f}" for r in row["round_ratios"]),
            row["target"],
        )
    Console().print(table)


def run(work: Path, megabytes: int, rounds: int, threads: int) -> dict:
    state = build_state(megabytes)
    sd = capture(state, step=0, rank=0)
    tensors = [p.detach() for p in state.model.parameters()]
    state_bytes = sum(t.numel() * t.element_size() for t in tensors)
    buffers = [torch.empty_like(t) for t in tensors]
    raw_path, dcp_path = work / "raw.bin", work / "dcp"

    def raw_write() -> float:
        with open(raw_path, "wb") as handle:
            started = time.perf_counter()
            for t in tensors:
                handle.write(memoryview(t.numpy()).cast("B"))
            handle.flush()
            os.fsync(handle.fileno())
            return time.perf_counter() - started

    def plain_save() -> float:
        writer = FileSystemWriter(dcp_path, sync_files=True, thread_count=threads)
        return timed(lambda: dcp.save(sd, storage_writer=writer, no_dist=True))

    def plain_load() -> float:
        target = {"model": {k: torch.empty_like(v) for k, v in sd["model"].items()}}
        reader = FileSystemReader(dcp_path)
        return timed(lambda: dcp.load(target, storage_reader=reader, no_dist=True))

    def memcpy() -> float:
        def copy() -> None:
            for src, dst in zip(tensors, buffers, strict=True):
                dst.copy_(src)

        return timed(copy)

    root = str(work / "ckpt")
    fence = LocalFence(root)
    sync = Checkpointer(
        root,
        policy=CheckpointSpec(keep_last=_KEEP_ALL),
        fence=fence,
        events=MemorySink(),
        thread_count=threads,
    )
    async_events = MemorySink()
    asynchronous = Checkpointer(
        root,
        policy=CheckpointSpec(mode="async", max_inflight=1, keep_last=_KEEP_ALL),
        fence=fence,
        events=async_events,
        thread_count=threads,
    )
    steps = iter(range(1, 1_000_000))
    target = build_state(megabytes)
    saved: list[SaveResult] = []

    def sync_save() -> float:
        seconds = timed(lambda: saved.append(sync.save(next(steps), state)))
        assert saved[-1].status == SaveStatus.COMMITTED
        return seconds

    def async_save() -> tuple[float, float]:
        """(stall, persist): the step is blocked for the stall; the persist runs behind it."""
        result = asynchronous.save(next(steps), state)
        assert result.status == SaveStatus.QUEUED
        asynchronous.wait()
        committed = async_events.of_type(EventType.CHECKPOINT_COMMITTED)[-1]
        return result.stall_seconds, float(committed.attributes["persist_seconds"])

    def restore() -> float:
        reader = Checkpointer(root, policy=CheckpointSpec(), fence=fence, events=MemorySink())
        restored = reader.restore(target, verify="full")
        assert restored is not None  # the async save of this round: the newest
        return restored.seconds

    names = ("dcp", "sync", "memcpy", "stall", "raw", "persist", "restore", "load", "delete")
    samples: dict[str, list[float]] = {name: [] for name in names}
    load_before = os.getloadavg()
    for index in range(rounds + 1):
        # writes first, back to back, each pair in alternating order; then the reads
        flip = index % 2 == 1
        dcp_s, sync_s = pair(plain_save, sync_save, flip)
        if flip:
            raw_s = raw_write()
            memcpy_s, (stall_s, persist_s) = memcpy(), async_save()
        else:
            (stall_s, persist_s), memcpy_s = async_save(), memcpy()
            raw_s = raw_write()
        restore_s, load_s = pair(restore, plain_load, flip)
        # clean-up outside every timed region; deleting the sync checkpoint is what retention
        # would do, so it is timed on its own line
        delete_s = timed(lambda: delete_checkpoint(sync.storage, saved[-1].folder or ""))
        for event in async_events.of_type(EventType.CHECKPOINT_COMMITTED)[-1:]:
            delete_checkpoint(asynchronous.storage, event.attributes["folder"])
        shutil.rmtree(dcp_path)
        raw_path.unlink()
        if index == 0:
            continue  # warm-up: first-touch allocation of buffers, threads and page tables
        for name, value in zip(
            names,
            (dcp_s, sync_s, memcpy_s, stall_s, raw_s, persist_s, restore_s, load_s, delete_s),
            strict=True,
        ):
            samples[name].append(value)
    asynchronous.close()
    sync.close()
    return figures_of(samples, state_bytes, rounds, threads, load_before)


def figures_of(
    samples: dict[str, list[float]],
    state_bytes: int,
    rounds: int,
    threads: int,
    load_before: tuple[float, float, float],
) -> dict:
    median = {name: statistics.median(values) for name, values in samples.items()}

    def ratios(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(samples[a], samples[b], strict=True)]

    # bandwidth ratio = (bytes / persist) / (bytes / raw) = raw / persist
    persist_ratios = ratios("raw", "persist")
    return {
        "state_bytes": state_bytes,
        "rounds": rounds,
        "threads": threads,
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "page_cache": "not dropped (shared machine); restore and load read warm files",
        "samples_seconds": samples,
        "median_seconds": median,
        "comparisons": [
            {
                "measure": "sync save vs plain DCP save (s)",
                "runwright": median["sync"],
                "baseline": median["dcp"],
                "ratio": statistics.median(ratios("sync", "dcp")),
                "round_ratios": ratios("sync", "dcp"),
                "target": "<= 1.1",
            },
            {
                "measure": "async stall vs host memcpy (s)",
                "runwright": median["stall"],
                "baseline": median["memcpy"],
                "ratio": statistics.median(ratios("stall", "memcpy")),
                "round_ratios": ratios("stall", "memcpy"),
                "target": "<= 1.5",
            },
            {
                "measure": "persist vs raw write+fsync (GB/s)",
                "runwright": state_bytes / median["persist"] / 1e9,
                "baseline": state_bytes / median["raw"] / 1e9,
                "ratio": statistics.median(persist_ratios),
                "round_ratios": persist_ratios,
                "target": ">= 0.8",
            },
            {
                "measure": "context: plain DCP save vs raw write+fsync (GB/s)",
                "runwright": state_bytes / median["dcp"] / 1e9,
                "baseline": state_bytes / median["raw"] / 1e9,
                "ratio": statistics.median(ratios("raw", "dcp")),
                "round_ratios": ratios("raw", "dcp"),
                "target": "ceiling for persist",
            },
            {
                "measure": "restore, full verify, vs plain DCP load (s)",
                "runwright": median["restore"],
                "baseline": median["load"],
                "ratio": statistics.median(ratios("restore", "load")),
                "round_ratios": ratios("restore", "load"),
                "target": "reported",
            },
            {
                "measure": "retention: delete one checkpoint (s)",
                "runwright": median["delete"],
                "baseline": None,
                "ratio": None,
                "round_ratios": [],
                "target": "reported",
            },
        ],
    }


if __name__ == "__main__":
    main()
