"""Worker-runtime overhead: the reference GPT trained bare vs instrumented, resolved to 1 %.

    .venv/bin/python benchmarks/runtime_overhead.py                  # solo, then 2 ranks
    .venv/bin/python benchmarks/runtime_overhead.py --modes solo     # one process only

The model is `runwright.train.model.GPT` sized by the demo spec (src/runwright/demo/tiny_gpt.yaml),
trained on synthetic packed batches of the spec's per-rank shape (8 rows x 128 tokens per step,
micro-batches of 4) two ways:

  bare          forward, backward, clip, AdamW step: plain PyTorch (DDP when there are 2 ranks,
                with PyTorch's Python all-reduce hook, the untimed twin of the trainer's)
  instrumented  the same step inside `runwright.runtime` as src/runwright/train/loop.py uses it:
                `init()` with its heartbeat thread, one `ctx.step_loop` (stop vote every ~0.25 s of
                steps), `loop.phase(...)` around each phase, the timed DDP comm hook,
                `loop.guard`, `loop.complete(...)` with the trainer's metrics

Why the old rounds could not resolve 1 % (a 7-point interval) and what each choice removes:
- Two modes. `solo` is one process, no collective: the runtime's own cost without the gloo
  all-reduce, whose spinning couples both ranks' noise (a stall on one core stretches the other
  rank's wait). `group` is the real 2-rank gloo run, with the stop vote's all-reduce.
- The measure is the training thread's own CPU time (`time.thread_time`): no other process's or
  thread's work, no waiting for a core. The CPU of the threads the runtime starts (heartbeat,
  collective dumper, system sampler; from `schedstat`, else the heartbeat's own clock) is added
  to the instrumented side in full (conservative: what they did during bare blocks is charged
  too). Wall and process CPU are reported beside it.
- Many short interleaved blocks (--steps per block, ABBA order), paired per block: a pair's
  halves run within a second of each other, so drift cancels. The estimate is the median of the
  paired differences with a percentile bootstrap interval (robust to the odd block that a
  neighbour's burst or a GC pass lands in).
- In situ, as a second estimate: both loops carry the same probes (two clock reads around each
  runtime call: step boundary, phase enter/exit, guard, complete, grad-sync hook); the bare side's
  probes wrap nothing, so instrumented minus bare is the time spent inside the runtime's calls,
  probe cost removed. It must agree with the differential estimate: a gap would be a cost no
  call accounts for (cache, allocator, GC).
- Every other thread's run time per block (`/proc/self/task/*/schedstat`, nanoseconds), by
  thread name, bare vs instrumented: where process CPU the training thread's clock misses goes
  (gloo's threads serving the stop vote, the heartbeat, the channel's deferred fsync).
One step loop spans all blocks (as in a run: the timeline file is opened once). The target holds
when the upper end of the in-situ interval is under 1 % and the differential interval holds the
in-situ figure (`verdict`).
Each process is pinned to one core (`--no-pin` leaves it free).
Results: benchmarks/results/runtime_overhead.json (per mode; rank 0's figures lead).
"""

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

import runwright
import runwright.runtime
from runwright.spec import JobSpec
from runwright.train.layouts import timed_allreduce
from runwright.train.model import GPT
from runwright.train.schedule import lr_multiplier

RESULTS = Path(__file__).resolve().parent / "results" / "runtime_overhead.json"
SPEC = Path(runwright.__file__).resolve().parent / "demo" / "tiny_gpt.yaml"
TARGET_PERCENT = 1.0
RUNTIME_THREADS = "runwright-"
"""The name prefix of the threads `runwright.runtime.init()` starts."""
BATCH_POOL = 8
RESAMPLES = 4000


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


