"""Collective telemetry (issue 24): what recording every collective costs a training step, and
how long a hang takes from its start to a named root-cause rank.

    .venv/bin/python benchmarks/collective_telemetry.py                 # both parts
    .venv/bin/python benchmarks/collective_telemetry.py --part overhead --pairs 30

**overhead**: the reference GPT of the demo spec (src/runwright/demo/tiny_gpt.yaml) trained by two
gloo ranks under torchrun, DDP, on synthetic batches of the spec's per-rank shape, in blocks of
--steps steps, alternately (ABBA) with the telemetry

  off  DDP's gradient hook is the plain average-and-all-reduce, the loss-token and loss
       all-reduces are plain `dist.all_reduce`, no phase marks;
  on   the same through runwright's hooks: `allreduce_bucket` (each bucket recorded), the
       recording `all_reduce` helper for the two scalars, and a `doing("data_wait")` mark.

The same model, batches and code path otherwise; only the recording differs. The estimate is the
median of the per-pair differences of rank 0's seconds per step (wall, and the training thread's
own CPU time), with a percentile bootstrap interval; pairs run seconds apart, so drift cancels.
A second estimate, in situ: the recording calls a step makes (counted) times their measured
cost (a tight loop of enter+exit), over the step time. The target: under 1 % in situ, with the
differential interval reaching below 1 % (it resolves 1 % only when narrower than 2 points,
which a busy 2-core machine does not give: `differential_resolves_target` says which).

**hang**: a real run under the controller (tests/control/scripts/stalled_data.py): rank 1 sits in
a data read that never returns at step 5 while rank 0 waits in the gradient all-reduce; from the
stall's start (rank 1's own mark) to FAILURE_CLASSIFIED naming rank 1, split into detection (the
watchdog's steady-state limit and the stall check's CPU confirmation) and collecting the dumps.
Results: benchmarks/results/collective_telemetry.json.
"""

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "collective_telemetry.json"
SCRIPTS = Path(__file__).resolve().parents[1] / "tests" / "control" / "scripts"
TARGET_PERCENT = 1.0
RESAMPLES = 4000


