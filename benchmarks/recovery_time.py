"""Recovery time with a warm standby against a cold restart and a cold start, in one run (issue 20).

    PYTHONPATH=$PWD/src .venv/bin/python benchmarks/recovery_time.py
    PYTHONPATH=$PWD/src .venv/bin/python benchmarks/recovery_time.py --failures 8

One run of the reference trainer (the demo's model on the tiny dataset, 2 ranks under torchrun,
gloo) with `recovery.warm_standby: true`, driven by a controller in this process. A rank chosen at
random is SIGKILLed from outside `--failures` times, at a random moment between steps, each time
once the generation trains (`--steps-between` steps past its restore) and its standby is ready.
Failures alternate: "warm" ones hit the run as it is; before a "cold" one the standby's processes
are killed first, so that restart starts processes as it would without a standby. Both kinds
share everything else: the run, the machine's load over time, the checkpoint interval.

Per failure (wall clock of this machine, seconds):
  rto              the kill -> the first step past the restored one (its STEP_HEALTHY time)
  detect           the kill -> FAILURE_CLASSIFIED
  backoff          FAILURE_CLASSIFIED -> WORKER_GROUP_LAUNCHED (the class's backoff, held at 1 s
                   for every failure here, and the controller's pass)
  start_to_restore WORKER_GROUP_LAUNCHED -> RESTORED (processes, imports, init, checkpoint load)
  restore_to_step  RESTORED -> the first step past it
  lost_steps       steps trained again (the kill's step less the restored one)
The cold-start floor: the run's first launch -> its first step (a cold start with no restore).
Figures: medians per kind, and warm/cold and warm/floor ratios.
Results: benchmarks/results/recovery_time.json.
"""

import argparse
import json
import os
import platform
import random
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from runwright.control.controller import Controller
from runwright.control.executors.local_group import generation_processes
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.spec import spec_from_mapping
from runwright.store import Store

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "recovery_time.json"
TINY_GPT = REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml"
TINY_DATA = REPO / "examples" / "data" / "tiny.yaml"
WORLD = 2
WAIT_SECONDS = 300.0


def spec(dataset, steps: int, every: int) -> dict:
    data = yaml.safe_load(TINY_GPT.read_text())
    data["name"] = "recovery-time"
    data["model"]["vocab_size"] = dataset.manifest.tokenizer.vocab_size
    data["data"].update(
        dataset=str(dataset.folder),
        sequence_length=64,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=8, micro_batch_size=4, steps=steps)
    data["checkpoint"].update(interval={"policy": "steps", "every_steps": every})
    # A constant backoff for the class a killed rank gets, so every failure waits alike (the
    # default doubles it per retry, which would bias later failures).
    same = {"max_retries": 100, "backoff_seconds": 1.0, "backoff_max_seconds": 1.0}
    data["recovery"].update(warm_standby=True, max_total_restarts=100,
                            max_restarts_without_progress=100,
                            policies={"node_lost": same, "infrastructure": same})  # fmt: skip
    data["budget"]["wall_seconds"] = 7200
    return data


def wait(condition, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.02)
    return found


def events(store: Store, run_id: str, kind: str, generation: int | None = None) -> list:
    found = store.events(run_id, types=[kind])
    return [e for e in found if generation is None or e.generation == generation]


