"""Worker-runtime overhead: the reference GPT trained bare vs instrumented, in one run.

    .venv/bin/python benchmarks/runtime_overhead.py              # 2 ranks, torchrun + gloo
    .venv/bin/python benchmarks/runtime_overhead.py --nproc 1    # one process, no torchrun

The model is `runwright.train.model.GPT` sized by the demo spec's model section
(src/runwright/demo/tiny_gpt.yaml), trained on synthetic packed token batches of the spec's shape
(16 rows x 128 tokens per step, micro-batches of 4) two ways, interleaved in rounds so that load
drift on a shared machine hits both sides equally (the order alternates every round):

  bare          forward, backward, clip, AdamW step: plain PyTorch (DDP when there are 2 ranks)
  instrumented  the same step inside `runwright.runtime` exactly as src/runwright/train/loop.py
                uses it: `init()` outside the control plane (heartbeat thread on), `ctx.step_loop`
                (stop agreement at every boundary), `loop.phase(...)` around each phase, the
                timed DDP comm hook, `loop.guard`, `loop.complete(...)` with the trainer's metrics

Both sides do the trainer's own math (the global loss-token all-reduce that normalises the loss
and the loss all-reduce), so the difference is the runtime alone. Checkpointing is left out: it
is the checkpointer's cost, measured by benchmarks/checkpoint.py.

A step's time runs from the start of one loop body to the start of the next, so it includes the
step-boundary work (stop agreement) of the instrumented loop. The per-component figures are
separate micro-benchmarks of each runtime piece, repeated in the same process after the rounds.

Two measures per step: wall seconds (what a user waits) and process CPU seconds (every thread of
the rank, heartbeat thread included; `time.process_time`). On a shared 2-core machine wall time
drifts by more than 1 % between rounds, so the verdict reads CPU: the overhead paired by round,
with a 95 % interval of its mean; the target holds when the interval's upper end is under 1 %.
Each rank is pinned to one core (`--no-pin` to leave them free).
Results: benchmarks/results/runtime_overhead.json (rank 0's figures lead; every rank's are kept).
"""

import argparse
import contextlib
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table
from torch.nn.parallel import DistributedDataParallel

import runwright
import runwright.runtime
from runwright.runtime.channel import ChannelWriter
from runwright.runtime.stop import OverlappedStopVote
from runwright.spec import JobSpec
from runwright.train.loop import SyncTimer, timed_allreduce
from runwright.train.model import GPT
from runwright.train.schedule import lr_multiplier

RESULTS = Path(__file__).resolve().parent / "results" / "runtime_overhead.json"
SPEC = Path(runwright.__file__).resolve().parent / "demo" / "tiny_gpt.yaml"
TARGET_PERCENT = 1.0
BATCH_POOL = 8


@dataclass
class Round:
    """One side's steps of one round: seconds per step, wall and process CPU."""

    wall: list[float]
    cpu: list[float]


