"""`status`, `events --type` and `list` on a run with a million events (issue 20), in seconds.

    nice -n 10 .venv/bin/python benchmarks/status_scale.py --baseline 4c2a6ce --postgres

The store is filled directly, untimed, with batched inserts (`--events`, 1,000,000 by default) in
the mix a long run leaves: STEP_HEALTHY from `--ranks` ranks every step (the bulk), checkpoints
staged and committed every 500 steps, three generations with their state changes, WORKER_STARTED
and RESTORED per rank, two failures and their recoveries, and `--stale` rejected writes of a
fenced generation (issue 19 saw 44,000). Heartbeats are not rows: ingest writes the newest one
into the run record. Beside it, `--runs` other runs with a few events each, for `list`.

Timed, per side (this checkout's code, and with `--baseline REV` that revision's code on its own
copy of the same store, at its own schema; revision.py), in interleaved rounds (the machine is
shared):

  status_in_process   `open_backend(...).status(RUN, with_events=False)`: what `runwright status`
                      calls, `--calls` times per round in one warm process
  events_type         `.events(RUN, types=["CHECKPOINT_COMMITTED"])`: `events RUN --type X`
  list                `.list_runs(20)`: `runwright list`
  status_cli          `runwright status RUN` as a process, once per round (start-up included)
  status_cli_four_event_run   the same for one of the small runs: the process's floor

Each figure: p50 and p99 (nearest rank) of every call over every round, min and max. The plans
SQLite (EXPLAIN QUERY PLAN) or PostgreSQL (EXPLAIN) gives for every statement one status call
sends are kept beside them. This checkout's store is opened through its migrations, so the
migration of a million-event store is timed too (`migrate_seconds`). PostgreSQL with
`--postgres` (the tests' throw-away server, tests/conftest.py; this checkout only).
Results: benchmarks/results/status_scale.json.
"""

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controller_reconcile import percentile  # nearest rank, q in percent
from revision import baseline_src

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "status_scale.json"
RUN_ID = "run-long"
STATE_CHANGES = (
    ("CREATED", "QUEUED"),
    ("QUEUED", "ALLOCATING"),
    ("ALLOCATING", "STARTING"),
    ("STARTING", "RUNNING"),
)
INSERT_ROWS = 20_000
"""Rows per insert transaction while filling."""


