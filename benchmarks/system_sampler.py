"""The system sampler's cost per sample: what one node pays every `system_sample_seconds`.

    PYTHONPATH=$PWD/src .venv/bin/python benchmarks/system_sampler.py --samples 300

Takes `--samples` samples back to back with `runtime/system_sampler.py`'s own `SystemSampler`
(psutil readings of this host, the run and checkpoint folders' file systems, the network; NVML
where a driver is present) into a real channel file, and reports per sample:
- `cpu_us`: the sampling thread's own CPU time (`time.thread_time`), which is what the node's
  cores give up; it includes encoding and appending the channel line;
- `wall_us`: the wall time of one sample (what the thread is busy for);
- `sample_cpu_seconds` as the samples themselves report it (reading only, without the write).
At the default interval of 10 s a sample's CPU time over 10 s is the node's share of one core.
Results: benchmarks/results/system_sampler.json.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from runwright.control.channel import ChannelReader
from runwright.runtime import ChannelWriter
from runwright.runtime.system_sampler import DEFAULT_SAMPLE_SECONDS, SystemSampler

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "system_sampler.json"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "checkpoints").mkdir()
        channel = ChannelWriter(folder / "channel", generation=0, rank=0)
        ctx = SimpleNamespace(channel=channel, last_step=0, generation=0, rank=0, world_size=1)
        sampler = SystemSampler(
            ctx, DEFAULT_SAMPLE_SECONDS, {"run": folder, "checkpoints": folder / "checkpoints"}, 0
        )
        before = sampler.reader.read()
        cpu, wall = [], []
        for _ in range(args.samples):
            c0, w0 = time.thread_time(), time.perf_counter()
            before = sampler.sample(before)
            cpu.append((time.thread_time() - c0) * 1e6)
            wall.append((time.perf_counter() - w0) * 1e6)
        channel.close()
        lines = ChannelReader(folder / "channel").poll()
        reported = [m.attributes["sample_cpu_seconds"] * 1e6 for m in lines]
        gpus = sampler.gpus is not None
        if sampler.gpus is not None:
            sampler.gpus.close()
    median_cpu = statistics.median(cpu)
    result = {
        "samples": args.samples,
        "gpus_read": gpus,
        "cpu_us": {"median": median_cpu, "p90": _percentile(cpu, 0.9), "max": max(cpu)},
        "wall_us": {"median": statistics.median(wall), "p90": _percentile(wall, 0.9)},
        "reported_sample_cpu_us_median": statistics.median(reported),
        "share_of_one_core_at_default_interval": median_cpu / 1e6 / DEFAULT_SAMPLE_SECONDS,
        "python": sys.version.split()[0],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