class Probe:
    """Training-thread CPU and wall seconds spent inside the calls it wraps, by call name."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    def _add(self, name: str, cpu: float, wall: float) -> None:
        self.cpu[name] = self.cpu.get(name, 0.0) + time.thread_time() - cpu
        self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - wall

    def call(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self._add(name, cpu, wall)

    @contextlib.contextmanager
    def phase(self, make: Callable[[str], Any], name: str) -> Iterator[None]:
        """`with make(name):` with its enter and exit timed (the body is not)."""
        cpu, wall = time.thread_time(), time.perf_counter()
        cm = make(name)
        cm.__enter__()
        self._add("phase timers", cpu, wall)
        try:
            yield
        finally:
            cpu, wall = time.thread_time(), time.perf_counter()
            cm.__exit__(*sys.exc_info())
            self._add("phase timers", cpu, wall)


def probed_hook(
    state: tuple[SimpleNamespace | None, list[Probe]], bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """The gradient all-reduce inside the current block's probe: the trainer's timed hook, or
    on the bare side PyTorch's own Python form of DDP's default (divide, all-reduce), so that
    the in-situ difference is the timer alone."""
    sync, probe = state
    if sync is None:
        return probe[0].call("grad-sync hook", default_hooks.allreduce_hook, None, bucket)
    return probe[0].call("grad-sync hook", timed_allreduce, sync, bucket)


class Trainer:
    """One model replica with its optimizer; `forward_backward` is the trainer's step body with
    `phase` wrapping each phase."""

    def __init__(self, spec: JobSpec, world_size: int, hook_state: Any = None) -> None:
        torch.manual_seed(spec.training.seed)
        self.model = GPT(spec.model, max_positions=spec.data.sequence_length)
        self.net: torch.nn.Module = self.model
        if world_size > 1:
            self.net = DistributedDataParallel(self.model)
            if hook_state is not None:
                self.net.register_comm_hook(hook_state, probed_hook)
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


def no_phase(_name: str) -> contextlib.nullcontext[None]:
    return contextlib.nullcontext()


def nothing(*_args: Any, **_kwargs: Any) -> None:
    """The bare side's stand-in for a runtime call: its probe measures the probe alone."""


@dataclass
class Block:
    """One side's block of steps: seconds per step of each measure, and the probes' sums."""

    steps: int
    thread_cpu: float
    wall: float
    process_cpu: float
    heartbeat_cpu: float
    threads: dict[str, float] = field(default_factory=dict)
    """CPU seconds per step of every other thread of the process, by name (`thread_cpu_ns`)."""
    probe_cpu: dict[str, float] = field(default_factory=dict)
    probe_wall: dict[str, float] = field(default_factory=dict)


def thread_cpu_ns() -> dict[str, int]:
    """Nanoseconds on a CPU of every thread of this process but the training thread, summed by
    name: a Python thread's own name, else `native:<comm>` (gloo's, the intra-op pool's).
    Linux's per-task `schedstat` (run time in ns) resolves a 2-step block where the tick-based
    `stat` times (10 ms) cannot; it is what tells where process CPU the training thread's
    clock does not see goes."""
    main = threading.main_thread().native_id
    named = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    found: dict[str, int] = {}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        if tid == main:
            continue
        try:
            run_ns = int((task / "schedstat").read_text().split()[0])
            name = named.get(tid) or f"native:{(task / 'comm').read_text().strip()}"
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
        found[name] = found.get(name, 0) + run_ns
    return found


class Clocks:
    """Reads the training thread's, the process's and the heartbeat thread's clocks, and the
    other threads' run times."""

    def __init__(self) -> None:
        beat = [t for t in threading.enumerate() if t.name == "runwright-heartbeat"]
        self._beat = time.pthread_getcpuclockid(beat[0].ident) if beat and beat[0].ident else None
        self._threads: dict[str, int] = {}

    def read(self) -> tuple[float, float, float, float]:
        # The other threads' times are read first, outside the clocks the block is timed by.
        self._threads = thread_cpu_ns() if Path("/proc/self/task").is_dir() else {}
        beat = time.clock_gettime(self._beat) if self._beat is not None else 0.0
        return time.thread_time(), time.perf_counter(), time.process_time(), beat

    def block(self, start: tuple[float, ...], steps: int, probe: Probe) -> Block:
        before = self._threads
        end = self.read()
        per = [(b - a) / steps for a, b in zip(start, end, strict=True)]
        threads = {
            name: (ns - before.get(name, 0)) / 1e9 / steps for name, ns in self._threads.items()
        }
        return Block(
            steps,
            *per,
            threads=threads,
            probe_cpu={k: v / steps for k, v in probe.cpu.items()},
            probe_wall={k: v / steps for k, v in probe.wall.items()},
        )


