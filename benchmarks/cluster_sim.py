"""A simulated 1,024-rank run at one step per second per rank: does the controller keep up?

    nice -n 10 .venv/bin/python benchmarks/cluster_sim.py
    nice -n 10 .venv/bin/python benchmarks/cluster_sim.py --ranks 1024 --seconds 90 --postgres

No torch, no training: a writer process plays every rank through the real worker path,
`runwright.runtime.ChannelWriter`, one channel file per rank: a STEP_HEALTHY per rank per second
(`--step-seconds`, with the attributes the step loop sends: loss, phase seconds, tokens, sample
range), the ranks' steps spread over the second as a real group's finish unevenly, and a
HEARTBEAT from every rank every `--heartbeat-seconds` (2 s, the runtime's default), as the
heartbeat thread sends it. Lines are written and flushed as the runtime does; their fsync is off
(`fsync_events=False`), since one process playing 1,024 ranks would serialise fsyncs that real
ranks issue in parallel on their own nodes.

The controller side is the reconcile pass's ingest, as `Controller._ingest_and_watch` runs it: an
`Ingestor` polled with the pass's `INGEST_SLICE_SECONDS` (0.5 s) deadline, every message fed to a
real `Watchdog` (beat, step), then `Watchdog.check()`, the run record and the run view read
(`RunLogs.of`), and `--pass-seconds` (0.2 s, the controller's `poll_seconds`) of sleep.

Reported, for `--seconds` of writing and then until the channel is drained:
  backlog     every second: bytes in the channel files not yet read, and messages written but not
              yet ingested; its maximum, and its value at the end of the writing
  lag         per message, when its batch was stored minus when the rank wrote it: p50, p99, max
  cpu         the controller process's CPU seconds over the wall seconds (share of one core),
              and the writer's for scale
  watchdog    any verdict it gave (a false hang would be one)
SQLite always; PostgreSQL with `--postgres` when its binaries are present (the tests' throw-away
server, tests/conftest.py, fsync=off). Results: benchmarks/results/cluster_sim.json.
"""

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from controller_reconcile import percentile  # nearest rank, q in percent

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "cluster_sim.json"
RUN_ID = "sim-run"


def write_ranks(root: str, args: argparse.Namespace, start: float, written: Any) -> None:
    """The ranks: until start + seconds, each due message written in time order."""
    import heapq

    from runwright.layout import run_paths
    from runwright.protocol import HEARTBEAT
    from runwright.runtime import ChannelWriter

    channel = run_paths(Path(root), RUN_ID).channel
    writers = [
        ChannelWriter(channel, generation=1, rank=r, fsync_events=False) for r in range(args.ranks)
    ]
    # (due time, rank, kind, step): rank r's steps end r/ranks of a step after rank 0's.
    due = [(start + (r / args.ranks) * args.step_seconds, r, "step", 1) for r in range(args.ranks)]
    due += [
        (start + (r / args.ranks) * args.heartbeat_seconds, r, "beat", 0) for r in range(args.ranks)
    ]
    heapq.heapify(due)
    end = start + args.seconds
    count = 0
    while due and due[0][0] < end:
        when, rank, kind, step = heapq.heappop(due)
        wait = when - time.time()
        if wait > 0:
            written.value = count
            time.sleep(wait)
        if kind == "step":
            writers[rank].send(
                "STEP_HEALTHY",
                step=step,
                event_id=f"g1-r{rank}-step{step}",
                world_size=args.ranks,
                attributes={
                    "loss": 3.0 / (1 + step),
                    "step_seconds": args.step_seconds,
                    "data_seconds": 0.002,
                    "forward_backward_seconds": 0.9,
                    "optimizer_seconds": 0.05,
                    "logging_seconds": 0.0001,
                    "tokens": 8192,
                    "samples": [step * 64 * args.ranks + rank * 64, (step + 1) * 64 * args.ranks],
                },
            )
            heapq.heappush(due, (when + args.step_seconds, rank, kind, step + 1))
        else:
            writers[rank].send(HEARTBEAT)
            heapq.heappush(due, (when + args.heartbeat_seconds, rank, kind, 0))
        count += 1
    written.value = count
    for writer in writers:
        writer.close()


def unread_bytes(reader: Any) -> int:
    """The channel's backlog in bytes; computed here for a `--baseline` reader without
    `unread_bytes` (its cursor is the same `_offsets`)."""
    if hasattr(reader, "unread_bytes"):
        return reader.unread_bytes()
    files = reader.channel_dir.glob("gen*-rank*.jsonl")
    return sum(max(0, p.stat().st_size - reader._offsets.get(p, 0)) for p in files)


def new_store(url: str, root: Path):
    # imported here: the writer processes this module spawns never load the store
    from control_plane import new_store as store_with_run

    return store_with_run(url, root, RUN_ID)


