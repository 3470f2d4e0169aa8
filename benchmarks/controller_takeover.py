"""Multi-controller takeover time against the lease expiry (issue 12).

    nice -n 10 .venv/bin/python benchmarks/controller_takeover.py
    nice -n 10 .venv/bin/python benchmarks/controller_takeover.py --leases 3 6 12 --repeats 5

For each backend (PostgreSQL, the tests' throw-away server, when its binaries are installed; and
SQLite) and each lease duration in `--leases`: a fresh store and root, one run of the paced worker
(src/runwright/demo/paced_worker.py, 1 rank under torchrun, no torch in the rank; long enough to
outlast every repetition) and two `runwright controller --daemon --lease-seconds L` processes.
`--repeats` times, once the group trains and a standby has swept the store: the lease holder is
SIGKILLed, the takeover measured, and a new controller started in the dead one's place (every kill
finds a standby that is up, as a deployment's spare controller is; the run and its group go on
through all of them). Measured, on the database's clock (the same host's clock for both backends
here; the new holder's events carry its wall clock, the same one):

  remaining_seconds  how much of the dead holder's lease was left at the kill (its last renewal
                     came at most one pass before): the soonest anyone may take the run
  takeover_seconds   kill -> the new holder's acquire (the lease's acquired_unix_s): no
                     controller drove the run for this long
  adopted_seconds    kill -> WORKER_GROUP_ADOPTED: the new holder's first pass over the run
                     under its lease, the live group adopted by its pid file
  after_expiry_seconds  takeover_seconds - remaining_seconds: how late after the expiry the
                     standby noticed (its pass interval, 0.2 s, plus a pass)
  takeover_over_lease   takeover_seconds / L

Scenario `other_node` (the default, every lease): the two controllers have different node ids
(RUNWRIGHT_CONTROLLER_NODE), so each knows the other gone only by its lease running out, as
controllers on two hosts do. Scenario `same_node` (`--same-node-lease`, one lease): the two share
a node id, so the standby sees the dead holder's process gone and takes the run over at once,
without waiting out the lease (what a controller restarted on the holder's own host does).

Per cell: every sample, and median, min, max and the population standard deviation. The machine
is shared with other engineers' suites: each sample carries the 1-minute load average.
Results: benchmarks/results/controller_takeover.json.
"""

import argparse
import contextlib
import itertools
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import sqlalchemy as sa
import yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "controller_takeover.json"
SKELETON = REPO / "src" / "runwright" / "demo" / "skeleton.yaml"
PACED_WORKER = REPO / "src" / "runwright" / "demo" / "paced_worker.py"
STEP_SECONDS = 0.25
BOUND_SECONDS = 300.0
"""Longest wait for any one stage (daemon start-up under load, a launch, the takeover)."""


def run_mapping(steps: int) -> dict:
    data = yaml.safe_load(SKELETON.read_text())
    data["name"] = "bench-takeover"
    data["training"]["steps"] = steps
    data["resources"]["devices_per_node"] = 1
    data["code"] = {"entrypoint": str(PACED_WORKER), "args": [f"--step-seconds={STEP_SECONDS}"]}
    return data