def bootstrap(diffs: list[float], seed: int = 0) -> tuple[float, float, float]:
    """Median of `diffs` and its 95 % percentile bootstrap interval."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(RESAMPLES))
    return (
        statistics.median(diffs),
        medians[int(0.025 * RESAMPLES)],
        medians[-int(0.025 * RESAMPLES)],
    )


def worker(args: argparse.Namespace) -> None:
    """One rank of the overhead part (under torchrun)."""
    import contextlib

    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    import runwright
    from runwright.runtime import collective_hooks
    from runwright.runtime.collective_log import CollectiveLog, process_log
    from runwright.spec import load_spec
    from runwright.train.model import GPT

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = load_spec(Path(runwright.__file__).resolve().parent / "demo" / "tiny_gpt.yaml")
    torch.manual_seed(spec.training.seed)
    model = GPT(spec.model, max_positions=spec.data.sequence_length)
    mode = {"on": True}

    def hook(_state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if mode["on"]:
            return collective_hooks.allreduce_bucket(bucket, None, world)
        tensor = bucket.buffer().div_(world)
        return dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0])

    net = DistributedDataParallel(model)
    net.register_comm_hook(None, hook)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seq, vocab = spec.data.sequence_length, spec.model.vocab_size
    g = torch.Generator().manual_seed(rank)
    rows, micro = 8, 4  # the demo plan's per-rank rows and micro-batch
    batches = [torch.randint(1, vocab, (rows, seq + 1), generator=g) for _ in range(4)]
    positions = torch.arange(seq).expand(micro, seq)
    segments = torch.zeros(micro, seq, dtype=torch.long)
    log = process_log()

    def step(i: int) -> None:
        tokens = batches[i % len(batches)]
        on = mode["on"]
        with log.doing("data_wait") if on else contextlib.nullcontext():
            count = torch.tensor([float(rows * seq)])
        collective_hooks.all_reduce(count, label="loss_tokens") if on else dist.all_reduce(count)
        total = torch.zeros(())
        for m in range(rows // micro):
            part = tokens[m * micro : (m + 1) * micro]
            sync = net.no_sync() if m < rows // micro - 1 else contextlib.nullcontext()
            with sync:
                logits = net(part[:, :-1], positions, segments)
                loss = F.cross_entropy(logits.flatten(0, 1), part[:, 1:].flatten()) / 2
                loss.backward()
            total += loss.detach()
        collective_hooks.all_reduce(total, label="loss") if on else dist.all_reduce(total)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(args.warmup_steps):
        step(i)
    blocks: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
    order = ["off", "on", "on", "off"]  # ABBA
    issued = {"on": 0}
    for p in range(args.pairs * 2):
        name = order[p % 4]
        mode["on"] = name == "on"
        dist.barrier()
        wall, cpu, before = time.perf_counter(), time.thread_time(), log.issued
        for i in range(args.steps):
            step(i)
        if name == "on":
            issued["on"] += log.issued - before
        blocks[name].append(
            ((time.perf_counter() - wall) / args.steps, (time.thread_time() - cpu) / args.steps)
        )
    # In situ: one enter+exit pair's cost, measured in a tight loop.
    probe, tensor, loops = CollectiveLog(), torch.ones(1), 20000
    started = time.perf_counter()
    for _ in range(loops):
        CollectiveLog.exit(probe.enter("all_reduce", tensor, None, bucket=0))
    record_seconds = (time.perf_counter() - started) / loops
    if rank == 0:
        per_step = issued["on"] / (len(blocks["on"]) * args.steps)
        Path(args.out).write_text(
            json.dumps(
                {
                    "blocks": blocks,
                    "records_per_step": per_step,
                    "record_seconds": record_seconds,
                }
            )
        )
    dist.destroy_process_group()


def overhead(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out = workdir / "overhead.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    command += [str(Path(__file__).resolve()), "--worker", f"--out={out}"]
    command += [f"--pairs={args.pairs}", f"--steps={args.steps}"]
    command += [f"--warmup-steps={args.warmup_steps}"]
    load = os.getloadavg()[0]
    subprocess.run(command, check=True, env=env)
    raw = json.loads(out.read_text())
    on, off = raw["blocks"]["on"], raw["blocks"]["off"]
    result: dict[str, Any] = {"load_1min_before": load, "pairs": len(on), "steps": args.steps}
    for index, clock in ((0, "wall"), (1, "thread_cpu")):
        diffs = [100 * (a[index] - b[index]) / b[index] for a, b in zip(on, off, strict=True)]
        median, low, high = bootstrap(diffs)
        result[f"{clock}_overhead_percent"] = {"median": median, "interval_95": [low, high]}
        result[f"{clock}_seconds_per_step_off"] = statistics.median(b[index] for b in off)
    step_seconds = result["wall_seconds_per_step_off"]
    in_situ = raw["records_per_step"] * raw["record_seconds"] / step_seconds * 100
    result["records_per_step"] = raw["records_per_step"]
    result["record_microseconds"] = raw["record_seconds"] * 1e6
    result["in_situ_overhead_percent"] = in_situ
    result["target_percent"] = TARGET_PERCENT
    # The differential interval decides only when it is narrower than the target; on a busy
    # machine it is not, and the in-situ figure (what the recording calls cost) is the estimate.
    low, high = result["wall_overhead_percent"]["interval_95"]
    result["differential_resolves_target"] = high - low < 2 * TARGET_PERCENT
    result["meets_target"] = in_situ < TARGET_PERCENT and low < TARGET_PERCENT
    return result


def hang(workdir: Path) -> dict[str, Any]:
    from runwright.control.controller import Controller
    from runwright.spec import spec_from_mapping
    from runwright.store import Store

    heartbeat_timeout = 3.0
    spec = spec_from_mapping(
        {
            "name": "bench-hang",
            "code": {
                "entrypoint": str(SCRIPTS / "stalled_data.py"),
                "args": ["--stall-at-step", "5"],
            },
            "training": {"global_batch_samples": 8, "steps": 6, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": 100}},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": heartbeat_timeout,
                "progress_timeout_seconds": 90,
                "policies": {"no_progress": {"max_retries": 0}},
            },
        }
    )
    store = Store.open(workdir)
    controller = Controller(store, workdir, poll_seconds=0.1)
    run, _ = controller.submit(spec, workdir)
    controller.drive(run.run_id)
    (failure,) = store.events(run.run_id, types=["FAILURE_CLASSIFIED"])
    said = failure.attributes
    dumps = json.loads(
        Path(
            store.events(run.run_id, types=["DIAGNOSTICS_WRITTEN"])[0].attributes["path"]
        ).read_text()
    )["hang_attribution"]["dumps"]
    started = dumps["1"]["phase"]["since_wall"]
    store.close()
    return {
        "named_rank": said["rank"],
        "message": said["message"],
        "hang_to_named_rank_seconds": failure.time_unix_s - started,
        "collect_dumps_seconds": said["attribution"]["collect_seconds"],
        "heartbeat_timeout_seconds": heartbeat_timeout,
        "note": "detection is the watchdog's steady-state limit (max(heartbeat timeout, 10 x p95 "
        "step)) plus the stall check's 2 s CPU confirmation; the dumps come after",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["overhead", "hang", "both"], default="both")
    parser.add_argument("--pairs", type=int, default=20, help="on/off block pairs")
    parser.add_argument("--steps", type=int, default=5, help="steps per block")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    result: dict[str, Any] = {
        "benchmark": "collective_telemetry",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__},
        "command": " ".join(sys.argv),
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rw-colltel-") as tmp:
        workdir = Path(tmp)
        if args.part in ("overhead", "both"):
            result["overhead"] = overhead(args, workdir)
        if args.part in ("hang", "both"):
            (workdir / "hang").mkdir()
            result["hang"] = hang(workdir / "hang")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
