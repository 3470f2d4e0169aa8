"""Controller cost: one controller (`drive_all`) driving many small runs at once.

    .venv/bin/python benchmarks/controller_reconcile.py                    # 50 runs, this code
    .venv/bin/python benchmarks/controller_reconcile.py --baseline 967d6b2 # and the code at a rev

Each side submits `--runs` copies of the skeleton job (src/runwright/demo/skeleton.yaml: a linear
model under torchrun + gloo, here with 1 rank per run so that 50 runs fit on a small machine, and
`--steps` steps each) into a fresh root and drives them all with one `Controller.drive_all` in a
process of its own, until every run is finished or `--deadline-seconds` passed (then the rest are
cancelled and wound down, and counted as unfinished). Measured in the controller process:

  pass latency   wall time of each reconcile pass over every unfinished run (`Controller._sweep`,
                 the body of `drive_all`'s loop), as p50 / p90 / p99 / max in milliseconds
  CPU share      the controller process's own user + system CPU seconds (`resource.getrusage`,
                 RUSAGE_SELF: the workers are other processes) divided by its wall seconds; 1.0
                 is one core busy all the time
  runs finished  runs that reached SUCCEEDED before the deadline; total wall seconds

`--baseline REV` measures the code at git revision REV the same way: `git archive REV src`
unpacked into a temporary folder and put first on PYTHONPATH for the controller and (inherited
through the launch environment) for its workers. The ratios are this code's figure over the
baseline's. The workers share the machine with the controller, so on a loaded machine both sides
see the same contention only roughly: compare sides run back to back, and read the CPU share
(work done per second) before the latencies.
Results: benchmarks/results/controller_reconcile.json.
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "controller_reconcile.json"
SKELETON = REPO / "src" / "runwright" / "demo" / "skeleton.yaml"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


class Deadline(Exception):
    """The measured drive ran past --deadline-seconds."""


def measure(runs: int, steps: int, poll_seconds: float, deadline_seconds: float) -> dict:
    """One side, in this process: submit `runs` skeleton runs and drive them all."""
    import yaml

    from runwright.control.cancel import request_cancel
    from runwright.control.controller import Controller
    from runwright.spec import spec_from_mapping
    from runwright.store import Store

    data = yaml.safe_load(SKELETON.read_text())
    data["training"]["steps"] = steps
    data["resources"]["devices_per_node"] = 1
    spec = spec_from_mapping(data)
    root = Path(tempfile.mkdtemp(prefix="rw-reconcile-"))
    try:
        store = Store.open(root)
        controller = Controller(store, root, poll_seconds=poll_seconds)
        for _ in range(runs):
            controller.submit(spec, root)
        passes_ms: list[float] = []
        sweep = controller._sweep
        started = time.monotonic()

        def timed_sweep(active: set[str], finished: list[str]) -> None:
            begun = time.perf_counter()
            sweep(active, finished)
            passes_ms.append((time.perf_counter() - begun) * 1000)
            if time.monotonic() - started > deadline_seconds:
                raise Deadline

        controller._sweep = timed_sweep  # type: ignore[method-assign]
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        try:
            controller.drive_all()
            timed_out = False
        except Deadline:
            timed_out = True
        wall_s = time.monotonic() - started
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (
            cpu_after.ru_stime - cpu_before.ru_stime
        )
        succeeded = sum(1 for r in store.list_runs(limit=runs * 2) if r.state == "SUCCEEDED")
        if timed_out:
            controller._sweep = sweep  # type: ignore[method-assign]
            for r in store.list_runs(limit=runs * 2):
                request_cancel(store, r.run_id, "benchmark deadline")
            controller.drive_all()
        return {
            "runs": runs,
            "steps_per_run": steps,
            "poll_seconds": poll_seconds,
            "runs_finished": succeeded,
            "timed_out": timed_out,
            "wall_seconds": round(wall_s, 2),
            "controller_cpu_seconds": round(cpu_s, 2),
            "controller_cpu_share": round(cpu_s / wall_s, 3),
            "passes": len(passes_ms),
            "pass_ms": {
                "p50": round(percentile(passes_ms, 50), 2),
                "p90": round(percentile(passes_ms, 90), 2),
                "p99": round(percentile(passes_ms, 99), 2),
                "max": round(max(passes_ms), 2),
                "mean": round(statistics.fmean(passes_ms), 2),
            },
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def side(args: argparse.Namespace, src: Path | None) -> dict:
    """Measure in a fresh process, importing runwright from `src` (None: this checkout)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    argv = [sys.executable, __file__, "--inner", *forwarded(args)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"the measured side failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def forwarded(args: argparse.Namespace) -> list[str]:
    return [
        f"--runs={args.runs}",
        f"--steps={args.steps}",
        f"--poll-seconds={args.poll_seconds}",
        f"--deadline-seconds={args.deadline_seconds}",
    ]


def baseline_src(rev: str, into: Path) -> Path:
    """`src/` of git revision `rev`, unpacked under `into` (the built C kernels copied in)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    for built in (REPO / "src").rglob("*.so"):
        target = into / built.relative_to(REPO)
        if target.parent.is_dir() and not target.exists():
            shutil.copy2(built, target)
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="concurrent runs (1 rank each)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per run")
    parser.add_argument("--poll-seconds", type=float, default=0.2, help="drive_all's poll")
    parser.add_argument(
        "--deadline-seconds", type=float, default=120.0, help="per side; then cancel the rest"
    )
    parser.add_argument("--baseline", metavar="REV", help="also measure git revision REV")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(measure(args.runs, args.steps, args.poll_seconds, args.deadline_seconds)))
        return
    result: dict = {
        "benchmark": "controller_reconcile",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
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
        cur = result["current"]
        result["baseline"] = {"rev": args.baseline, **base}
        result["ratios_current_over_baseline"] = {
            "controller_cpu_share": round(
                cur["controller_cpu_share"] / max(base["controller_cpu_share"], 1e-9), 3
            ),
            **{
                f"pass_ms_{k}": round(cur["pass_ms"][k] / max(base["pass_ms"][k], 1e-9), 3)
                for k in ("p50", "p90", "p99", "max")
            },
            "wall_seconds": round(cur["wall_seconds"] / max(base["wall_seconds"], 1e-9), 3),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
