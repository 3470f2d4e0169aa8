"""What the experiment trackers (spec `observability.trackers`) cost a training step.

    .venv/bin/python benchmarks/tracker_overhead.py
    .venv/bin/python benchmarks/tracker_overhead.py --steps 300 --step-ms 20

Rank 0's run context hands every step event to `TrackerSink.observe` (runtime/context.py); that
call is the only work the trackers put on the training thread, and their writer threads share
the process (and its GIL) with it. Two measurements, in one process:

  observe_us     the call itself: wall microseconds per `observe` with the reference trainer's
                 step attributes, both trackers on, writer threads idle (median, p99 over
                 batches of 100 calls); `baseline_us` is the same loop calling a no-op
  step_seconds   a paced step loop: each step a CPU matmul of about `--step-ms` milliseconds
                 (torch releases the GIL in it, as in real training) followed by the step
                 event, with trackers off and on (TensorBoard in a temp folder, MLflow on a
                 SQLite store in a temp folder: the worst case for the worker process, since a
                 server would do the database work in its own), flushed every 50 steps (the
                 default). Sides alternate every `--round` steps so machine load hits both;
                 the median step time of each side and the overhead of "on" in percent, in the
                 steady state: after the trackers started
  start_seconds  how long the trackers' start took on their threads (imports, creating the
                 SQLite store, the MLflow run and its ~100 parameters); a run's first steps
                 share the process with it

Results: benchmarks/results/tracker_overhead.json.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from runwright.events import EventType
from runwright.observe.tracker_backends import MLflowTracker, TensorBoardTracker
from runwright.observe.trackers import TrackerSink, run_facts
from runwright.spec import MLflowSpec, spec_from_mapping

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "tracker_overhead.json"
BATCH = 100


def _attributes(step: int) -> dict:
    """A STEP_HEALTHY of the reference trainer (src/runwright/train/loop.py), as it is sent."""
    return {
        "step_seconds": 0.05,
        "data_wait_seconds": 0.001,
        "forward_seconds": 0.02,
        "backward_seconds": 0.02,
        "grad_sync_seconds": 0.004,
        "optimizer_seconds": 0.003,
        "checkpoint_stall_seconds": 0.0,
        "logging_seconds": 0.0001,
        "loss": 5.0 / step,
        "grad_norm": 1.0,
        "lr": 0.003,
        "device_tokens": 1024,
        "padded_tokens": 0,
        "loss_tokens": 1000,
        "samples": [step * 8, step * 8 + 8],
    }


def _sink(folder: Path, flush_steps: int, flush_seconds: float) -> TrackerSink:
    spec = spec_from_mapping(
        yaml.safe_load((REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml").read_text())
    )
    return TrackerSink(
        [
            TensorBoardTracker(folder / "tb"),
            MLflowTracker(MLflowSpec(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}"), "bench"),
        ],
        run_facts(spec, folder.name, 0),
        folder,
        dp_size=2,
        flush_steps=flush_steps,
        flush_seconds=flush_seconds,
        finish_seconds=600.0,
    )


def _started(sink: TrackerSink) -> TrackerSink:
    """`sink` once every tracker has started (imports, the MLflow run), so what is timed next
    is the steady state; the start's own cost is in the step loop's figures."""
    while not all(w["started"] or w["failures"] for w in _writers(sink)):
        time.sleep(0.05)
    return sink


def _writers(sink: TrackerSink) -> list[dict]:
    return [v for v in sink.status().values() if isinstance(v, dict)]


def _summary(values: list[float], digits: int = 3) -> dict:
    """Median and p99, and the minimum: on a shared machine the scheduler inflates the others
    (a loaded 2-core machine ran `str != str` 20x slower than idle), the minimum much less."""
    ordered = sorted(values)
    return {
        "min": round(ordered[0], digits),
        "median": round(statistics.median(ordered), digits),
        "p99": round(ordered[int(0.99 * (len(ordered) - 1))], digits),
    }


def call_cost(calls: int) -> dict:
    """Microseconds per observe() with idle writer threads, and per no-op call."""
    sink = _started(_sink(Path(tempfile.mkdtemp(prefix="runwright-bench-call-")), 10**9, 3600.0))
    events = [_attributes(s) for s in range(1, calls + 1)]

    def noop(type_: str, step: int, attributes: dict) -> None:
        return None

    def timed(call) -> list[float]:
        per_batch = []
        for first in range(0, calls, BATCH):
            started = time.perf_counter()
            for i in range(first, first + BATCH):
                call(EventType.STEP_HEALTHY, i + 1, events[i])
            per_batch.append((time.perf_counter() - started) / BATCH * 1e6)
        return per_batch

    result = {"observe_us": _summary(timed(sink.observe)), "baseline_us": _summary(timed(noop))}
    sink.close(completed=True)
    return result


def step_loop(steps: int, step_ms: float, round_steps: int) -> dict:
    """Median seconds of a paced step, trackers off and on, alternating every round."""
    torch.set_num_threads(1)
    a = torch.randn(256, 256)
    for _ in range(20):  # warm-up
        a @ a
    started = time.perf_counter()
    for _ in range(200):
        a @ a
    matmuls = max(1, round(step_ms / 1000 / ((time.perf_counter() - started) / 200)))

    def step(observe, n: int) -> float:
        began = time.perf_counter()
        for _ in range(matmuls):
            a @ a
        observe(EventType.STEP_HEALTHY, n, _attributes(n))
        return time.perf_counter() - began

    started = time.perf_counter()
    sink = _started(_sink(Path(tempfile.mkdtemp(prefix="runwright-bench-loop-")), 50, 5.0))
    start_seconds = time.perf_counter() - started
    times: dict[str, list[float]] = {"off": [], "on": []}
    counts = {"off": 0, "on": 0}
    order = ["on", "off"]
    while min(counts.values()) < steps:
        for side in order:
            observe = sink.observe if side == "on" else (lambda *a, **k: None)
            for _ in range(round_steps):
                counts[side] += 1
                times[side].append(step(observe, counts[side]))
        order.reverse()
    close_started = time.perf_counter()
    status = sink.close(completed=True)
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    return {
        "matmuls_per_step": matmuls,
        "step_seconds_off": _summary(times["off"], 5),
        "step_seconds_on": _summary(times["on"], 5),
        "overhead_percent_median": round((on - off) / off * 100, 2),
        "start_seconds": round(start_seconds, 2),
        "close_seconds": round(time.perf_counter() - close_started, 3),
        "trackers": {k: v for k, v in status.items() if isinstance(v, dict)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="observe() calls timed")
    parser.add_argument("--steps", type=int, default=300, help="paced steps per side")
    parser.add_argument("--step-ms", type=float, default=20.0, help="work per paced step")
    parser.add_argument("--round", type=int, default=50, help="steps per side per round")
    args = parser.parse_args()
    # MLflow keeps a SQLite store's artifacts in ./mlruns of the working folder: not the repo's.
    os.chdir(tempfile.mkdtemp(prefix="runwright-bench-cwd-"))
    result = {
        **call_cost(args.calls),
        **step_loop(args.steps, args.step_ms, args.round),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "trackers"}, indent=1))
    print(f"-> {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
