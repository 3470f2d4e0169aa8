"""Checkpoint benchmark: runwright vs plain DCP, a host memcpy and a raw write+fsync (issue 20).

    .venv/bin/python benchmarks/checkpoint.py [--megabytes 512] [--rounds 9] [--threads 1]
                                              [--cpus 0,1] [--baseline REV] [--dir PATH]

For a model state of about `--megabytes` MB (float32 Linear layers), on the same disk (a temporary
folder under --dir, deleted afterwards), every round measures:
  - sync save (runwright) vs plain `dcp.save` with FileSystemWriter(sync_files=True) of the same
    state dict                                                          target ratio <= 1.1
  - async stall (the step blocked) vs a host memcpy of the same tensors into preallocated buffers
                                                                        target ratio <= 1.5
  - async persist bandwidth vs a raw sequential write + one fsync of the same bytes: the disk's
    own write bandwidth, measured in the same round                     target ratio >= 0.8
  - restore with full verification (every checksum) vs a plain `dcp.load` of the same bytes,
    both into preallocated tensors                                      target ratio <= 1.1
  - restore without verification (what the checksums cost), and deleting one checkpoint
With `--baseline REV`, git revision REV's runwright (unpacked by benchmarks/revision.py) is
measured in the same rounds, next to this checkout's, with the same baselines.

Fairness. Every side runs in a worker process of its own (this checkout's `src/`, or the
revision's, first on PYTHONPATH) that holds the state and times what the parent asks; the parent
only orders the requests. A shared disk drifts by 2x within minutes and the first write after a
pause is faster, so the sides of one comparison run back to back, their order rotated every round
(every order occurs as often over 6 rounds), and each figure is a median over `--rounds` rounds
after one warm-up round; each round's own ratio is kept and summarised as p10/p50/p90. The warm-up
round is reported on its own line ("first in a process"): it holds one-off costs a short job pays
(imports, first-touch allocation). Both sides use the same DCP thread count and fsync every data
file; runwright additionally fsyncs its sidecar, manifest, commit record, pointer and folders,
which is the commit protocol's cost, reported apart as `commit_seconds` (the save's time after
DCP's write returned). `--cpus` pins every worker to those CPUs (os.sched_setaffinity) and sets
torch's thread count to their number. Every checkpoint is deleted outside the timed regions. The
page cache is not dropped (the machine is shared): restores read files just written (warm cache).
Results: benchmarks/results/checkpoint.json.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from revision import REPO, baseline_src

RESULTS = REPO / "benchmarks" / "results" / "checkpoint.json"
# Retention must never run inside a timed save: keep more checkpoints than a run ever makes and
# delete each one explicitly, timed on its own line.
_KEEP_ALL = 1_000_000
# (measure, baseline, target, higher_is_better): the comparisons every side reports
COMPARISONS = (
    ("sync", "dcp", "<= 1.1", False),
    ("stall", "memcpy", "<= 1.5", False),
    ("persist", "raw", ">= 0.8", True),
    ("restore", "load", "<= 1.1", False),
    ("restore_unverified", "load", "reported", False),
    # CPU seconds of the process (every thread), which a busy machine disturbs less than wall time
    ("sync_cpu_seconds", "dcp_cpu_seconds", "reported", False),
    ("restore_cpu_seconds", "load_cpu_seconds", "reported", False),
)


# worker: one side, in its own process ---------------------------------------------------------
def worker(work: Path, megabytes: int, threads: int, cpus: list[int] | None) -> None:
    """Read one request per line on stdin, answer one JSON line of seconds on stdout."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    from runwright.ckpt import Checkpointer, LocalFence, MemorySink, SaveStatus, TrainState
    from runwright.ckpt.retention import delete_checkpoint
    from runwright.ckpt.state import capture
    from runwright.events import EventType
    from runwright.spec.policies import CheckpointSpec

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    if cpus:
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(len(cpus))

    def build_state() -> TrainState:
        # 2048 x 4096 float32 = 33.5 MB per layer; 16 layers = 537 MB
        layers = max(1, round(megabytes * 2**20 / (2048 * 4096 * 4)))
        linears = (torch.nn.Linear(2048, 4096, bias=False) for _ in range(layers))
        return TrainState(model=torch.nn.Sequential(*linears))

    state, target = build_state(), build_state()
    sd = capture(state, step=0, rank=0)
    tensors = [p.detach() for p in state.model.parameters()]
    buffers = [torch.empty_like(t) for t in tensors]
    load_target = {"model": {k: torch.empty_like(v) for k, v in sd["model"].items()}}
    raw_path, dcp_path, root = work / "raw.bin", work / "dcp", str(work / "ckpt")
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
    folders: list[str] = []

    def raw() -> dict:
        with open(raw_path, "wb") as handle:
            started = time.perf_counter()
            for t in tensors:
                handle.write(memoryview(t.numpy()).cast("B"))
            handle.flush()
            os.fsync(handle.fileno())
            return {"raw": time.perf_counter() - started}

    def plain_save() -> dict:
        writer = FileSystemWriter(dcp_path, sync_files=True, thread_count=threads)
        return {"dcp": timed(lambda: dcp.save(sd, storage_writer=writer, no_dist=True))}

    def plain_load() -> dict:
        reader = FileSystemReader(dcp_path)
        return {"load": timed(lambda: dcp.load(load_target, storage_reader=reader, no_dist=True))}

    def memcpy() -> dict:
        def copy() -> None:
            for src, dst in zip(tensors, buffers, strict=True):
                dst.copy_(src)

        return {"memcpy": timed(copy)}

    def sync_save() -> dict:
        started = time.perf_counter()
        result = sync.save(next(steps), state)
        seconds = time.perf_counter() - started
        assert result.status == SaveStatus.COMMITTED
        folders.append(result.folder or "")
        write = result.timings_seconds.get("write", 0.0)
        return {"sync": seconds, "commit_seconds": result.timings_seconds["persist"] - write}

    def async_save() -> dict:
        """(stall, persist): the step is blocked for the stall; the persist runs behind it."""
        result = asynchronous.save(next(steps), state)
        assert result.status == SaveStatus.QUEUED
        asynchronous.wait()
        committed = async_events.of_type(EventType.CHECKPOINT_COMMITTED)[-1]
        folders.append(committed.attributes["folder"])
        persist = float(committed.attributes["persist_seconds"])
        return {
            "stall": result.stall_seconds,
            "persist": persist,
            "persist_commit_seconds": persist - float(committed.attributes.get("write", 0.0)),
        }

    def restore(verify: str, name: str) -> Callable[[], dict]:
        def run() -> dict:
            reader = Checkpointer(root, policy=CheckpointSpec(), fence=fence, events=MemorySink())
            started = time.perf_counter()
            restored = reader.restore(target, verify=verify)
            assert restored is not None
            return {name: time.perf_counter() - started}

        return run

    def cleanup() -> dict:
        # deleting the newest sync checkpoint is what retention would do: timed on its own line
        seconds = {"delete": timed(lambda: delete_checkpoint(sync.storage, folders[0]))}
        for folder in folders[1:]:
            delete_checkpoint(sync.storage, folder)
        folders.clear()
        shutil.rmtree(dcp_path, ignore_errors=True)
        raw_path.unlink(missing_ok=True)
        return seconds

    requests: dict[str, Callable[[], dict]] = {
        "raw": raw,
        "dcp": plain_save,
        "load": plain_load,
        "memcpy": memcpy,
        "sync": sync_save,
        "async": async_save,
        "restore": restore("full", "restore"),
        "restore_unverified": restore("none", "restore_unverified"),
        "cleanup": cleanup,
    }
    import runwright

    print(json.dumps({"ready": True, "runwright": runwright.__file__}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        if name == "exit":
            break
        cpu_started = time.process_time()
        answer = requests[name]()
        answer[f"{name}_cpu_seconds"] = time.process_time() - cpu_started
        print(json.dumps(answer), flush=True)
    asynchronous.close()
    sync.close()


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# parent: orders the requests --------------------------------------------------------------------
class Side:
    """A worker process running one side's code."""

    def __init__(self, name: str, src: Path, work: Path, args: argparse.Namespace) -> None:
        self.name = name
        work.mkdir(parents=True)
        command = [sys.executable, __file__, "--worker", str(work)]
        command += ["--megabytes", str(args.megabytes), "--threads", str(args.threads)]
        command += ["--cpus", args.cpus] if args.cpus else []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(REPO / "benchmarks")])}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.code = json.loads(self._line())["runwright"]

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker exited (rc {self.process.wait()})")
        return line

    def ask(self, request: str) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("exit\n")
        self.process.stdin.flush()
        self.process.wait()