def long_run_rows(total: int, ranks: int, stale: int) -> Iterator[list[dict[str, Any]]]:
    """The long run's rows in the order a run writes them, in lists of about INSERT_ROWS (a
    million rows at once would hold gigabytes of dicts on a shared machine)."""
    rng = random.Random(20)
    rows: list[dict[str, Any]] = []
    written = 0
    now = 1.7e9

    def add(kind: str, generation: int, step: int | None, **attributes: Any) -> None:
        n = written + len(rows)
        rows.append(
            {
                "event_id": f"{RUN_ID}:{kind}:{n}",
                "run_id": RUN_ID,
                "generation": generation,
                "type": kind,
                "step": step,
                "world_size": ranks,
                "checkpoint_id": None,
                "time_unix_s": now + n * 1e-3,
                "attributes": attributes,
            }
        )

    steps_total = (total - stale - 2_000) // ranks
    failures_at = [steps_total // 3, 2 * steps_total // 3]  # each fails once
    generation, step = 1, 0
    for before, after in STATE_CHANGES:
        add("STATE_CHANGED", generation, None, from_state=before, to_state=after, reason="")
    for rank in range(ranks):
        add("WORKER_STARTED", generation, None, rank=rank, pid=1000 + rank, node=0, host="n0")
    while step < steps_total:
        step += 1
        for rank in range(ranks):
            add(
                "STEP_HEALTHY",
                generation,
                step,
                rank=rank,
                loss=round(3.0 / (1 + step) + rng.random() * 1e-3, 6),
                step_seconds=round(0.95 + rng.random() * 0.1, 6),
                data_seconds=round(rng.random() * 0.01, 6),
                forward_backward_seconds=round(0.8 + rng.random() * 0.1, 6),
                optimizer_seconds=0.05,
                logging_seconds=0.0001,
                tokens=8192,
                samples=[step * 64 * ranks + rank * 64, step * 64 * ranks + rank * 64 + 64],
            )
        if step % 500 == 0:
            add("CHECKPOINT_STAGED", generation, step, rank=0, folder=f"{step}-c{step}")
            add("CHECKPOINT_COMMITTED", generation, step, rank=0, folder=f"{step}-c{step}")
        if failures_at and step == failures_at[0]:
            failures_at.pop(0)
            restored = step - step % 500
            add(
                "FAILURE_CLASSIFIED",
                generation,
                step,
                failure_class="crash",
                rank=1,
                message="rank 1 exited with code 1",
                signature="exit:1",
                restored_step=0,
            )
            add("STATE_CHANGED", generation, None, from_state="RUNNING", to_state="RECOVERING")
            add(
                "RECOVERY_STARTED",
                generation,
                step,
                action="restart",
                reason="crash",
                not_before_unix_s=now,
                last_step=step,
            )
            if generation == 1:  # this generation goes on reporting after its fence
                for n in range(stale):
                    add(
                        "STALE_WRITE_REJECTED",
                        generation + 1,
                        step + 1 + n // ranks,
                        rejected_type="STEP_HEALTHY",
                        writer_generation=generation,
                        run_generation=generation + 1,
                        rejected_event_id=f"x{n}",
                    )
            generation += 1
            add("STATE_CHANGED", generation, None, from_state="RECOVERING", to_state="STARTING")
            for rank in range(ranks):
                add("WORKER_STARTED", generation, None, rank=rank, pid=2000 + rank)
                add("RESTORED", generation, restored, rank=rank)
            add("STATE_CHANGED", generation, None, from_state="STARTING", to_state="RUNNING")
            add(
                "RECOVERY_SUCCEEDED",
                generation,
                restored + 1,
                restored_step=restored,
                lost_steps=step - restored,
                recovery_seconds=12.5,
            )
            step = restored
        if len(rows) >= INSERT_ROWS:
            yield rows
            written += len(rows)
            rows = []
    yield rows


def populate(url: str, ranks: int, total: int, stale: int, other_runs: int) -> None:
    """Fill a new store (created by whichever code runs this) with the long run and the rest."""
    from runwright.store import Store
    from runwright.store.schema import events, runs

    store = Store(url)
    now = time.time()
    run_rows = [
        {
            "run_id": run_id,
            "name": run_id,
            "spec_hash": "h" * 64,
            "spec": {"name": run_id, "training": {"steps": 100_000}},
            "plan": {"reasons": {"micro_batch": "fits"}},
            "generation": 3 if run_id == RUN_ID else 1,
            "state": "RUNNING" if run_id == RUN_ID else "SUCCEEDED",
            "workdir": "/w",
            "root": "/r",
            "last_step": 1,
            "created_unix_s": now - n,
            "updated_unix_s": now,
        }
        for n, run_id in enumerate([RUN_ID] + [f"run-{i:05d}" for i in range(other_runs)])
    ]
    small = [
        {
            "event_id": f"{r['run_id']}:{kind}",
            "run_id": r["run_id"],
            "generation": 1,
            "type": kind,
            "step": None,
            "world_size": 1,
            "checkpoint_id": None,
            "time_unix_s": now,
            # what the controller writes: a state change names both states
            "attributes": {"from_state": "CREATED", "to_state": "QUEUED"}
            if kind == "STATE_CHANGED"
            else {},
        }
        for r in run_rows[1:]
        for kind in ("STATE_CHANGED", "WORKER_STARTED", "STEP_HEALTHY", "RUN_FINISHED")
    ]
    with store.engine.begin() as conn:
        conn.execute(runs.insert(), run_rows)
    # The other runs' few events first, then the long run's: its rows dominate the table.
    for start in range(0, len(small), INSERT_ROWS):
        with store.engine.begin() as conn:
            conn.execute(events.insert(), small[start : start + INSERT_ROWS])
    stored = 0
    for rows in long_run_rows(total, ranks, stale):
        with store.engine.begin() as conn:
            conn.execute(events.insert(), rows)
        stored += len(rows)
    store.close()
    print(json.dumps({"long_run_events": stored, "other_events": len(small)}))


def measure(url: str, calls: int, with_plans: bool) -> None:
    """Time the reads in this process (whichever code runs it); print the figures as JSON."""
    import sqlalchemy as sa

    from runwright.cli.backend import open_backend

    os.environ["RUNWRIGHT_STORE"] = url
    backend = open_backend(None, None)
    backend.status(RUN_ID, with_events=False)  # open the store, warm the imports
    out: dict[str, Any] = {}
    for name, call in (
        ("status_in_process", lambda: backend.status(RUN_ID, with_events=False)),
        ("events_type", lambda: backend.events(RUN_ID, 0, ["CHECKPOINT_COMMITTED"])),
        ("list", lambda: backend.list_runs(20)),
    ):
        seconds = []
        for _ in range(calls):
            began = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - began)
        out[name] = seconds
    if with_plans:
        statements: list[tuple[str, Any]] = []
        engine = backend.store.engine

        def capture(conn, cursor, statement, parameters, context, executemany):
            statements.append((statement, parameters))

        sa.event.listen(engine, "before_cursor_execute", capture)
        backend.status(RUN_ID, with_events=False)
        sa.event.remove(engine, "before_cursor_execute", capture)
        explain = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
        plans = []
        with engine.connect() as conn:
            for statement, parameters in statements:
                if not statement.lstrip().upper().startswith("SELECT"):
                    continue
                rows = conn.exec_driver_sql(explain + statement, parameters).all()
                plans.append(
                    {"sql": " ".join(statement.split())[:300], "plan": [str(r[-1]) for r in rows]}
                )
        out["status_plans"] = plans
    print(json.dumps(out))