def one_failure(store: Store, root: Path, run_id: str, cold: bool, rng: random.Random, args):
    """Kill a rank of the current generation; the figures of its recovery."""
    run = wait(lambda: (r := store.get_run(run_id)).state == "RUNNING" and r.generation > 0 and r,
               "the run to train")  # fmt: skip
    generation = run.generation
    paths = run_paths(root, run_id)
    restored = events(store, run_id, EventType.RESTORED, generation)
    base = restored[0].step if restored and restored[0].step else 0
    wait(lambda: (store.get_run(run_id).last_step or 0) >= base + args.steps_between,
         f"generation {generation} to train")  # fmt: skip
    nxt = paths.attempt(generation + 1)
    wait(lambda: all(nxt.standby_ready_file(r).exists() for r in range(WORLD)),
         f"the standby of generation {generation + 1}")  # fmt: skip
    if cold:
        for pid in generation_processes(root, run_id).get(generation + 1, []):
            os.kill(pid, signal.SIGKILL)
    time.sleep(rng.uniform(0.0, 0.5))  # a random moment within a step or two
    rank = rng.randrange(WORLD)
    pid = next(e.attributes["pid"] for e in events(store, run_id, EventType.WORKER_STARTED,
               generation) if e.attributes.get("rank") == rank
               and e.attributes.get("host") == socket.gethostname())  # fmt: skip
    at_step = store.get_run(run_id).last_step or 0
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    done = wait(lambda: events(store, run_id, EventType.RECOVERY_SUCCEEDED, generation + 1),
                f"the recovery of generation {generation + 1}")[0]  # fmt: skip
    first = done.attributes["first_step"]
    step = next(e for e in events(store, run_id, EventType.STEP_HEALTHY, generation + 1)
                if e.step == first)  # fmt: skip
    failed = events(store, run_id, EventType.FAILURE_CLASSIFIED, generation)[0]
    launched = events(store, run_id, EventType.WORKER_GROUP_LAUNCHED, generation + 1)[0]
    back = events(store, run_id, EventType.RESTORED, generation + 1)
    restore = min(e.time_unix_s for e in back)
    return {
        "kind": "cold" if cold else "warm",
        "generation": generation + 1,
        "rank": rank,
        "warm_launch": bool(launched.attributes.get("warm")),
        "rto": round(step.time_unix_s - killed, 3),
        "detect": round(failed.time_unix_s - killed, 3),
        "backoff": round(launched.time_unix_s - failed.time_unix_s, 3),
        "start_to_restore": round(restore - launched.time_unix_s, 3),
        "restore_to_step": round(step.time_unix_s - restore, 3),
        "lost_steps": max(0, at_step - (done.attributes.get("restored_step") or 0)),
        "recovery_seconds_recorded": done.attributes.get("recovery_seconds"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--failures", type=int, default=6, help="kills, alternating warm/cold")
    parser.add_argument("--steps-between", type=int, default=15)
    parser.add_argument("--every", type=int, default=10, help="checkpoint interval in steps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="runwright-rto-") as tmp:
        root = Path(tmp)
        dataset = build_dataset(TINY_DATA, root)
        body = spec_from_mapping(spec(dataset, 100_000, args.every))
        store = Store.open(root)
        controller = Controller(store, root, poll_seconds=0.1)
        run, _ = controller.submit(body, root)
        rounds: list[dict] = []
        errors: list[BaseException] = []

        def outside() -> None:
            watcher = Store.open(root)
            try:
                for i in range(args.failures):
                    rounds.append(one_failure(watcher, root, run.run_id, i % 2 == 1, rng, args))
                    print(json.dumps(rounds[-1]), flush=True)
            except BaseException as exc:
                errors.append(exc)
            finally:
                from runwright.control.cancel import request_cancel

                request_cancel(watcher, run.run_id, "benchmark done")
                watcher.close()

        thread = threading.Thread(target=outside, daemon=True)
        thread.start()
        controller.drive(run.run_id)
        thread.join(timeout=60)
        if errors:
            raise errors[0]
        launched = events(store, run.run_id, EventType.WORKER_GROUP_LAUNCHED, 1)[0]
        first = min(e.time_unix_s for e in events(store, run.run_id, EventType.STEP_HEALTHY, 1))
        floor = first - launched.time_unix_s
        store.close()

    def median(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds if r["kind"] == kind)

    keys = ("rto", "detect", "backoff", "start_to_restore", "restore_to_step")
    medians = {kind: {k: round(median(kind, k), 3) for k in keys} for kind in ("warm", "cold")}
    result = {
        "benchmark": "recovery_time",
        "config": vars(args),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "cold_start_floor_seconds": round(floor, 3),
        "rounds": rounds,
        "median": medians,
        "warm_over_cold_rto": round(medians["warm"]["rto"] / medians["cold"]["rto"], 3),
        "warm_rto_over_cold_start": round(medians["warm"]["rto"] / floor, 3),
        "every_warm_round_launched_warm": all(
            r["warm_launch"] for r in rounds if r["kind"] == "warm"
        ),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