def synthetic_batches(spec: JobSpec, rows: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Packed rows like the loader's: documents of random length, positions restarting at each
    document, segment ids that keep attention inside a document, loss off on the EOD token."""
    seq, vocab = spec.data.sequence_length, spec.model.vocab_size
    g = torch.Generator().manual_seed(seed)
    pool = []
    for _ in range(BATCH_POOL):
        tokens = torch.randint(1, vocab, (rows, seq + 1), generator=g)
        # A document ends where a draw falls under 1/32: mean document length about 32 tokens.
        ends = torch.rand(rows, seq, generator=g) < 1 / 32
        segment = torch.cumsum(ends.long(), dim=1) - ends.long()
        starts = torch.zeros_like(segment)
        starts[:, 1:] = (segment[:, 1:] != segment[:, :-1]).long()
        index = torch.arange(seq).expand(rows, seq)
        first = torch.cummax(torch.where(starts.bool(), index, torch.zeros_like(index)), dim=1)
        pool.append(
            {
                "tokens": tokens[:, :-1].contiguous(),
                "labels": tokens[:, 1:].contiguous(),
                "loss_mask": (~ends).float(),
                "position_ids": index - first.values,
                "segment_ids": segment,
            }
        )
    return pool


class Trainer:
    """One model replica with its optimizer; `step` is the trainer's step body, with `phase`
    wrapping each phase (a no-op for the bare loop)."""

    def __init__(self, spec: JobSpec, world_size: int, sync: SyncTimer | None) -> None:
        torch.manual_seed(spec.training.seed)
        self.model = GPT(spec.model, max_positions=spec.data.sequence_length)
        self.net: torch.nn.Module = self.model
        if world_size > 1:
            self.net = DistributedDataParallel(self.model)
            if sync is not None:
                self.net.register_comm_hook(sync, timed_allreduce)
        opt = spec.training.optimizer
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=opt.lr, betas=opt.betas, weight_decay=opt.weight_decay
        )
        total = int(spec.plan.total_steps.value)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_multiplier(s, total, spec.training.schedule)
        )
        self.clip = opt.grad_clip_norm or float("inf")
        self.world_size = world_size

    def forward_backward(
        self, rows: dict[str, torch.Tensor], micro: int, phase: Callable[[str], Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dp = self.world_size
        accumulation = rows["tokens"].shape[0] // micro
        global_loss_tokens = rows["loss_mask"].sum()
        if dp > 1:
            dist.all_reduce(global_loss_tokens)
        loss_sum = torch.zeros(())
        for i in range(accumulation):
            part = {k: v[i * micro : (i + 1) * micro] for k, v in rows.items()}
            last = i == accumulation - 1
            no_sync = self.net.no_sync() if dp > 1 and not last else contextlib.nullcontext()
            with no_sync:
                with phase("forward"):
                    logits = self.net(part["tokens"], part["position_ids"], part["segment_ids"])
                    ce = F.cross_entropy(
                        logits.flatten(0, 1), part["labels"].flatten(), reduction="none"
                    )
                    loss = (ce * part["loss_mask"].flatten()).sum() * dp / global_loss_tokens
                with phase("backward"):
                    loss.backward()
            loss_sum += loss.detach() / dp
        if dp > 1:
            dist.all_reduce(loss_sum)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        return loss_sum, grad_norm

    def optimizer_step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()


_NO_PHASE = contextlib.nullcontext()


def no_phase(_name: str) -> contextlib.nullcontext[None]:
    return _NO_PHASE


def mark() -> tuple[float, float]:
    """(wall, process CPU) seconds now. CPU time counts every thread of the rank (the heartbeat
    thread's fsyncs included) and none of the time it waited for a core, so a shared machine's
    load moves it far less than wall time: it is what resolves 1 %."""
    return time.perf_counter(), time.process_time()


def durations(marks: list[tuple[float, float]]) -> Round:
    return Round(
        wall=[b[0] - a[0] for a, b in itertools.pairwise(marks)],
        cpu=[b[1] - a[1] for a, b in itertools.pairwise(marks)],
    )


def bare_round(
    trainer: Trainer, batches: list[dict[str, torch.Tensor]], steps: int, micro: int
) -> Round:
    marks = []
    for i in range(steps):
        marks.append(mark())
        rows = batches[i % len(batches)]
        trainer.forward_backward(rows, micro, no_phase)
        trainer.optimizer_step()
    marks.append(mark())
    return durations(marks)


def instrumented_round(
    ctx: runwright.runtime.RunContext,
    trainer: Trainer,
    sync: SyncTimer,
    batches: list[dict[str, torch.Tensor]],
    loss_tokens: list[int],
    first_step: int,
    steps: int,
    micro: int,
    tokens_per_row: int,
    global_rows: int,
) -> Round:
    marks = []
    loop = ctx.step_loop(first_step, first_step + steps)
    for step in loop:
        marks.append(mark())
        with loop.phase("data_wait"):
            batch = batches[step % len(batches)]
        with loop.phase("h2d"):
            rows = {k: v.to("cpu") for k, v in batch.items()}
        sync.seconds = 0.0
        loss_sum, grad_norm = trainer.forward_backward(rows, micro, loop.phase)
        loop.add_phase_seconds("grad_sync", sync.seconds)
        loop.guard(step, loss=loss_sum, grad_norm=grad_norm)
        with loop.phase("optimizer"):
            trainer.optimizer_step()
        loop.complete(
            step,
            loss=loss_sum,
            grad_norm=grad_norm,
            lr=trainer.scheduler.get_last_lr()[0],
            device_tokens=batch["tokens"].shape[0] * tokens_per_row,
            padded_tokens=0,
            loss_tokens=loss_tokens[step % len(batches)],
            samples=[(step - 1) * global_rows, step * global_rows],
        )
    marks.append(mark())
    loop.close()
    return durations(marks)


def per_call_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of one call of `fn`, over `repeats` timed calls."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def component_costs(
    ctx: runwright.runtime.RunContext,
    workdir: Path,
    loss: torch.Tensor,
    accumulation: int,
    record: dict[str, Any],
    step_seconds: float,
    repeats: int,
) -> dict[str, dict[str, Any]]:
    """Microseconds per step of each runtime piece, measured alone with the step's call counts."""
    costs: dict[str, dict[str, Any]] = {}

    def add(name: str, calls: float, fn: Callable[[], Any], training_thread: bool = True) -> None:
        if ctx.world_size > 1:
            dist.barrier()  # collectives must start together on every rank
        seconds = per_call_seconds(fn, repeats)
        costs[name] = {
            "calls_per_step": calls,
            "us_per_call": seconds * 1e6,
            "us_per_step": seconds * calls * 1e6,
            "training_thread": training_thread,
        }

    # One boundary per step: poll the stop watcher, read the previous vote, cast the next (an
    # async all-reduce, MAX). Back to back here, so nothing overlaps it: an upper bound.
    vote = OverlappedStopVote()
    add("stop vote", 1, lambda: vote.boundary(ctx.stop_watcher.local_request()))
    vote.finish()
    # STEP_HEALTHY through a writer like the context's (same folder, same fsync policy).
    writer = ChannelWriter(workdir / "component-channel", generation=0, rank=ctx.rank)
    counter = iter(range(10**9))
    add(
        "channel write (STEP_HEALTHY)",
        1,
        lambda: writer.send(
            "STEP_HEALTHY", step=next(counter), world_size=ctx.world_size, attributes=record
        ),
    )
    # The deferred fsync of those lines runs on the heartbeat thread, once per heartbeat:
    # e.g. a 0.07 s step / 1 s heartbeat = 0.07 fsyncs per step.
    interval = ctx.spec.recovery.heartbeat_interval_seconds if ctx.spec else 2.0

    def send_then_sync() -> None:
        writer.send("STEP_HEALTHY", step=next(counter), attributes=record)
        writer.sync()

    add(
        "channel fsync (heartbeat thread)",
        step_seconds / interval,
        send_then_sync,
        training_thread=False,
    )
    writer.close()
    with open(workdir / f"component-timeline-{ctx.rank}.jsonl", "a", encoding="utf-8") as f:
        add("timeline write", 1, lambda: f.write(json.dumps(record) + "\n"))
    # guard reads loss and grad norm to the host once; complete reuses both numbers.
    add("item() syncs", 2, lambda: loss.detach().item())
    loop = ctx.step_loop(0, 0)

    def one_phase() -> None:
        with loop.phase("forward"):
            pass

    # data_wait, h2d, optimizer, and forward + backward per micro-batch
    add("phase timers", 3 + 2 * accumulation, one_phase)
    loop.close()
    return costs


def overhead(bare: list[list[float]], instrumented: list[list[float]]) -> dict[str, Any]:
    """Overhead of one measure (wall or CPU seconds per step): of the medians over all steps,
    and paired by round (the same load drift hits both halves of a round) with a 95 % interval
    of the mean paired difference, which says whether 1 % can be resolved at all."""
    bare_median = statistics.median(s for r in bare for s in r)
    inst_median = statistics.median(s for r in instrumented for s in r)
    diffs = [
        statistics.median(i) - statistics.median(b) for b, i in zip(bare, instrumented, strict=True)
    ]
    mean = statistics.fmean(diffs)
    half = 1.96 * statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("inf")
    return {
        "bare_median_step_seconds": bare_median,
        "instrumented_median_step_seconds": inst_median,
        "overhead_us_per_step": (inst_median - bare_median) * 1e6,
        "overhead_percent": 100 * (inst_median - bare_median) / bare_median,
        "paired_round_overhead_us_per_step": statistics.median(diffs) * 1e6,
        "paired_round_overhead_percent": 100 * statistics.median(diffs) / bare_median,
        "paired_mean_percent_95ci": [
            100 * (mean - half) / bare_median,
            100 * (mean + half) / bare_median,
        ],
        "round_median_step_seconds": [
            {"bare": statistics.median(b), "instrumented": statistics.median(i)}
            for b, i in zip(bare, instrumented, strict=True)
        ],
    }


def summarise(bare: list[Round], instrumented: list[Round]) -> dict[str, Any]:
    """Wall figures at the top level (what a user's step takes), CPU figures under "cpu" (what
    resolves 1 % on a shared machine)."""
    wall = overhead([r.wall for r in bare], [r.wall for r in instrumented])
    cpu = overhead([r.cpu for r in bare], [r.cpu for r in instrumented])
    return {"steps_per_side": sum(len(r.wall) for r in bare), **wall, "cpu": cpu}


def worker(args: argparse.Namespace) -> None:
    """One rank: both loops interleaved, then the components; rank 0 writes the JSON."""
    torch.set_num_threads(args.threads)
    pinned = None
    if args.pin and hasattr(os, "sched_setaffinity"):
        # One core per rank, so a rank's step is not migrated between cores mid-measurement.
        pinned = int(os.environ.get("LOCAL_RANK", "0")) % (os.cpu_count() or 1)
        os.sched_setaffinity(0, {pinned})
    workdir = Path(args.workdir)
    os.chdir(workdir)  # init() outside the control plane writes under ./.runwright/local/
    ctx = runwright.runtime.init(spec_path=SPEC)
    spec = ctx.spec
    assert spec is not None
    world = ctx.world_size
    if world > 1:
        dist.init_process_group("gloo")
    if spec.reproducibility.level == "bitwise":
        torch.use_deterministic_algorithms(True)
    micro = int(spec.plan.micro_batch_size.value)
    rows = int(spec.plan.global_batch_samples.value) // world
    seq = spec.data.sequence_length
    batches = synthetic_batches(spec, rows, seed=spec.data.seed + ctx.rank)
    loss_tokens = [int(b["loss_mask"].sum()) for b in batches]  # the loader counts these
    sync = SyncTimer(world)
    bare_trainer = Trainer(spec, world, sync=None)
    inst_trainer = Trainer(spec, world, sync=sync)

    def run_bare(steps: int) -> Round:
        return bare_round(bare_trainer, batches, steps, micro)

    step = 0

    def run_instrumented(steps: int) -> Round:
        nonlocal step
        times = instrumented_round(
            ctx, inst_trainer, sync, batches, loss_tokens, step, steps, micro, seq, rows * world
        )
        step += steps
        return times

    run_bare(args.warmup_steps)
    run_instrumented(args.warmup_steps)
    bare: list[Round] = []
    instrumented: list[Round] = []
    for r in range(args.rounds):
        sides = [(bare, run_bare), (instrumented, run_instrumented)]
        for out, run in sides if r % 2 == 0 else sides[::-1]:
            out.append(run(args.steps))
    figures = summarise(bare, instrumented)
    loss, _ = inst_trainer.forward_backward(batches[0], micro, no_phase)
    inst_trainer.optimizer.zero_grad(set_to_none=True)
    record = last_timeline_record(ctx)
    figures["components"] = component_costs(
        ctx,
        workdir,
        loss,
        rows // micro,
        record,
        figures["instrumented_median_step_seconds"],
        repeats=args.component_repeats,
    )
    figures["rank"] = ctx.rank
    figures["pinned_core"] = pinned
    ranks = [figures]
    if world > 1:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, figures)
        ranks = gathered
    if ctx.rank == 0:
        result = {
            "benchmark": "runtime_overhead",
            "mode": f"torchrun --nproc-per-node {world} (gloo)" if world > 1 else "single process",
            "world_size": world,
            "model": spec.model.model_dump(mode="json"),
            "rows_per_rank": rows,
            "micro_batch_size": micro,
            "sequence_length": seq,
            "threads_per_rank": args.threads,
            "rounds": args.rounds,
            "steps_per_round": args.steps,
            "warmup_steps": args.warmup_steps,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "target_percent": TARGET_PERCENT,
            **{k: v for k, v in ranks[0].items() if k != "rank"},
            "ranks": ranks,
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    ctx.close()
    if world > 1:
        dist.destroy_process_group()


def last_timeline_record(ctx: runwright.runtime.RunContext) -> dict[str, Any]:
    """The newest timeline line: what `complete` wrote, i.e. what the channel carries."""
    path = ctx.run_dir / "timeline" / f"gen{ctx.generation:05d}-rank{ctx.rank:05d}.jsonl"
    return json.loads(path.read_text().splitlines()[-1])


def render(result: dict[str, Any]) -> None:
    table = Table(
        title=f"runtime overhead, {result['mode']}, "
        f"{result['rounds']} rounds x {result['steps_per_round']} steps per side"
    )
    for column in ("measure", "value"):
        table.add_column(column)
    table.add_row("bare median step (s)", f"{result['bare_median_step_seconds']:.5f}")
    table.add_row(
        "instrumented median step (s)", f"{result['instrumented_median_step_seconds']:.5f}"
    )
    table.add_row(
        "overhead per step",
        f"{result['overhead_us_per_step']:.0f} us = {result['overhead_percent']:.2f} %",
    )
    table.add_row(
        "overhead, paired by round",
        f"{result['paired_round_overhead_us_per_step']:.0f} us = "
        f"{result['paired_round_overhead_percent']:.2f} %",
    )
    cpu = result["cpu"]
    low, high = cpu["paired_mean_percent_95ci"]
    table.add_row(
        "CPU per step: bare / instrumented (s)",
        f"{cpu['bare_median_step_seconds']:.5f} / {cpu['instrumented_median_step_seconds']:.5f}",
    )
    table.add_row(
        "CPU overhead, paired by round",
        f"{cpu['paired_round_overhead_us_per_step']:.0f} us = "
        f"{cpu['paired_round_overhead_percent']:.2f} % (95 % interval of the mean "
        f"{low:.2f} .. {high:.2f} %)",
    )
    step_us = result["bare_median_step_seconds"] * 1e6
    total = 0.0
    for name, c in result["components"].items():
        total += c["us_per_step"]
        table.add_row(
            f"  {name} (x{c['calls_per_step']:.3g})",
            f"{c['us_per_step']:.1f} us = {100 * c['us_per_step'] / step_us:.2f} %",
        )
    table.add_row("  sum of components", f"{total:.1f} us = {100 * total / step_us:.2f} %")
    verdict = "met" if high < result["target_percent"] else "MISSED"
    table.add_row(
        "target (CPU, upper end of the interval)",
        f"< {result['target_percent']:.0f} % ({verdict})",
    )
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2, help="ranks; 1 runs without torchrun")
    parser.add_argument("--rounds", type=int, default=100, help="interleaved rounds per side")
    parser.add_argument("--steps", type=int, default=4, help="steps per round per side")
    parser.add_argument("--warmup-steps", type=int, default=10, help="untimed steps per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--component-repeats", type=int, default=200)
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="leave ranks unpinned to cores"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--dir", default=None, help="folder for the run files (default: cwd)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    # The channel's fsync cost depends on the disk, so measure on the one the runs would use.
    workdir = Path(tempfile.mkdtemp(prefix="rw-runtime-bench-", dir=args.dir or os.getcwd()))
    args.out = args.out.resolve()
    forwarded = [
        "--worker",
        f"--workdir={workdir}",
        f"--out={args.out}",
        f"--rounds={args.rounds}",
        f"--steps={args.steps}",
        f"--warmup-steps={args.warmup_steps}",
        f"--threads={args.threads}",
        f"--component-repeats={args.component_repeats}",
        *([] if args.pin else ["--no-pin"]),
    ]
    try:
        if args.nproc == 1:
            env_keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "RUNWRIGHT_RUN_ID")
            for key in env_keys:
                os.environ.pop(key, None)
            worker(parser.parse_args(forwarded))
        else:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={args.nproc}",
                str(Path(__file__).resolve()),
                *forwarded,
            ]
            subprocess.run(command, check=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    render(json.loads(args.out.read_text()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