def side_python(src: Path | None) -> dict[str, str]:
    """The environment that runs `src`'s runwright (None: this checkout's)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def run_self(env: dict[str, str], *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise RuntimeError(f"{args[0]} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_cli(env: dict[str, str], url: str, run_id: str) -> float:
    code = "from runwright.cli.main import main; main()"
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, "status", run_id, "--store", url],
        env=env,
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - began


def summarise(seconds: list[float]) -> dict[str, float]:
    return {
        "p50_seconds": round(statistics.median(seconds), 5),
        "p99_seconds": round(percentile(seconds, 99), 5),
        "min_seconds": round(min(seconds), 5),
        "max_seconds": round(max(seconds), 5),
        "samples": len(seconds),
    }


def compare(args: argparse.Namespace, sides: dict[str, tuple[dict[str, str], str]]) -> dict:
    """Interleaved rounds over the sides (the order alternating); every call's seconds pooled."""
    pooled: dict[str, dict[str, list[float]]] = {s: {} for s in sides}
    plans: dict[str, Any] = {}
    names = list(sides)
    for round_index in range(args.rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for side in order:
            env, url = sides[side]
            first = round_index == 0
            figures = run_self(
                env, "measure", "--url", url, "--calls", str(args.calls), *(["--plans"] * first)
            )
            if first:
                plans[side] = figures.pop("status_plans")
            for name, seconds in figures.items():
                pooled[side].setdefault(name, []).extend(seconds)
            pooled[side].setdefault("status_cli", []).append(time_cli(env, url, RUN_ID))
            floor = time_cli(env, url, "run-00000")
            pooled[side].setdefault("status_cli_four_event_run", []).append(floor)
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    return {
        side: {
            **{name: summarise(seconds) for name, seconds in pooled[side].items()},
            "status_plans": plans[side],
        }
        for side in names
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    fill = sub.add_parser("populate")
    fill.add_argument("--url", required=True)
    read = sub.add_parser("measure")
    read.add_argument("--url", required=True)
    read.add_argument("--plans", action="store_true")
    for p in (parser, fill, read):
        p.add_argument("--events", type=int, default=1_000_000, help="events of the long run")
        p.add_argument("--ranks", type=int, default=8, help="ranks reporting every step")
        p.add_argument("--stale", type=int, default=5_000, help="rejected stale writes")
        p.add_argument("--runs", type=int, default=1_000, help="other runs, for `list`")
        p.add_argument("--calls", type=int, default=10, help="in-process calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per side")
    parser.add_argument("--baseline", help="a git revision whose code to compare with")
    parser.add_argument("--postgres", action="store_true", help="also this code on PostgreSQL")
    args = parser.parse_args()
    if args.mode == "populate":
        populate(args.url, args.ranks, args.events, args.stale, args.runs)
        return
    if args.mode == "measure":
        measure(args.url, args.calls, args.plans)
        return
    counts = ["--events", str(args.events), "--ranks", str(args.ranks), "--stale", str(args.stale)]
    counts += ["--runs", str(args.runs)]
    results: dict[str, Any] = {
        "config": vars(args),
        "machine": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version},
    }
    with tempfile.TemporaryDirectory(prefix="runwright-status-") as tmp:
        before_src = baseline_src(args.baseline, Path(tmp) / "baseline") if args.baseline else None
        first = Path(tmp) / "first.db"
        began = time.perf_counter()
        filler = side_python(before_src)
        results["filled"] = run_self(filler, "populate", "--url", f"sqlite:///{first}", *counts)
        results["fill_seconds"] = round(time.perf_counter() - began, 1)
        sides: dict[str, tuple[dict[str, str], str]] = {}
        if before_src is not None:
            before = Path(tmp) / "before.db"
            shutil.copy(first, before)
            sides["before"] = (side_python(before_src), f"sqlite:///{before}")
        after_url = f"sqlite:///{first}"
        began = time.perf_counter()
        run_self(side_python(None), "measure", "--url", after_url, "--calls", "1")
        results["migrate_seconds"] = round(time.perf_counter() - began, 2)
        sides["after"] = (side_python(None), after_url)
        results["sqlite"] = compare(args, sides)
    if args.postgres:
        results["postgresql"] = postgres(args, counts)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


def postgres(args: argparse.Namespace, counts: list[str]) -> dict | str:
    import sqlalchemy as sa
    from control_plane import postgres_urls

    with postgres_urls() as fresh:
        if fresh is None:
            return "skipped: no PostgreSQL binaries"
        url = fresh()
        env = side_python(None)
        began = time.perf_counter()
        filled = run_self(env, "populate", "--url", url, *counts)
        fill_seconds = round(time.perf_counter() - began, 1)
        with sa.create_engine(url).begin() as conn:
            conn.exec_driver_sql("ANALYZE")  # what autovacuum does soon after a bulk load
        return {
            "filled": filled,
            "fill_seconds": fill_seconds,
            **compare(args, {"after": (env, url)}),
        }


if __name__ == "__main__":
    main()