@dataclass
class Setup:
    trainer: Trainer
    batches: list[dict[str, torch.Tensor]]
    micro: int
    probe: list[Probe]
    """The current block's probe, shared with the comm hook."""


def bare_block(s: Setup, steps: Iterator[int], count: int, clocks: Clocks) -> Block:
    probe = s.probe[0] = Probe()
    start = clocks.read()
    for _ in range(count):
        step = probe.call("step boundary", next, steps)
        with probe.phase(no_phase, "data_wait"):
            batch = s.batches[step % len(s.batches)]
        with probe.phase(no_phase, "h2d"):
            rows = {k: v.to("cpu") for k, v in batch.items()}
        s.trainer.forward_backward(rows, s.micro, lambda n: probe.phase(no_phase, n))
        probe.call("add_phase_seconds", nothing)
        probe.call("guard", nothing)
        with probe.phase(no_phase, "optimizer"):
            s.trainer.optimizer_step()
        probe.call("complete", nothing)
    return clocks.block(start, count, probe)


def instrumented_block(
    s: Setup, loop: Any, steps: Iterator[int], sync: SimpleNamespace, count: int, clocks: Clocks
) -> Block:
    probe = s.probe[0] = Probe()
    rows_global = len(s.batches[0]["tokens"]) * s.trainer.world_size
    start = clocks.read()
    for _ in range(count):
        step = probe.call("step boundary", next, steps)
        with probe.phase(loop.phase, "data_wait"):
            batch = s.batches[step % len(s.batches)]
        with probe.phase(loop.phase, "h2d"):
            rows = {k: v.to("cpu") for k, v in batch.items()}
        sync.grad_sync_seconds = 0.0
        loss_sum, grad_norm = s.trainer.forward_backward(
            rows, s.micro, lambda n: probe.phase(loop.phase, n)
        )
        probe.call("add_phase_seconds", loop.add_phase_seconds, "grad_sync", sync.grad_sync_seconds)
        probe.call("guard", loop.guard, step, loss=loss_sum, grad_norm=grad_norm)
        with probe.phase(loop.phase, "optimizer"):
            s.trainer.optimizer_step()
        probe.call(
            "complete",
            loop.complete,
            step,
            loss=loss_sum,
            grad_norm=grad_norm,
            lr=s.trainer.scheduler.get_last_lr()[0],
            device_tokens=batch["tokens"].numel(),
            padded_tokens=0,
            loss_tokens=int(batch["loss_mask"].sum()),
            samples=[(step - 1) * rows_global, step * rows_global],
        )
    return clocks.block(start, count, probe)


def median_interval(
    pairs: int, estimate: Callable[[list[int]], float], seed: int = 0
) -> tuple[float, float, float]:
    """`estimate` over all pairs, with a 95 % percentile-bootstrap interval: resample the pairs
    with replacement RESAMPLES times (Efron & Tibshirani, An Introduction to the Bootstrap,
    ch. 13)."""
    rng = random.Random(seed)
    every = list(range(pairs))
    draws = sorted(estimate(rng.choices(every, k=pairs)) for _ in range(RESAMPLES))
    return estimate(every), draws[int(0.025 * RESAMPLES)], draws[int(0.975 * RESAMPLES) - 1]


def verdict(insitu: dict, differential: dict) -> dict:
    """The target holds when the in-situ figure's interval lies under TARGET_PERCENT, and the
    differential estimate (bare against instrumented thread CPU, every cost counted, but on a
    shared machine an interval of a few percent) holds the in-situ figure: a differential
    interval wholly above it would be a cost no runtime call accounts for (cache, allocator,
    GC). The differential alone cannot resolve 1 % here; the in-situ one can."""
    low = differential["percent_95ci"][0]
    return {
        "insitu_upper_percent": insitu["percent_95ci"][1],
        "held": insitu["percent_95ci"][1] < TARGET_PERCENT,
        "differential_agrees": low <= insitu["percent"],
    }


