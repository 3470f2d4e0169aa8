"""CLI start-up: wall and CPU seconds of the commands a user types most (issue 19).

    .venv/bin/python benchmarks/cli_startup.py                       # this code
    .venv/bin/python benchmarks/cli_startup.py --baseline 5251656    # and a git revision

Every command runs as a fresh process, the way a shell runs it, against a root holding one run
with `--events` events (2,000 by default: state changes, heartbeats and steps, as a short run
leaves them):

  help      runwright --help
  version   runwright --version
  list      runwright list
  status    runwright status RUN
  events    runwright events RUN          (output to /dev/null)
  validate  runwright spec validate examples/skeleton.yaml
  floor     no runwright at all: the libraries the read commands stand on (typer, rich, pydantic,
            SQLAlchemy) imported, the same SQLite store opened and counted, one pydantic model
            built and validated: what any CLI on these libraries pays before its own code

Each side (this checkout, and `--baseline REV` unpacked by `git archive`, benchmarks/revision.py)
runs `python -c "from runwright.cli.main import main; main()" ARGS` with its own `src/` first on
PYTHONPATH, so both sides use this checkout's environment; each side gets its own root, populated
by its own code. Commands and sides are interleaved round by round (`--rounds`, 15), so a busy
machine slows both alike. Per command: median, p90 and min wall seconds, median CPU seconds (user
+ system of the child, from `resource.getrusage(RUSAGE_CHILDREN)`), and the ratio of this code's
median to the baseline's. The issue's target is under 1 s of wall time on this machine for
`--help`, `status`, `list` and `events`; `meets_target` reads the median, `over_floor_seconds`
subtracts the floor's median.
Results: benchmarks/results/cli_startup.json.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from revision import REPO, baseline_src

RESULTS = REPO / "benchmarks" / "results" / "cli_startup.json"
TARGET_SECONDS = 1.0
TARGET_COMMANDS = ("help", "status", "list", "events")
RUN_ID = "bench-startup-run"

POPULATE = """
import sys, time
from runwright.store import NewEvent, Store
root, events = sys.argv[1], int(sys.argv[2])
store = Store(f"sqlite:///{root}/state.db")
store.create_run(run_id=sys.argv[3], name="bench", spec={}, spec_hash="0" * 64, plan={},
                 workdir=root, root=root, state="RUNNING")
now = time.time()
kinds = ["STATE_CHANGED", "HEARTBEAT", "STEP_HEALTHY", "STEP_HEALTHY"]
for i in range(events):
    kind = kinds[i % len(kinds)]
    attributes = {"from_state": "STARTING", "to_state": "RUNNING"} if kind == "STATE_CHANGED" \\
        else {"rank": i % 2, "loss": 1.0 / (i + 1)}
    store.append_event(NewEvent(event_id=f"e{i}", run_id=sys.argv[3], generation=0, type=kind,
                                step=i // 4, time_unix_s=now + i, attributes=attributes),
                       fenced=False)
store.close()
"""

RUNNER = "from runwright.cli.main import main; main()"
FLOOR = """
import sys
import pydantic, rich.console, sqlalchemy, typer
engine = sqlalchemy.create_engine("sqlite:///" + sys.argv[1] + "/state.db")
with engine.connect() as conn:
    conn.exec_driver_sql("SELECT count(*) FROM events").all()
class Row(pydantic.BaseModel):
    seq: int
Row(seq=1)
"""
FLOOR_COMMAND = "floor"


def commands() -> dict[str, list[str]]:
    return {
        "help": ["--help"],
        "version": ["--version"],
        "list": ["list"],
        "status": ["status", RUN_ID],
        "events": ["events", RUN_ID],
        "validate": ["spec", "validate", str(REPO / "examples" / "skeleton.yaml")],
        FLOOR_COMMAND: [],
    }


class Side:
    """One version of the code: its src folder and its own populated root."""

    def __init__(self, name: str, src: Path, root: Path, events: int) -> None:
        self.name, self.src, self.root = name, src, root
        self.env = {
            **os.environ,
            "PYTHONPATH": str(src),
            "RUNWRIGHT_ROOT": str(root),
            "COLUMNS": "100",
        }
        self.env.pop("RUNWRIGHT_STORE", None)
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-c", POPULATE, str(root), str(events), RUN_ID],
            env=self.env,
            check=True,
        )
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}
        self.unsupported: set[str] = set()
        """Commands this version does not have (a baseline without `--version`)."""

    def imported_from(self) -> str:
        out = subprocess.run(
            [sys.executable, "-c", "import runwright; print(runwright.__file__)"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    def time(self, name: str, argv: list[str]) -> None:
        if name in self.unsupported:
            return
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        program = [FLOOR, str(self.root)] if name == FLOOR_COMMAND else [RUNNER, *argv]
        done = subprocess.run(
            [sys.executable, "-c", *program],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.root,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode == 2 and b"No such option" in done.stderr:
            self.unsupported.add(name)
            return
        if done.returncode != 0:
            raise SystemExit(
                f"{self.name}: runwright {' '.join(argv)} exited {done.returncode}: "
                f"{done.stderr.decode()[-2000:]}"
            )
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        self.wall.setdefault(name, []).append(wall)
        self.cpu.setdefault(name, []).append(cpu)

    def figures(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, walls in self.wall.items():
            ordered = sorted(walls)
            out[name] = {
                "median_seconds": round(statistics.median(walls), 4),
                "p90_seconds": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 4),
                "min_seconds": round(ordered[0], 4),
                "median_cpu_seconds": round(statistics.median(self.cpu[name]), 4),
                "rounds": len(walls),
            }
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--baseline", metavar="REV", help="also measure git revision REV")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rw-cli-startup-") as tmp:
        tmp_path = Path(tmp)
        sides = [Side("current", REPO / "src", tmp_path / "current", args.events)]
        if args.baseline:
            src = baseline_src(args.baseline, tmp_path / "baseline-src")
            sides.append(Side("baseline", src, tmp_path / "baseline", args.events))
        for side in sides:  # one untimed pass: compile .pyc files, warm the page cache
            for name, argv in commands().items():
                side.time(name, argv)
            side.wall.clear()
            side.cpu.clear()
        for _ in range(args.rounds):
            for name, argv in commands().items():
                for side in sides:
                    side.time(name, argv)
        result: dict = {
            "benchmark": "cli_startup",
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
            "events_in_run": args.events,
            "target_seconds": TARGET_SECONDS,
        }
        for side in sides:
            figures = side.figures()
            result[side.name] = {
                "imported_from": side.imported_from(),
                "commands": figures,
                "meets_target": {
                    c: figures[c]["median_seconds"] < TARGET_SECONDS for c in TARGET_COMMANDS
                },
                "unsupported": sorted(side.unsupported),
                # What runwright's own code adds to the libraries' floor, per command.
                "over_floor_seconds": {
                    c: round(
                        figures[c]["median_seconds"] - figures[FLOOR_COMMAND]["median_seconds"], 4
                    )
                    for c in figures
                    if c != FLOOR_COMMAND
                },
            }
        if args.baseline:
            result["baseline"]["rev"] = args.baseline
            cur, base = result["current"]["commands"], result["baseline"]["commands"]
            result["ratios_current_over_baseline"] = {
                c: round(cur[c]["median_seconds"] / base[c]["median_seconds"], 3)
                for c in cur
                if c in base
            }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
