"""Scale-out latencies (issue 12): submit -> first step, and kill -> first step past the restored
one, on the one-host Slurm test cluster against the local executor, with the same spec.

    .venv/bin/python benchmarks/scale_out.py                 # 3 repetitions of every case
    .venv/bin/python benchmarks/scale_out.py --repetitions 5 --cases local/1x2,slurm/1x2

Runs as root with Slurm installed (tests/control/slurm/cluster.py starts slurmctld and three
slurmd, here with 2 CPUs per node so a 1-node x 2-rank spec fits one node). The spec is the
reference trainer (`module:runwright.train`) on the tiny example dataset, `--steps` steps of 4
samples, a checkpoint every 2 steps, 0.3 s asleep after each step; only the pool (and for the
2-node cases the node count) differs between cases. Each repetition is a fresh run driven by an
in-process controller; the benchmark waits for step `--kill-step`, kills, and waits for the end.

Cases:
  local/1x2       local executor, 1 node x 2 ranks; rank 1 SIGKILLed: restart in place
  slurm/1x2       Slurm pool, same spec; rank 1 SIGKILLed: restart in place, same Slurm job
  local/2x1       local executor, 2 nodes x 1 rank (where the local executor runs several
                  nodes; otherwise recorded as refused, with the reason)
  slurm/2x1       Slurm, 2 nodes x 1 rank; rank 1 SIGKILLed: restart in place, same job
  slurm/2x1-node  Slurm, 2 nodes x 1 rank; the node of rank 1 lost (its slurmd, step daemons
                  and ranks SIGKILLed): Slurm declares it down (SlurmdTimeout 10 s), node_lost,
                  requeue with --exclude, a new job on the two other nodes

Figures per run, from the store's events (every clock is this machine's):
  submit_to_first_step_seconds     JOB_SUBMITTED -> the first STEP_HEALTHY
  kill_to_first_step_seconds       the kill -> the first STEP_HEALTHY of a later generation past
                                   the step it restored
  kill_to_classified_seconds       the kill -> FAILURE_CLASSIFIED (detection)
Per case: every sample, the median, min and max. The machine's 1-minute load average is sampled
at each kill: the figures are wall-clock on a shared 2-core machine, so read them beside it.
Results: benchmarks/results/scale_out.json.
"""

import argparse
import importlib.util
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "scale_out.json"
CASES = ("local/1x2", "slurm/1x2", "local/2x1", "slurm/2x1", "slurm/2x1-node")
RUN_SECONDS = 900.0