def summarise(bare: list[Block], inst: list[Block]) -> dict[str, Any]:
    """Overheads in microseconds and percent of the bare step, per measure, with intervals."""
    n = len(bare)
    base = {m: statistics.median(getattr(b, m) for b in bare) for m in ("thread_cpu", "wall")}
    base["process_cpu"] = statistics.median(b.process_cpu for b in bare)

    def diffs(measure: Callable[[Block], float]) -> list[float]:
        return [measure(i) - measure(b) for b, i in zip(bare, inst, strict=True)]

    def heartbeat(idx: list[int]) -> float:
        # Every beat of the run charged to the instrumented steps (conservative).
        beats = sum(b.heartbeat_cpu * b.steps for k in idx for b in (bare[k], inst[k]))
        return beats / sum(inst[k].steps for k in idx)

    def runtime_threads(idx: list[int]) -> float:
        # The same for every thread the runtime starts (heartbeat, dumper, system sampler):
        # they run whichever side's block is on, so the differential cannot see them.
        if not any(b.threads for b in bare):
            return heartbeat(idx)  # no /proc: the heartbeat's own clock only
        spent = sum(
            sum(v for name, v in b.threads.items() if name.startswith(RUNTIME_THREADS)) * b.steps
            for k in idx
            for b in (bare[k], inst[k])
        )
        return spent / sum(inst[k].steps for k in idx)

    def figure(
        values: list[float], base_seconds: float, extra: Callable[[list[int]], float] | None = None
    ) -> dict[str, Any]:
        def est(idx: list[int]) -> float:
            middle = statistics.median(values[k] for k in idx)
            return middle + (extra(idx) if extra else 0.0)

        value, low, high = median_interval(n, est)
        return {
            "us_per_step": value * 1e6,
            "us_per_step_95ci": [low * 1e6, high * 1e6],
            "percent": 100 * value / base_seconds,
            "percent_95ci": [100 * low / base_seconds, 100 * high / base_seconds],
        }

    insitu = diffs(lambda b: sum(b.probe_cpu.values()))
    names = sorted(inst[0].probe_cpu)
    insitu_per_step = statistics.median(insitu) + runtime_threads(list(range(n)))
    thread_names = sorted({name for b in (*bare, *inst) for name in b.threads})
    thread_cpu = figure(diffs(lambda b: b.thread_cpu), base["thread_cpu"], runtime_threads)
    insitu_cpu = figure(insitu, base["thread_cpu"], runtime_threads)
    return {
        "pairs": n,
        "steps_per_side": sum(b.steps for b in bare),
        "bare_step_seconds": base,
        "instrumented_step_seconds": {
            m: statistics.median(getattr(i, m) for i in inst) for m in base
        },
        "heartbeat_thread_us_per_step": heartbeat(list(range(n))) * 1e6,
        "runtime_threads_us_per_step": runtime_threads(list(range(n))) * 1e6,
        "thread_cpu": thread_cpu,
        "thread_cpu_without_heartbeat": figure(diffs(lambda b: b.thread_cpu), base["thread_cpu"]),
        "insitu_cpu": insitu_cpu,
        # The runtime's cost is per step, not per FLOP: the step length (training-thread CPU)
        # at which the in-situ cost would be exactly TARGET_PERCENT.
        "step_seconds_at_target": insitu_per_step * 100 / TARGET_PERCENT,
        "verdict": verdict(insitu_cpu, thread_cpu),
        "process_cpu": figure(diffs(lambda b: b.process_cpu), base["process_cpu"]),
        "wall": figure(diffs(lambda b: b.wall), base["wall"]),
        "other_threads_cpu": figure(diffs(lambda b: sum(b.threads.values())), base["process_cpu"]),
        "other_threads_us_per_step": {
            name: {
                "bare": statistics.median(b.threads.get(name, 0.0) for b in bare) * 1e6,
                "instrumented": statistics.median(i.threads.get(name, 0.0) for i in inst) * 1e6,
                "mean_difference": statistics.fmean(
                    i.threads.get(name, 0.0) - b.threads.get(name, 0.0)
                    for b, i in zip(bare, inst, strict=True)
                )
                * 1e6,
            }
            for name in thread_names
        },
        "insitu_calls_us_per_step": {
            name: {
                "instrumented_cpu": statistics.median(i.probe_cpu[name] for i in inst) * 1e6,
                "bare_cpu": statistics.median(b.probe_cpu.get(name, 0.0) for b in bare) * 1e6,
                "instrumented_wall": statistics.median(i.probe_wall[name] for i in inst) * 1e6,
            }
            for name in names
        },
    }


