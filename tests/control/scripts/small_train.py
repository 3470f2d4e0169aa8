"""A small data-parallel training script for the recovery tests, built only on public APIs.

Every rank fits a linear model (DDP over gloo) on batches that are a pure function of the global
step, checkpoints through `ctx.checkpointer()`, reports through the runtime's step loop (no event
by hand: the library sends what recovery and the report read), and can inject the faults the
tests need. `--once-dir` makes an injected fault fire only on the first
attempt (a marker file remembers it fired), as a transient fault would. `--hold-at-step N
--hold-file PATH` keeps every rank at step N's boundary until PATH exists, so a test can act on a
group it knows is alive.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

import runwright.runtime
from runwright.ckpt import CommitStep, ModelProbe, TrainState


class Position:
    """The data cursor: how many global samples were consumed."""

    def __init__(self) -> None:
        self.samples = 0

    def state_dict(self) -> dict[str, int]:
        return {"samples": self.samples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.samples = int(state["samples"])


class SlowSave:
    """A commit probe that holds every save for `seconds` before its shards are written, so a
    save is in flight long enough for the controller to see it (CHECKPOINTING)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def reached(self, step: CommitStep, bytes_written: int = 0) -> None:
        if step is CommitStep.WRITE_SHARDS and bytes_written == 0:
            time.sleep(self.seconds)


def fire_once(once_dir: str | None, name: str) -> bool:
    if once_dir is None:
        return True
    marker = Path(once_dir) / name
    if marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("fired\n")
    return True


@record
def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--nan-at-step", type=int)
    parser.add_argument("--raise-at-step", type=int)
    parser.add_argument("--once-dir")
    parser.add_argument("--save-seconds", type=float, default=0.0)
    parser.add_argument("--hold-at-step", type=int)
    parser.add_argument("--hold-file")
    # A non-deterministic op on purpose: each process perturbs its inputs by its own pid, so a
    # replayed step differs from the failed generation's (control/replay_check.py).
    parser.add_argument("--nondeterministic", action="store_true")
    # A long step that computes (rank 0 spins in its main thread while its peers wait in the
    # gradient all-reduce): slow, not blocked (control/stall.py).
    parser.add_argument("--busy-at-step", type=int)
    parser.add_argument("--busy-seconds", type=float, default=0.0)
    args = parser.parse_args()

    ctx = runwright.runtime.init()
    dist.init_process_group("gloo")
    spec, plan = ctx.spec, ctx.plan
    assert spec is not None and plan is not None
    total = int(plan.total_steps.value)
    per_rank = int(plan.global_batch_samples.value) // ctx.world_size
    torch.manual_seed(spec.training.seed)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.training.optimizer.lr)
    position = Position()
    state = TrainState(model=model, optimizer=optimizer, data_loader=position)
    # The restore probe (docs/ckpt.md, "Restore validation"): a fixed batch's output, recorded at
    # every save and checked after every restore, before the first step.
    probe_x = torch.linspace(-1, 1, 32).reshape(4, 8)
    ckpt = ctx.checkpointer(
        probe=SlowSave(args.save_seconds) if args.save_seconds else None,
        restore_probe=ModelProbe(model, lambda: model.module(probe_x).pow(2).mean()),
    )
    restored = ckpt.restore(state)
    step = restored.step if restored else 0
    loop = ctx.step_loop(step, total)
    for step in loop:
        g = torch.Generator().manual_seed(10_000 * step + ctx.rank)
        x = torch.randn(per_rank, 8, generator=g)
        y = x.sum(dim=1, keepdim=True)
        if args.nondeterministic:
            x = x + 1e-6 * (os.getpid() % 997)
        if ctx.should_skip(step):
            position.samples += per_rank * ctx.world_size
            loop.complete(step, skipped=True, samples=per_rank)
            continue
        loss = torch.nn.functional.mse_loss(model(x), y)
        if step == args.nan_at_step and ctx.rank == 1 and fire_once(args.once_dir, "nan"):
            loss = loss * float("nan")
        if step == args.busy_at_step and ctx.rank == 0:
            busy_until = time.monotonic() + args.busy_seconds
            while time.monotonic() < busy_until:
                pass
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        loop.guard(step, loss=loss, grad_norm=grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        position.samples += per_rank * ctx.world_size
        if step == args.raise_at_step and ctx.rank == 0:
            raise ValueError(f"deterministic bug at step {step}")
        loop.complete(
            step,
            loss=loss,
            grad_norm=grad_norm,
            samples=per_rank,
            device_tokens=per_rank * 8,
            loss_tokens=per_rank,
        )
        ckpt.maybe_save(step, state, loss=float(loss))
        time.sleep(args.step_sleep)
        if step == args.hold_at_step and args.hold_file:
            while not Path(args.hold_file).exists():
                time.sleep(0.05)
    if loop.stop_request is not None and loop.stop_request.save:
        ckpt.maybe_save(step, state, stopping=True)
    ckpt.close()
    # The checkpointer reported the restored step and the close reports the final parameter
    # digests (TRAINING_COMPLETE), which recovery equivalence (govern/compare.py) compares.
    ctx.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