def load_cluster_module():
    path = REPO / "tests" / "control" / "slurm" / "cluster.py"
    spec = importlib.util.spec_from_file_location("slurm_test_cluster", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_spec(root: Path, built, case: str, steps: int) -> Path:
    data = yaml.safe_load((REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml").read_text())
    nodes, ranks = (2, 1) if "2x1" in case else (1, 2)
    data["name"] = case.replace("/", "-")
    data["model"]["vocab_size"] = built.manifest.tokenizer.vocab_size
    data["data"].update(
        dataset=str(built.folder),
        sequence_length=32,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=4, micro_batch_size=2, steps=steps)
    data["checkpoint"]["interval"]["every_steps"] = 2
    data["resources"].update(
        nodes=nodes,
        devices_per_node=ranks,
        pool="cluster" if case.startswith("slurm") else "default",
    )
    data["code"]["args"] = ["--step-sleep", "0.3"]
    data["recovery"].update(heartbeat_timeout_seconds=60, progress_timeout_seconds=180)
    path = root / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def wait_for(check, timeout_seconds: float = RUN_SECONDS, every: float = 0.1):
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_seconds:g} s")
        time.sleep(every)


def one_run(store, root: Path, pools: Path, spec_path: Path, case: str, kill_step: int, cluster):
    from runwright.control.controller import Controller
    from runwright.control.states import TERMINAL
    from runwright.errors import PlacementError
    from runwright.spec import load_spec

    controller = Controller(store, root, pools_file=pools, poll_seconds=0.1)
    try:
        run, _ = controller.submit(load_spec(spec_path), spec_path.parent)
    except PlacementError as exc:
        return {"refused": str(exc)}
    run_id = run.run_id
    driver = threading.Thread(target=controller.drive, args=(run_id,), daemon=True)
    driver.start()
    running = wait_for(
        lambda: (
            run
            if (run := store.get_run(run_id)).state in TERMINAL or (run.last_step or 0) >= kill_step
            else None
        )
    )
    if running.state in TERMINAL:  # e.g. an executor that cannot run this many nodes
        driver.join(RUN_SECONDS)
        return {"run_id": run_id, "state": running.state, "failed": running.state_detail}
    victim = max(running.rank_manifest, key=lambda e: e["rank"])
    load = os.getloadavg()[0]
    killed_at = time.time()
    if case.endswith("-node"):
        cluster.kill_node(victim["host"])
    else:
        started = [
            e
            for e in store.events(run_id)
            if e.type == "WORKER_STARTED" and e.generation == running.generation
            and e.attributes.get("rank") == victim["rank"]
        ]  # fmt: skip
        os.kill(int(started[0].attributes["pid"]), signal.SIGKILL)
    driver.join(RUN_SECONDS)
    final = store.get_run(run_id)
    events = store.events(run_id)
    submitted = next(e.time_unix_s for e in events if e.type == "JOB_SUBMITTED")
    steps = [e for e in events if e.type == "STEP_HEALTHY"]
    restored = {e.generation: int(e.step or 0) for e in events if e.type == "RESTORED"}
    after = [
        e for e in steps
        if e.generation > running.generation and (e.step or 0) > restored.get(e.generation, 0)
    ]  # fmt: skip
    classified = [e for e in events if e.type == "FAILURE_CLASSIFIED"]
    if case.endswith("-node"):
        cluster.start_node(victim["host"])
    cluster.wait_queue_empty(120)
    return {
        "run_id": run_id,
        "state": final.state,
        "failure_class": classified[0].attributes["failure_class"] if classified else None,
        "submit_to_first_step_seconds": round(steps[0].time_unix_s - submitted, 3),
        "kill_to_first_step_seconds": round(after[0].time_unix_s - killed_at, 3) if after else None,
        "kill_to_classified_seconds": (
            round(classified[0].time_unix_s - killed_at, 3) if classified else None
        ),
        "killed_at_step": running.last_step,
        "load_average_1m_at_kill": round(load, 2),
    }


def summarise(samples: list[dict]) -> dict:
    out = {}
    for key in ("submit_to_first_step_seconds", "kill_to_first_step_seconds",
                "kill_to_classified_seconds"):  # fmt: skip
        values = [s[key] for s in samples if s.get(key) is not None]
        if values:
            out[key] = {
                "median": round(statistics.median(values), 3),
                "min": min(values),
                "max": max(values),
                "samples": values,
            }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--kill-step", type=int, default=4)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    cluster_module = load_cluster_module()
    why = cluster_module.missing_slurm()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    from runwright.data import build_dataset
    from runwright.store import Store

    cluster = cluster_module.SlurmCluster(cpus_per_node=2)
    os.environ["SLURM_CONF"] = str(cluster.conf)
    results: dict = {}
    try:
        cluster.start()
        root = Path(tempfile.mkdtemp(prefix="runwright-scale-out-"))
        built = build_dataset(REPO / "examples" / "data" / "tiny.yaml", root / "data")
        pools = root / "pools.yaml"
        pools.write_text(
            "pools:\n  default: {executor: local}\n  cluster: {executor: slurm, partition: debug}\n"
        )
        store = Store.open(root)
        for case in args.cases.split(","):
            spec_path = write_spec(root, built, case, args.steps)
            samples = []
            for repetition in range(args.repetitions):
                sample = one_run(store, root, pools, spec_path, case, args.kill_step, cluster)
                print(case, repetition, json.dumps(sample), flush=True)
                samples.append(sample)
                if "refused" in sample or "failed" in sample:
                    break
            results[case] = {"runs": samples, **summarise(samples)}
    finally:
        left = cluster.stop()
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "spec": {
            "steps": args.steps,
            "kill_step": args.kill_step,
            "step_sleep_seconds": 0.3,
            "checkpoint_every_steps": 2,
        },
        "slurm_queue_left_at_end": left,
        "cases": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
