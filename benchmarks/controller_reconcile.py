"""Controller cost: one controller (`drive_all`) driving 50 small runs at once (issue 11).

    nice -n 10 .venv/bin/python benchmarks/controller_reconcile.py                    # this code
    nice -n 10 .venv/bin/python benchmarks/controller_reconcile.py --baseline 967d6b2 # and a rev

Each side submits `--runs` runs (50) of `--ranks` ranks (1) and `--steps` steps (400) into a
fresh root (one SQLite store) at once and drives them all with one `Controller.drive_all` in a
process of its own, until every run is finished or `--deadline-seconds` passed (then the rest are
cancelled and wound down, and counted as unfinished). Every run is launched for real by the local
executor: a supervisor process, torchrun, and torchrun's ranks. What the ranks run is `--worker`:

  paced     (default) src/runwright/demo/paced_worker.py, no torch: each step takes
            `--step-seconds` (0.5) asleep and reports one STEP_HEALTHY per rank, beside the
            runtime's heartbeats (the spec's heartbeat_interval_seconds, 1 s): 50 runs x 1 rank
            x (2 steps + 1 beat) = 150 channel messages a second for the controller to ingest.
  skeleton  src/runwright/demo/skeleton_worker.py: a linear model under DDP + gloo, `--steps`
            optimizer steps as fast as they go. Every rank imports torch, so at 50 runs 100
            torch processes load 2 cores to ~50 and the figures show that contention rather than
            the controller.

What one paced run costs, measured on the 2-core machine with all 50 running (PSS from
/proc/<pid>/smaps_rollup, CPU from /proc/<pid>/stat over 10 s): torchrun 147 MiB PSS (237 MiB
RSS) and 2.5 ms CPU a second, its rank 19 MiB PSS (34 MiB RSS) and 1 ms a second, the supervisor
6 MiB PSS. 50 runs: 50 x 172 MiB = 8.4 GiB and 0.17 of a core. Starting torchrun imports torch,
about 2.5 CPU seconds each: the 50 launches (all in one pass) keep both cores busy for a minute or
two (1-minute load average up to ~34), so the runs are long enough (400 x 0.5 s = 200 s) for all
50 to be RUNNING together well after that; no stagger is needed.

Measured in the controller process (the `--inner` process; the outer one only waits and samples):

  pass latency    wall time of each reconcile pass over every unfinished run (`Controller._sweep`,
                  the body of `drive_all`'s loop), p50 / p90 / p99 / max / mean in milliseconds
  CPU share       the controller process's own user + system CPU seconds (`resource.getrusage`,
                  RUSAGE_SELF: the workers are other processes) over its wall seconds; 1.0 is
                  one core busy all the time. `drive_all` runs passes back to back with a
                  `--poll-seconds` sleep between, so a cheaper pass buys more passes: read
                  `controller_cpu_ms_per_pass` (CPU per pass) beside the share
  events/s        channel messages (heartbeats included) the controller's ingestors read
                  (`Ingestor.poll`'s count) per wall second
  peak running    the most runs in state RUNNING at one time, from the STATE_CHANGED events'
                  times in the store (read after the drive, so the passes do not pay for it)
  runs finished   runs that reached SUCCEEDED before the deadline; `wall_seconds` of the drive

`all_running` repeats these over the steady state: from the first pass that began with every run
RUNNING to the last one (without the launch storm and the wind-down). `machine` (and
`all_running.machine`) is sampled every `--sample-seconds` by the outer process, so not charged to
the controller: the 1-minute load average (`os.getloadavg`), the machine's busy CPU share (from
/proc/stat, 1.0 = every core busy) and MemAvailable; they include whatever else runs on the
machine.

`--baseline REV` measures the code at git revision REV the same way: `git archive REV src`
unpacked into a temporary folder and put first on PYTHONPATH for the controller and (inherited
through the launch environment) for its supervisors, torchruns and ranks. The paced worker is
started by its file path in this checkout (`code.entrypoint`), so it runs on whatever runtime is
first on PYTHONPATH, and needs only `init`, `step_healthy` and the stop watcher, which old
revisions have. `imported_from` shows which `runwright` the controller imported. The ratios are
this code's figure over the baseline's. The workers share the machine with the controller, so on
a loaded machine both sides see the same contention only roughly: run the sides back to back (one
invocation does) and compare CPU per pass before latencies.
Results: benchmarks/results/controller_reconcile.json.
"""

