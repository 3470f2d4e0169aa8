"""A data-parallel script whose steps go through phases that make alert conditions true and
then false again, for tests/control/test_alerts_live.py. Public APIs only.

Each rank fits a linear model; the gradients are all-reduced by hand inside the step loop's
`grad_sync` phase (where a fast rank waits for a slow one, as DDP's buckets do). `--phase
KIND:FIRST-LAST[:RANK]` makes steps FIRST..LAST (on every rank, or RANK only) behave:
  stall    0.2 s more in `data_wait` (an input stall)
  slow     0.25 s more in `forward` (a straggler on one rank; a throughput drop on all)
  spike    rank 0 reports ten times its loss (a loss spike)
  nan      rank 0's loss is NaN (the step guard refuses it, and the run rolls back past it)
Every other step takes about `--step-seconds` in `forward`.
"""

import argparse
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

import runwright.runtime
from runwright.ckpt import TrainState


class Position:
    def __init__(self) -> None:
        self.samples = 0

    def state_dict(self) -> dict[str, int]:
        return {"samples": self.samples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.samples = int(state["samples"])


def phases(given: list[str]) -> list[tuple[str, int, int, int | None]]:
    out = []
    for text in given:
        kind, steps, *rank = text.split(":")
        first, _, last = steps.partition("-")
        out.append((kind, int(first), int(last or first), int(rank[0]) if rank else None))
    return out


@record
def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--phase", action="append", default=[])
    args = parser.parse_args()
    plan_of = phases(args.phase)

    ctx = runwright.runtime.init()
    dist.init_process_group("gloo")
    spec, plan = ctx.spec, ctx.plan
    assert spec is not None and plan is not None
    total = int(plan.total_steps.value)
    per_rank = int(plan.global_batch_samples.value) // ctx.world_size
    torch.manual_seed(spec.training.seed)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.training.optimizer.lr)
    position = Position()
    state = TrainState(model=model, optimizer=optimizer, data_loader=position)
    ckpt = ctx.checkpointer()
    restored = ckpt.restore(state)
    loop = ctx.step_loop(restored.step if restored else 0, total)
    for step in loop:

        def active(kind: str, step: int = step) -> bool:
            return any(
                k == kind and first <= step <= last and (rank is None or rank == ctx.rank)
                for k, first, last, rank in plan_of
            )

        with loop.phase("data_wait"):
            g = torch.Generator().manual_seed(10_000 * step + ctx.rank)
            x = torch.randn(per_rank, 8, generator=g)
            y = x.sum(dim=1, keepdim=True)
            if active("stall"):
                time.sleep(0.2)
        if ctx.should_skip(step):
            position.samples += per_rank * ctx.world_size
            loop.complete(step, skipped=True, samples=per_rank)
            continue
        with loop.phase("forward"):
            time.sleep(args.step_seconds + (0.25 if active("slow") else 0.0))
            loss = torch.nn.functional.mse_loss(model(x), y)
        with loop.phase("backward"):
            loss.backward()
        with loop.phase("grad_sync"):
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= ctx.world_size
        nan = active("nan") and ctx.rank == 0
        loop.guard(step, loss=float("nan") if nan else loss)
        with loop.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        position.samples += per_rank * ctx.world_size
        reported = float(loss) * (10.0 if active("spike") and ctx.rank == 0 else 1.0)
        loop.complete(
            step, loss=reported, samples=per_rank, device_tokens=per_rank * 8, loss_tokens=per_rank
        )
        ckpt.maybe_save(step, state, loss=reported)
    if loop.stop_request is not None and loop.stop_request.save:
        ckpt.maybe_save(step, state, stopping=True)
    ckpt.close()
    ctx.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