def simulate(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from runwright.control.controller import INGEST_SLICE_SECONDS
    from runwright.control.ingest import Ingestor
    from runwright.control.runlog import RunLogs
    from runwright.control.watchdog import Watchdog
    from runwright.spec import RecoverySpec

    with tempfile.TemporaryDirectory(prefix="runwright-sim-") as tmp:
        root = Path(tmp)
        store = new_store(url, root)
        run = store.get_run(RUN_ID)
        ingestor = Ingestor(store, run)
        logs = RunLogs(store)
        watchdog = Watchdog(RecoverySpec(), args.ranks)
        verdicts: list[str] = []
        lags: list[float] = []
        ingested = 0

        def observe(message, _outcome) -> None:
            nonlocal ingested
            ingested += 1
            # Called once the message's batch is stored: now is when the store had it.
            lags.append(time.time() - message.time_unix_s)
            watchdog.beat(message.rank)
            if message.type == "STEP_HEALTHY" and message.step is not None:
                watchdog.step(message.rank, message.step)

        written = mp.Value("q", 0)
        start = time.time() + 1.0  # the writer's files open before the clock starts
        writer = mp.get_context("fork").Process(
            target=write_ranks, args=(str(root), args, start, written)
        )
        writer.start()
        cpu_began = resource.getrusage(resource.RUSAGE_SELF)
        wall_began = time.monotonic()
        backlog: list[dict[str, float]] = []
        next_sample = start
        passes = 0
        while True:
            writing = writer.is_alive()
            ingestor.poll(observe, until=time.monotonic() + INGEST_SLICE_SECONDS)
            verdict = watchdog.check()
            if verdict is not None and time.time() > start + 10:
                verdicts.append(f"{verdict.failure_class}: {verdict.detail}")
            store.get_run(RUN_ID)
            logs.of(RUN_ID)
            passes += 1
            now = time.time()
            if now >= next_sample:
                unread = unread_bytes(ingestor.reader)
                backlog.append(
                    {
                        "second": round(now - start, 1),
                        "unread_bytes": unread,
                        "unread_messages": written.value - ingested,
                    }
                )
                next_sample += 1.0
            if not writing and written.value - ingested <= 0:
                break
            time.sleep(args.pass_seconds)
        wall = time.monotonic() - wall_began
        cpu_end = resource.getrusage(resource.RUSAGE_SELF)
        writer.join()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = store.events(RUN_ID, types=["STEP_HEALTHY"])
        stored = len(rows)
        reports = sum(len(r.attributes.get("ranks") or [0]) for r in rows)  # folded or not
        store.close()
    cpu = (cpu_end.ru_utime - cpu_began.ru_utime) + (cpu_end.ru_stime - cpu_began.ru_stime)
    during = [b for b in backlog if b["second"] <= args.seconds]
    return {
        "messages_written": written.value,
        "messages_ingested": ingested,
        "step_events_stored": stored,
        "step_reports_stored": reports,
        "step_rows_per_second": round(stored / wall, 1),
        "messages_per_second_written": round(written.value / args.seconds),
        "drained_seconds_after_writing": round(max(0.0, wall - 1.0 - args.seconds), 2),
        "passes": passes,
        "backlog_max_unread_bytes": max((b["unread_bytes"] for b in during), default=0),
        "backlog_max_unread_messages": max((b["unread_messages"] for b in during), default=0),
        "backlog_at_end_of_writing": during[-1] if during else None,
        "lag_p50_seconds": round(statistics.median(lags), 3),
        "lag_p99_seconds": round(percentile(lags, 99), 3),
        "lag_max_seconds": round(max(lags), 3),
        "controller_cpu_seconds": round(cpu, 2),
        "controller_wall_seconds": round(wall, 2),
        "controller_cpu_share_of_one_core": round(cpu / wall, 3),
        "writer_cpu_seconds": round(children.ru_utime + children.ru_stime, 2),
        "watchdog_verdicts": verdicts[:5],
        "backlog_each_second": backlog,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the ranks write")
    parser.add_argument("--step-seconds", type=float, default=1.0, help="each rank's step time")
    parser.add_argument("--heartbeat-seconds", type=float, default=2.0)
    parser.add_argument("--pass-seconds", type=float, default=0.2, help="sleep between passes")
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "config": vars(args),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    with tempfile.TemporaryDirectory(prefix="runwright-sim-db-") as tmp:
        results["sqlite"] = simulate(f"sqlite:///{Path(tmp) / 'state.db'}", args)
        print(json.dumps({k: v for k, v in results["sqlite"].items() if "each" not in k}))
    if args.postgres:
        from control_plane import postgres_urls

        with postgres_urls() as fresh:
            if fresh is None:
                results["postgresql"] = "skipped: no PostgreSQL binaries"
            else:
                results["postgresql"] = simulate(fresh(), args)
                print(
                    json.dumps({k: v for k, v in results["postgresql"].items() if "each" not in k})
                )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