class Daemon:
    """`runwright controller --daemon --lease-seconds L` as if on node `node`, logging to a file."""

    def __init__(self, root: Path, url: str, node: str, lease_seconds: float, n: int) -> None:
        from runwright.control.leasing import NODE_ENV

        argv = [sys.executable, "-m", "runwright.cli.main", "controller", "--daemon", "--root",
                str(root), "--store", url, "--lease-seconds", str(lease_seconds)]  # fmt: skip
        self.log = root / f"controller-{n}.log"
        env = {**os.environ, NODE_ENV: node, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def standing_by(self) -> bool:
        """It has swept the store once and found the run held by another controller."""
        return "stands by" in self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(condition: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + BOUND_SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(f"no {what} within {BOUND_SECONDS:.0f} s")


def takeovers(url: str, lease_seconds: float, same_node: bool, repeats: int) -> list[dict]:
    """One run and two controllers; `repeats` times: kill the lease holder, measure the
    takeover, and start a new standby in the dead one's place (ready once it has swept the
    store), so every kill finds a standby that is up, as a deployment's spare controller is."""
    from runwright.control.controller import Controller
    from runwright.control.executors.local import LocalExecutor
    from runwright.control.leasing import holder_pid
    from runwright.spec import spec_from_mapping
    from runwright.store import Store

    root = Path(tempfile.mkdtemp(prefix="rw-takeover-"))
    store = Store(url)
    # Long enough for every repetition, its replacement controller's start-up included.
    steps = math.ceil(repeats * (lease_seconds + BOUND_SECONDS / 4) / STEP_SECONDS)
    run, _ = Controller(store, root).submit(spec_from_mapping(run_mapping(steps)), root)
    names = itertools.count()

    def start() -> Daemon:
        n = next(names)
        return Daemon(root, url, "bench-node" if same_node else f"bench-host-{n}", lease_seconds, n)

    def events(type_: str) -> list:
        return store.events(run.run_id, types=[type_])

    def standby_ready(daemons: list[Daemon]) -> bool:
        """Some controller holds the run and every other one has swept the store since."""
        lease, now = store.leases.get(run.run_id)
        if lease is None or not lease.live(now) or lease.holder is None:
            return False
        others = [d for d in daemons if d.proc.pid != holder_pid(lease.holder)]
        return len(others) == len(daemons) - 1 and all(d.standing_by() for d in others)

    daemons = [start(), start()]
    samples = []
    try:
        wait_for(lambda: events("STEP_HEALTHY"), "first step")
        for _ in range(repeats):
            wait_for(lambda: standby_ready(daemons), "a standby")
            lease, _ = store.leases.get(run.run_id)
            assert lease is not None and lease.holder is not None
            holder = next(d for d in daemons if d.proc.pid == holder_pid(lease.holder))
            os.kill(holder.proc.pid, signal.SIGKILL)
            killed_unix_s = time.time()
            killed_db_unix_s = store.leases.now_unix_s()
            holder.proc.wait()
            daemons.remove(holder)
            adopted = wait_for(
                lambda after=killed_unix_s: [
                    e for e in events("WORKER_GROUP_ADOPTED") if e.time_unix_s > after
                ],
                "adoption",
            )
            (takeover,) = [
                e for e in events("CONTROLLER_TAKEOVER") if e.attributes["epoch"] == lease.epoch + 1
            ]
            new, _ = store.leases.get(run.run_id)
            assert new is not None and new.acquired_unix_s is not None
            # The dead holder's last renewal (its lease ran from there), from the takeover.
            renewed = new.acquired_unix_s - takeover.attributes["uncontrolled_seconds"]
            remaining = renewed + takeover.attributes["old_lease_seconds"] - killed_db_unix_s
            took = new.acquired_unix_s - killed_db_unix_s
            sample = {
                "remaining_seconds": round(remaining, 3),
                "takeover_seconds": round(took, 3),
                "adopted_seconds": round(adopted[0].time_unix_s - killed_unix_s, 3),
                "after_expiry_seconds": round(took - remaining, 3),
                "takeover_over_lease": round(took / lease_seconds, 3),
                "reason": takeover.attributes["reason"],
                "load_average_1m": round(os.getloadavg()[0], 2),
            }
            print(f"  lease {lease_seconds:g} s, {'same' if same_node else 'other'} node: "
                  f"{sample}", flush=True)  # fmt: skip
            samples.append(sample)
            daemons.append(start())
    except BaseException:
        print(f"  failed; the controllers' logs are in {root}", flush=True)
        raise
    finally:
        for d in daemons:
            d.stop()
        LocalExecutor().kill_generations_below(root, run.run_id, 1_000_000)
        store.close()
    shutil.rmtree(root, ignore_errors=True)
    return samples


def spread(samples: list[dict], key: str) -> dict:
    values = [s[key] for s in samples]
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "stdev": round(statistics.pstdev(values), 3),
    }


def cell(fresh_url: Callable[[], str], lease_seconds: float, same_node: bool, repeats: int):
    samples = takeovers(fresh_url(), lease_seconds, same_node, repeats)
    keys = ("remaining_seconds", "takeover_seconds", "adopted_seconds", "after_expiry_seconds",
            "takeover_over_lease", "load_average_1m")  # fmt: skip
    return {
        "lease_seconds": lease_seconds,
        "scenario": "same_node" if same_node else "other_node",
        **{key: spread(samples, key) for key in keys},
        "samples": samples,
    }


def measure_backend(fresh_url: Callable[[], str], args: argparse.Namespace) -> list[dict]:
    cells = [cell(fresh_url, lease, False, args.repeats) for lease in args.leases]
    if args.same_node_lease:
        cells.append(cell(fresh_url, args.same_node_lease, True, args.repeats))
    return cells


@contextlib.contextmanager
def postgres_urls() -> Iterator[Callable[[], str] | None]:
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import find_bindir, postgres_server  # the tests' throw-away server

    if find_bindir() is None:
        yield None
        return
    with postgres_server() as server:
        counter = itertools.count(1)

        def fresh() -> str:
            name = f"takeover{next(counter)}"
            admin = sa.create_engine(server.url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {name}")
            admin.dispose()
            return server.url.rsplit("/", 1)[0] + f"/{name}"

        yield fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leases", type=float, nargs="+", default=[3.0, 6.0, 12.0],
                        help="lease durations in seconds (other-node scenario)")  # fmt: skip
    parser.add_argument("--same-node-lease", type=float, default=12.0,
                        help="lease of the same-node scenario; 0 leaves it out")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=5, help="takeovers per cell")
    parser.add_argument("--backends", nargs="+", default=["postgresql", "sqlite"],
                        choices=["postgresql", "sqlite"])  # fmt: skip
    args = parser.parse_args()
    results: dict = {
        "command": " ".join(["benchmarks/controller_takeover.py", *sys.argv[1:]]),
        "config": {**vars(args), "step_seconds": STEP_SECONDS, "poll_seconds": 0.2},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    started = time.monotonic()
    if "postgresql" in args.backends:
        with postgres_urls() as fresh:
            print("postgresql", flush=True)
            results["postgresql"] = (
                measure_backend(fresh, args) if fresh else "skipped: no PostgreSQL binaries"
            )
    if "sqlite" in args.backends:
        with tempfile.TemporaryDirectory(prefix="rw-takeover-db-") as tmp:
            counter = itertools.count(1)
            print("sqlite", flush=True)
            results["sqlite"] = measure_backend(
                lambda: f"sqlite:///{Path(tmp) / f'state{next(counter)}.db'}", args
            )
    results["wall_seconds"] = round(time.monotonic() - started, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
