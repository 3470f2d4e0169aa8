"""`runwright server` under load: N concurrent clients polling a run's status and following its
events while it trains, against the same run without them (issue 14).

    nice -n 10 .venv/bin/python benchmarks/server.py                 # 16 clients, SQLite
    nice -n 10 .venv/bin/python benchmarks/server.py --clients 32 --steps 600

One server (`runwright server`, the controller beside it) on a fresh root and SQLite store. Two
runs of the skeleton worker (DDP over gloo, `--ranks` ranks, `--steps` steps), one after the
other: the first with no client but the submitter, the second with `--clients` clients started
as soon as it is RUNNING: half poll GET /v1/runs/{id} (the status summary) back to back, half
follow GET /v1/runs/{id}/events?follow=true (server-sent events); the first run has one
follower, the baseline of the event lag. A poll is what `runwright status RUN` asks
(`events=false`: the summary without the event log). The clients run as asyncio
tasks on one httpx.AsyncClient in a process of their own, so the measuring does not share an
interpreter with the server.

Figures (JSON, benchmarks/results/server.json):
  status_latency_ms   p50 / p99 / max of the status requests (request sent -> body read)
  requests_per_second status requests answered (200) per wall second, all pollers together
  status_errors       answers other than 200, by status (503: the store was busy past its timeout)
  event_lag_ms        p50 / p99 of (received by a follower - the event's own time), STEP_HEALTHY,
                      per run: the worker's channel, the controller's ingest and the stream's
                      poll; unloaded (one follower) against loaded (all of them)
  step_seconds        median step time of each run, from its STEP_HEALTHY events' times (rank 0)
  step_time_ratio     loaded / unloaded median step time: the server must not slow training
  load_average        the 1-minute load average at the end of each run (the machine is shared)
"""

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

HERE = Path(__file__).resolve().parent
SKELETON = HERE.parent / "src" / "runwright" / "demo" / "skeleton.yaml"
RESULTS = HERE / "results" / "server.json"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _spec(steps: int, ranks: int) -> dict:
    spec = yaml.safe_load(SKELETON.read_text())
    spec["training"]["steps"] = steps
    spec["resources"]["devices_per_node"] = ranks
    spec["training"]["global_batch_samples"] = 8 * ranks
    spec["budget"]["wall_seconds"] = 3600
    return spec


def _wait(client: httpx.Client, run_id: str, states: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = client.get(f"/v1/runs/{run_id}", params={"events": "false"}).json()["state"]
        if state in states:
            return state
        time.sleep(0.2)
    raise TimeoutError(f"run {run_id} not in {states} within {timeout} s")


def _step_seconds(client: httpx.Client, run_id: str) -> float:
    events = client.get(f"/v1/runs/{run_id}/events", params={"type": "STEP_HEALTHY"}).json()
    times = sorted(e["time_unix_s"] for e in events if e["attributes"].get("rank", 0) == 0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps)


async def _load(
    url: str, token: str, run_id: str, pollers: int, followers: int, stop_file: Path
) -> dict:
    latencies: list[float] = []
    lags: list[float] = []
    errors: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=pollers + followers + 4)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as ac:

        async def poll() -> None:
            while not stop_file.exists():
                start = time.perf_counter()
                response = await ac.get(f"/v1/runs/{run_id}", params={"events": "false"})
                await response.aread()
                if response.status_code == 200:
                    latencies.append((time.perf_counter() - start) * 1000)
                else:
                    errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1

        async def follow() -> None:
            params = {"follow": "true", "type": "STEP_HEALTHY"}
            async with ac.stream("GET", f"/v1/runs/{run_id}/events", params=params) as response:
                async for line in response.aiter_lines():
                    if stop_file.exists():
                        return
                    if line.startswith("data: {") and '"seq"' in line:
                        event = json.loads(line[6:])
                        lags.append((time.time() - event["time_unix_s"]) * 1000)

        started = time.monotonic()
        tasks = [poll() for _ in range(pollers)] + [follow() for _ in range(followers)]
        await asyncio.gather(*tasks, return_exceptions=False)
        wall = time.monotonic() - started
    return {"latencies": latencies, "lags": lags, "wall_seconds": wall, "errors": errors}