def rotated(items: list, index: int) -> list:
    """Round `index`'s order: rotated by index, reversed every other round."""
    shift = index % len(items)
    order = items[shift:] + items[:shift]
    return order[::-1] if (index // len(items)) % 2 else order


def run_rounds(sides: list[Side], rounds: int) -> list[dict[str, dict]]:
    """Per round, per side: every figure of that round (round 0 is the warm-up)."""
    main = sides[0]
    groups = [
        [(main, "dcp")] + [(s, "sync") for s in sides],
        [(main, "raw")] + [(s, "async") for s in sides],
        [(main, "memcpy")],
        [(main, "load")]
        + [(s, "restore") for s in sides]
        + [(s, "restore_unverified") for s in sides],
    ]
    measured = []
    for index in range(rounds + 1):
        figures: dict[str, dict] = {s.name: {} for s in sides}
        for group in groups:
            for side, request in rotated(group, index):
                figures[side.name] |= side.ask(request)
        for side in sides:
            figures[side.name] |= side.ask("cleanup")
        measured.append(figures)
        print(f"round {index}{' (warm-up)' if index == 0 else ''}: " + _brief(figures), flush=True)
    return measured


def _brief(figures: dict[str, dict]) -> str:
    return "; ".join(
        f"{side} " + " ".join(f"{k}={v:.2f}" for k, v in sorted(f.items()) if "cpu" not in k)
        for side, f in figures.items()
    )


def spread(values: list[float]) -> dict:
    """p10/p50/p90 (inclusive quantiles of the per-round values) and the range."""
    if len(values) == 1:
        return {
            "p10": values[0],
            "p50": values[0],
            "p90": values[0],
            "min": values[0],
            "max": values[0],
        }
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return {
        "p10": deciles[0],
        "p50": statistics.median(values),
        "p90": deciles[-1],
        "min": min(values),
        "max": max(values),
    }


def figures_of(
    measured: list[dict[str, dict]], workers: list[Side], args: argparse.Namespace, state_bytes: int
) -> dict:
    sides = [w.name for w in workers]
    main = sides[0]
    rounds = measured[1:]

    def samples(side: str, name: str) -> list[float]:
        return [r[side][name] for r in rounds]

    def base(name: str) -> list[float]:
        return samples(main, name)

    comparisons = []
    for side in sides:
        for measure, baseline, target, higher_is_better in COMPARISONS:
            a, b = samples(side, measure), base(baseline)
            # a bandwidth ratio is (bytes / a) / (bytes / b) = b / a
            ratios = [y / x if higher_is_better else x / y for x, y in zip(a, b, strict=True)]
            comparisons.append(
                {
                    "side": side,
                    "measure": f"{measure} vs {baseline}",
                    "runwright_seconds": statistics.median(a),
                    "baseline_seconds": statistics.median(b),
                    "ratio": statistics.median(ratios),
                    "ratio_spread": spread(ratios),
                    "round_ratios": ratios,
                    "target": target,
                }
            )
    # context: plain DCP's own bandwidth against the raw write, the ceiling for persist
    ratios = [r / d for r, d in zip(base("raw"), base("dcp"), strict=True)]
    comparisons.append(
        {
            "side": main,
            "measure": "plain dcp save vs raw (bandwidth)",
            "runwright_seconds": statistics.median(base("dcp")),
            "baseline_seconds": statistics.median(base("raw")),
            "ratio": statistics.median(ratios),
            "ratio_spread": spread(ratios),
            "round_ratios": ratios,
            "target": "ceiling for persist",
        }
    )
    for side in sides[1:]:
        # this checkout against the revision, measure by measure, paired by round
        for measure in ("sync", "stall", "persist", "restore", "restore_unverified"):
            ratios = [x / y for x, y in zip(base(measure), samples(side, measure), strict=True)]
            comparisons.append(
                {
                    "side": f"{main}/{side}",
                    "measure": measure,
                    "runwright_seconds": statistics.median(base(measure)),
                    "baseline_seconds": statistics.median(samples(side, measure)),
                    "ratio": statistics.median(ratios),
                    "ratio_spread": spread(ratios),
                    "round_ratios": ratios,
                    "target": "reported",
                }
            )
    disk = [state_bytes / s / 1e9 for s in base("raw")]
    return {
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "state_bytes": state_bytes,
        "rounds": len(rounds),
        "threads": args.threads,
        "cpus_pinned": args.cpus,
        "cpus": os.cpu_count(),
        "load_average_after": list(os.getloadavg()),
        "page_cache": "not dropped (shared machine); restore and load read warm files",
        "sides": {w.name: w.code for w in workers},
        "disk_write_fsync_gb_per_second": {"per_round": disk, **spread(disk)},
        "samples_seconds": {
            side: {k: [r[side][k] for r in rounds] for k in rounds[0][side]} for side in sides
        },
        "median_seconds": {
            side: {k: statistics.median(r[side][k] for r in rounds) for k in rounds[0][side]}
            for side in sides
        },
        "first_in_process_seconds": measured[0],
        "comparisons": comparisons,
    }


def render(figures: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"checkpoint benchmark, {figures['state_bytes'] / 1e6:.0f} MB state, "
        f"{figures['rounds']} rounds (+1 warm-up), medians and per-round ratio p10/p50/p90"
    )
    for column in ("side", "measure", "runwright s", "baseline s", "ratio", "p10-p90", "target"):
        table.add_column(column)
    for row in figures["comparisons"]:
        s = row["ratio_spread"]
        table.add_row(
            row["side"],
            row["measure"],
            f"{row['runwright_seconds']:.3f}",
            f"{row['baseline_seconds']:.3f}",
            f"{row['ratio']:.2f}",
            f"{s['p10']:.2f}-{s['p90']:.2f}",
            row["target"],
        )
    Console().print(table)
    disk = figures["disk_write_fsync_gb_per_second"]
    print(
        f"disk write+fsync: {disk['p50']:.3f} GB/s (p10 {disk['p10']:.3f}, p90 {disk['p90']:.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=9, help="Measured rounds (after 1 warm-up).")
    parser.add_argument("--threads", type=int, default=1, help="DCP writer threads, every side.")
    parser.add_argument("--cpus", default="", help="Pin every worker to these CPUs, e.g. 0,1.")
    parser.add_argument("--baseline", default=None, help="Also measure this git revision.")
    parser.add_argument("--dir", default=None, help="Folder on the disk to measure (default: cwd).")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cpus = [int(c) for c in args.cpus.split(",") if c]
    if args.worker:
        worker(Path(args.worker), args.megabytes, args.threads, cpus)
        return
    work = Path(tempfile.mkdtemp(prefix="rw-ckpt-bench-", dir=args.dir or os.getcwd()))
    sides: list[Side] = []
    try:
        sources = [("now", REPO / "src")]
        if args.baseline:
            sources.append(("base", baseline_src(args.baseline, work / "baseline")))
        for name, src in sources:
            sides.append(Side(name, src, work / name, args))
        measured = run_rounds(sides, args.rounds)
    finally:
        for side in sides:
            side.close()
        shutil.rmtree(work, ignore_errors=True)
    layers = max(1, round(args.megabytes * 2**20 / (2048 * 4096 * 4)))
    figures = figures_of(measured, sides, args, layers * 2048 * 4096 * 4)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    render(figures)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