def worker(args: argparse.Namespace) -> None:
    """One process: both loops in interleaved blocks; rank 0 writes the JSON."""
    torch.set_num_threads(1)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    pinned = None
    if args.pin and hasattr(os, "sched_setaffinity"):
        # One core per process, so a step is not migrated between cores mid-measurement.
        pinned = local_rank % (os.cpu_count() or 1)
        os.sched_setaffinity(0, {pinned})
    workdir = Path(args.workdir)
    os.chdir(workdir)  # init() outside the control plane writes under ./.runwright/local/
    ctx = runwright.runtime.init(spec_path=SPEC)
    spec = ctx.spec
    assert spec is not None
    world = ctx.world_size
    if world > 1:
        dist.init_process_group("gloo")
    micro = int(spec.plan.micro_batch_size.value)
    rows = int(spec.plan.global_batch_samples.value) // int(spec.plan.dp.value)
    batches = synthetic_batches(spec, rows, seed=spec.data.seed + ctx.rank)
    # What the trainer's hook reads and adds to (train/layouts.Layout): the dp degree, seconds.
    sync = SimpleNamespace(dp=world, grad_sync_seconds=0.0)
    probe = [Probe()]
    bare = Setup(Trainer(spec, world, hook_state=(None, probe)), batches, micro, probe)
    inst = Setup(Trainer(spec, world, hook_state=(sync, probe)), batches, micro, probe)
    loop = ctx.step_loop(0, 10**9)
    inst_steps, bare_steps = iter(loop), iter(range(1, 10**9))
    clocks = Clocks()
    blocks: dict[str, list[Block]] = {"bare": [], "instrumented": []}
    runs: dict[str, Callable[[int], Block]] = {
        "bare": lambda k: bare_block(bare, bare_steps, k, clocks),
        "instrumented": lambda k: instrumented_block(inst, loop, inst_steps, sync, k, clocks),
    }
    for run in runs.values():
        run(args.warmup_steps)
    # No refresh thread: the bar is redrawn between blocks, outside every timed span.
    progress = Progress(auto_refresh=False, disable=ctx.rank != 0)
    with progress:
        task = progress.add_task(f"{args.mode}: {args.pairs} pairs", total=args.pairs)
        for k in range(args.pairs):
            # ABBA: each side goes first in every other pair, so a trend hits both alike.
            order = ("bare", "instrumented") if k % 2 == 0 else ("instrumented", "bare")
            for side in order:
                blocks[side].append(runs[side](args.steps))
            progress.update(task, advance=1, refresh=True)
    figures = summarise(blocks["bare"], blocks["instrumented"])
    figures.update(rank=ctx.rank, pinned_core=pinned)
    if args.keep_blocks:
        figures["blocks"] = {side: [asdict(b) for b in bs] for side, bs in blocks.items()}
    ranks = [figures]
    if world > 1:
        ranks = [None] * world
        dist.all_gather_object(ranks, figures)
    if ctx.rank == 0:
        Path(args.out).write_text(json.dumps({"world_size": world, **ranks[0], "ranks": ranks}))
    loop.close()
    ctx.close()
    if world > 1:
        dist.destroy_process_group()


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def run_mode(mode: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One mode in fresh processes; what it left in `part.json`, with the machine's load."""
    part = workdir / f"{mode}.json"
    forwarded = [
        "--worker",
        f"--mode={mode}",
        f"--workdir={workdir / mode}",
        f"--out={part}",
        f"--pairs={args.pairs}",
        f"--steps={args.steps}",
        f"--warmup-steps={args.warmup_steps}",
        *([] if args.pin else ["--no-pin"]),
        *(["--keep-blocks"] if args.keep_blocks else []),
    ]
    (workdir / mode).mkdir()
    script = str(Path(__file__).resolve())
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    if mode == "solo":
        command = [sys.executable, script, *forwarded]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc-per-node={args.nproc}", script, *forwarded]
    load_before, (busy0, total0), started = os.getloadavg()[0], cpu_busy(), time.time()
    subprocess.run(command, check=True, env=env)
    busy1, total1 = cpu_busy()
    return {
        "mode": "single process" if mode == "solo" else f"torchrun {args.nproc} ranks (gloo)",
        "seconds": time.time() - started,
        "load_1min_before_after": [load_before, os.getloadavg()[0]],
        "machine_busy_percent": 100 * (busy1 - busy0) / (total1 - total0),
        **json.loads(part.read_text()),
    }


def render(result: dict[str, Any]) -> None:
    for mode, r in result["modes"].items():
        table = Table(
            title=f"{mode}: {r['mode']}, {r['pairs']} pairs x {result['steps_per_block']} steps, "
            f"load {r['load_1min_before_after'][0]:.1f}->{r['load_1min_before_after'][1]:.1f}, "
            f"machine {r['machine_busy_percent']:.0f} % busy"
        )
        for column in ("measure", "bare s/step", "instrumented s/step", "overhead (95 % interval)"):
            table.add_column(column)
        for key, measure in (
            ("thread_cpu", "thread_cpu"),
            ("insitu_cpu", None),
            ("thread_cpu_without_heartbeat", None),
            ("process_cpu", "process_cpu"),
            ("wall", "wall"),
        ):
            f = r[key]
            low, high = f["percent_95ci"]
            bare = f"{r['bare_step_seconds'][measure]:.5f}" if measure else ""
            inst = f"{r['instrumented_step_seconds'][measure]:.5f}" if measure else ""
            table.add_row(
                key,
                bare,
                inst,
                f"{f['us_per_step']:.0f} us = {f['percent']:.2f} % ({low:.2f} .. {high:.2f})",
            )
        for name, c in r["insitu_calls_us_per_step"].items():
            table.add_row(
                f"  in situ: {name}", "", "", f"{c['instrumented_cpu'] - c['bare_cpu']:.1f} us"
            )
        table.add_row("  heartbeat thread", "", "", f"{r['heartbeat_thread_us_per_step']:.1f} us")
        table.add_row(
            "  runtime's threads (charged)", "", "", f"{r['runtime_threads_us_per_step']:.1f} us"
        )
        f = r["other_threads_cpu"]
        low, high = f["percent_95ci"]
        table.add_row(
            "other threads' CPU (of process CPU)",
            "",
            "",
            f"{f['us_per_step']:.0f} us = {f['percent']:.2f} % ({low:.2f} .. {high:.2f})",
        )
        for name, c in r["other_threads_us_per_step"].items():
            table.add_row(
                f"  {name}",
                f"{c['bare'] / 1e6:.5f}",
                f"{c['instrumented'] / 1e6:.5f}",
                f"{c['mean_difference']:.1f} us (mean)",
            )
        table.add_row(
            "step length at which in situ = 1 %", "", "", f"{r['step_seconds_at_target']:.4f} s"
        )
        v = r["verdict"]
        table.add_row(
            "target: in situ upper end < 1 %", "", "", "held" if v["held"] else "NOT held"
        )
        table.add_row(
            "  the differential interval holds it",
            "",
            "",
            "yes" if v["differential_agrees"] else "NO: a cost no call accounts for",
        )
        Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="solo,group", help="solo, group or both (comma)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks of the group mode")
    parser.add_argument("--pairs", type=int, default=150, help="interleaved block pairs")
    parser.add_argument("--steps", type=int, default=2, help="steps per block")
    parser.add_argument("--warmup-steps", type=int, default=10, help="untimed steps per side")
    parser.add_argument("--keep-blocks", action="store_true", help="every block in the JSON")
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="leave cores free")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--dir", default=None, help="folder for the run files (default: cwd)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    modes = [m.strip() for m in args.modes.split(",")]
    if unknown := set(modes) - {"solo", "group"}:
        parser.error(f"--modes: unknown {sorted(unknown)}; use solo, group or solo,group")
    # The channel's fsync cost depends on the disk, so measure on the one the runs would use.
    workdir = Path(tempfile.mkdtemp(prefix="rw-runtime-bench-", dir=args.dir or os.getcwd()))
    try:
        parts = {mode: run_mode(mode, args, workdir) for mode in modes}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "benchmark": "runtime_overhead",
        "target_percent": TARGET_PERCENT,
        "steps_per_block": args.steps,
        "warmup_steps": args.warmup_steps,
        "pinned": args.pin,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "modes": parts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    render(result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