import argparse
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from revision import baseline_src

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "controller_reconcile.json"
SKELETON = REPO / "src" / "runwright" / "demo" / "skeleton.yaml"
PACED_WORKER = REPO / "src" / "runwright" / "demo" / "paced_worker.py"
WORKERS = ("paced", "skeleton")
RATIO_FIGURES = (
    "controller_cpu_share",
    "controller_cpu_seconds",
    "controller_cpu_ms_per_pass",
    "events_ingested_per_second",
    "passes",
)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list: the ceil(q / 100 * n)-th
    smallest value (https://en.wikipedia.org/wiki/Percentile#The_nearest-rank_method)."""
    ordered = sorted(values)
    # q * n / 100, not q / 100 * n: for whole q the product is exact, so ceil never rounds up a
    # float error (0.07 * 100 = 7.000000000000001).
    rank = math.ceil(q * len(ordered) / 100)
    return ordered[max(0, min(len(ordered), rank) - 1)]


def latency_summary(passes_ms: list[float]) -> dict[str, float] | None:
    """p50 / p90 / p99 / max / mean of pass times in milliseconds; None for no passes."""
    if not passes_ms:
        return None
    return {
        "p50": round(percentile(passes_ms, 50), 2),
        "p90": round(percentile(passes_ms, 90), 2),
        "p99": round(percentile(passes_ms, 99), 2),
        "max": round(max(passes_ms), 2),
        "mean": round(statistics.fmean(passes_ms), 2),
    }


def running_intervals(
    changes: list[tuple[float, str]], end_unix_s: float
) -> list[tuple[float, float]]:
    """[entered, left) spans of state RUNNING from one run's (time, to_state) changes; a run still
    RUNNING at the end is counted until `end_unix_s`."""
    spans: list[tuple[float, float]] = []
    entered: float | None = None
    for at, to_state in sorted(changes):
        if to_state == "RUNNING" and entered is None:
            entered = at
        elif to_state != "RUNNING" and entered is not None:
            spans.append((entered, at))
            entered = None
    if entered is not None:
        spans.append((entered, end_unix_s))
    return spans


def running_at(spans: list[tuple[float, float]], at_unix_s: float) -> int:
    """How many of the [entered, left) spans contain `at_unix_s`."""
    return sum(1 for entered, left in spans if entered <= at_unix_s < left)


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """The most [entered, left) spans open at one instant (a span that closes where another
    opens does not overlap it)."""
    # At equal times the close (-1) sorts before the open (+1).
    edges = sorted([(left, -1) for _, left in spans] + [(entered, 1) for entered, _ in spans])
    peak = now = 0
    for _, delta in edges:
        now += delta
        peak = max(peak, now)
    return peak


class Mark(NamedTuple):
    """The controller process at one instant."""

    unix_s: float
    cpu_seconds: float
    """RUSAGE_SELF user + system seconds so far."""
    events_ingested: int
    """Channel messages its ingestors had read so far."""


class Pass(NamedTuple):
    began: Mark
    ms: float
    """Wall milliseconds the pass took."""


def rates(start: Mark, end: Mark, passes: int) -> dict[str, float | int]:
    """The controller's CPU and ingest figures between two marks."""
    wall_s = max(end.unix_s - start.unix_s, 1e-9)
    cpu_s = end.cpu_seconds - start.cpu_seconds
    events = end.events_ingested - start.events_ingested
    return {
        "controller_cpu_seconds": round(cpu_s, 2),
        "controller_cpu_share": round(cpu_s / wall_s, 3),
        "controller_cpu_ms_per_pass": round(cpu_s * 1000 / max(passes, 1), 1),
        "events_ingested": events,
        "events_ingested_per_second": round(events / wall_s, 1),
        "passes": passes,
    }


class Deadline(Exception):
    """The measured drive ran past --deadline-seconds."""


def job_mapping(worker: str, ranks: int, steps: int, step_seconds: float) -> dict:
    """skeleton.yaml, with `ranks` ranks, `steps` steps and the chosen worker."""
    import yaml

    data = yaml.safe_load(SKELETON.read_text())
    data["name"] = f"bench-{worker}"
    data["training"]["steps"] = steps
    data["resources"]["devices_per_node"] = ranks
    if worker == "paced":
        data["code"] = {"entrypoint": str(PACED_WORKER), "args": [f"--step-seconds={step_seconds}"]}
    return data


def measure(args: argparse.Namespace) -> dict:
    """One side, in this process: submit the runs and drive them all with one controller."""
    import runwright
    from runwright.control.cancel import request_cancel
    from runwright.control.controller import Controller
    from runwright.control.ingest import Ingestor
    from runwright.spec import spec_from_mapping
    from runwright.store import Store

    spec = spec_from_mapping(job_mapping(args.worker, args.ranks, args.steps, args.step_seconds))
    root = Path(tempfile.mkdtemp(prefix="rw-reconcile-"))
    ingested = [0]
    poll = Ingestor.poll

    def counted_poll(self: Ingestor, *a: object, **kw: object) -> int:
        count = poll(self, *a, **kw)
        ingested[0] += count
        return count

    def cpu_seconds() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    Ingestor.poll = counted_poll  # type: ignore[method-assign]
    try:
        store = Store.open(root)
        controller = Controller(store, root, poll_seconds=args.poll_seconds)
        for _ in range(args.runs):
            controller.submit(spec, root)
        passes: list[Pass] = []
        sweep = controller._sweep
        started = time.monotonic()

        def timed_sweep(active: set[str], finished: list[str]) -> None:
            mark = Mark(time.time(), cpu_seconds(), ingested[0])
            begun = time.perf_counter()
            sweep(active, finished)
            passes.append(Pass(mark, (time.perf_counter() - begun) * 1000))
            if time.monotonic() - started > args.deadline_seconds:
                raise Deadline

        controller._sweep = timed_sweep  # type: ignore[method-assign]
        first = Mark(time.time(), cpu_seconds(), 0)
        try:
            controller.drive_all()
            timed_out = False
        except Deadline:
            timed_out = True
        wall_s = time.monotonic() - started
        last = Mark(time.time(), cpu_seconds(), ingested[0])
        records = store.list_runs(limit=args.runs * 2)
        succeeded = sum(1 for r in records if r.state == "SUCCEEDED")
        spans = [
            span
            for r in records
            for span in running_intervals(
                [
                    (e.time_unix_s, str(e.attributes.get("to_state")))
                    for e in store.events(r.run_id, types=["STATE_CHANGED"])
                ],
                last.unix_s,
            )
        ]
        if timed_out:
            controller._sweep = sweep  # type: ignore[method-assign]
            for r in records:
                request_cancel(store, r.run_id, "benchmark deadline")
            controller.drive_all()
        steady = [i for i, p in enumerate(passes) if running_at(spans, p.began.unix_s) >= args.runs]
        window = None
        if len(steady) >= 2:
            # From the first pass that saw every run RUNNING to the start of the pass after the
            # last one that did (or the drive's end).
            after = steady[-1] + 1
            window = (passes[steady[0]].began, passes[after].began if after < len(passes) else last)
        return {
            "imported_from": str(Path(runwright.__file__).parent),
            "worker": args.worker,
            "runs": args.runs,
            "ranks_per_run": args.ranks,
            "steps_per_run": args.steps,
            "step_seconds": args.step_seconds if args.worker == "paced" else None,
            "poll_seconds": args.poll_seconds,
            "runs_finished": succeeded,
            "timed_out": timed_out,
            "wall_seconds": round(wall_s, 2),
            "peak_running_runs": peak_overlap(spans),
            **rates(first, last, len(passes)),
            "pass_ms": latency_summary([p.ms for p in passes]),
            "all_running": None
            if window is None
            else {
                "unix_s": [round(window[0].unix_s, 3), round(window[1].unix_s, 3)],
                "seconds": round(window[1].unix_s - window[0].unix_s, 2),
                **rates(*window, len(steady)),
                "pass_ms": latency_summary([passes[i].ms for i in steady]),
            },
        }
    finally:
        Ingestor.poll = poll  # type: ignore[method-assign]
        shutil.rmtree(root, ignore_errors=True)


class MachineSample(NamedTuple):
    """The whole machine at one instant, as the outer process saw it."""

    unix_s: float
    load_average_1m: float
    mem_available_bytes: int
    cpu_busy_ticks: int
    """/proc/stat: all CPUs' ticks not idle and not waiting on I/O, since boot."""
    cpu_total_ticks: int


def machine_sample() -> MachineSample:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    # user nice system idle iowait irq softirq steal (guest time is already in user and nice).
    ticks = [int(x) for x in fields[:8]]
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return MachineSample(
        unix_s=time.time(),
        load_average_1m=os.getloadavg()[0],
        mem_available_bytes=int(meminfo["MemAvailable"].split()[0]) * 1024,
        cpu_busy_ticks=sum(ticks) - ticks[3] - ticks[4],
        cpu_total_ticks=sum(ticks),
    )


def machine_figures(samples: list[MachineSample]) -> dict | None:
    """Load average, busy CPU share (1.0: every core busy) and free memory over the samples."""
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    busy = (last.cpu_busy_ticks - first.cpu_busy_ticks) / max(
        last.cpu_total_ticks - first.cpu_total_ticks, 1
    )
    loads = [s.load_average_1m for s in samples]
    return {
        "load_average_1m_mean": round(statistics.fmean(loads), 2),
        "load_average_1m_max": round(max(loads), 2),
        "cpu_busy_share": round(busy, 3),
        "mem_available_min_gib": round(min(s.mem_available_bytes for s in samples) / 2**30, 2),
        "samples": len(samples),
    }


def side(args: argparse.Namespace, src: Path | None) -> dict:
    """Measure in a fresh process, importing runwright from `src` (None: this checkout), and
    sample the machine's load, CPU and free memory while it runs."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    argv = [sys.executable, __file__, "--inner", *forwarded(args)]
    samples = [machine_sample()]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, text=True)
        while True:
            try:
                proc.wait(timeout=args.sample_seconds)
                break
            except subprocess.TimeoutExpired:
                samples.append(machine_sample())
        samples.append(machine_sample())
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"the measured side failed:\n{stderr[-4000:]}")
    figures = json.loads(stdout.strip().splitlines()[-1])
    figures["machine"] = machine_figures(samples)
    if figures["all_running"] is not None:
        begin, end = figures["all_running"]["unix_s"]
        figures["all_running"]["machine"] = machine_figures(
            [s for s in samples if begin <= s.unix_s <= end]
        )
    figures["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return figures


def forwarded(args: argparse.Namespace) -> list[str]:
    return [
        f"--worker={args.worker}",
        f"--runs={args.runs}",
        f"--ranks={args.ranks}",
        f"--steps={args.steps}",
        f"--step-seconds={args.step_seconds}",
        f"--poll-seconds={args.poll_seconds}",
        f"--deadline-seconds={args.deadline_seconds}",
    ]


def ratios(cur: dict, base: dict) -> dict:
    """This code's figure over the baseline's, for the figures both sides have."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(a / max(b, 1e-9), 3)

    out: dict[str, float | None] = {
        "wall_seconds": ratio(cur["wall_seconds"], base["wall_seconds"])
    }
    for prefix, block in (("", None), ("all_running_", "all_running")):
        c = cur if block is None else cur[block]
        b = base if block is None else base[block]
        if c is None or b is None:
            continue
        out.update({f"{prefix}{k}": ratio(c[k], b[k]) for k in RATIO_FIGURES})
        for k in ("p50", "p90", "p99", "max"):
            out[f"{prefix}pass_ms_{k}"] = ratio(c["pass_ms"][k], b["pass_ms"][k])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", choices=WORKERS, default="paced", help="what each rank runs")
    parser.add_argument("--runs", type=int, default=50, help="concurrent runs")
    parser.add_argument("--ranks", type=int, default=1, help="ranks per run (torchrun procs)")
    parser.add_argument("--steps", type=int, default=400, help="training steps per run")
    parser.add_argument(
        "--step-seconds", type=float, default=0.5, help="wall seconds per step (paced worker)"
    )
    parser.add_argument("--poll-seconds", type=float, default=0.2, help="drive_all's poll")
    parser.add_argument(
        "--deadline-seconds", type=float, default=900.0, help="per side; then cancel the rest"
    )
    parser.add_argument(
        "--sample-seconds", type=float, default=2.0, help="load / memory sampling interval"
    )
    parser.add_argument("--baseline", metavar="REV", help="also measure git revision REV")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(measure(args)))
        return
    result: dict = {
        "benchmark": "controller_reconcile",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "mem_total_gib": round(
                os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1
            ),
            "load_average_before": [round(x, 2) for x in os.getloadavg()],
        },
        "commit": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
        "current": side(args, None),
    }
    print(json.dumps(result["current"]), file=sys.stderr)
    if args.baseline:
        with tempfile.TemporaryDirectory(prefix="rw-baseline-") as tmp:
            base = side(args, baseline_src(args.baseline, Path(tmp)))
        result["baseline"] = {"rev": args.baseline, **base}
        result["ratios_current_over_baseline"] = ratios(result["current"], base)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