def _inner(args: argparse.Namespace) -> None:
    stop = Path(args.stop_file)
    found = asyncio.run(_load(args.url, args.token, args.run, args.pollers, args.followers, stop))
    Path(args.out).write_text(json.dumps(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--store", default=None, help="Store URL (default: a fresh SQLite file).")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url"), parser.add_argument("--token"), parser.add_argument("--run")
    parser.add_argument("--stop-file"), parser.add_argument("--out")
    parser.add_argument("--pollers", type=int), parser.add_argument("--followers", type=int)
    args = parser.parse_args()
    if args.inner:
        _inner(args)
        return
    from runwright.access.base import local_actor
    from runwright.access.service import Access
    from runwright.store import Store

    base = Path(tempfile.mkdtemp(prefix="runwright-server-bench-"))
    root = base / "root"
    store_url = args.store or f"sqlite:///{base / 'state.db'}"
    store = Store(store_url)
    token = Access(store, root, local_actor()).bootstrap_admin("bench", "default", 1)["token"]
    store.close()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(base / "server.log", "ab")  # noqa: SIM115 (open for the server's lifetime)
    server = subprocess.Popen(
        [sys.executable, "-m", "runwright.cli.main", "server", "--port", str(port),
         "--root", str(root), "--store", store_url],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start")
            time.sleep(0.2)
        results: dict = {
            "command": " ".join(["benchmarks/server.py", *sys.argv[1:]]),
            "clients": args.clients,
            "steps": args.steps,
            "ranks": args.ranks,
            "store": "sqlite" if args.store is None else "postgresql",
        }
        for phase in ("unloaded", "loaded"):
            run = client.post("/v1/runs", json={"spec": _spec(args.steps, args.ranks)}).json()
            run_id = run["run_id"]
            _wait(client, run_id, {"RUNNING", "SUCCEEDED"}, 600)
            # Unloaded: one follower only, the baseline of the event lag (the controller's
            # ingest and the stream's poll); loaded: the clients, half polling, half following.
            pollers = args.clients // 2 if phase == "loaded" else 0
            followers = args.clients - args.clients // 2 if phase == "loaded" else 1
            stop, out = base / f"stop-{phase}", base / f"load-{phase}.json"
            load = subprocess.Popen(
                [sys.executable, __file__, "--inner", "--url", url, "--token", token,
                 "--run", run_id, "--pollers", str(pollers), "--followers", str(followers),
                 "--stop-file", str(stop), "--out", str(out)],
            )  # fmt: skip
            state = _wait(client, run_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, 3600)
            stop.touch()
            load.wait(120)
            found = json.loads(out.read_text())
            lags = found["lags"]
            results.setdefault("event_lag_ms", {})[phase] = {
                "p50": _pct(lags, 0.5),
                "p99": _pct(lags, 0.99),
                "events": len(lags),
            }
            if phase == "loaded":
                lat = found["latencies"]
                results["status_latency_ms"] = {
                    "p50": _pct(lat, 0.50),
                    "p99": _pct(lat, 0.99),
                    "max": max(lat) if lat else None,
                    "requests": len(lat),
                }
                results["requests_per_second"] = len(lat) / found["wall_seconds"]
                results["status_errors"] = found["errors"]
            results.setdefault("step_seconds", {})[phase] = _step_seconds(client, run_id)
            results.setdefault("run_state", {})[phase] = state
            results.setdefault("load_average", {})[phase] = os.getloadavg()[0]
        steps = results["step_seconds"]
        results["step_time_ratio"] = steps["loaded"] / steps["unloaded"]
    finally:
        server.terminate()
        server.wait(60)
        log.close()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
