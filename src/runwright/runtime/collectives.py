"""The collective preflight (issue 17): before the first step, prove that every rank of the group
can reach every other, and name the ones that cannot.

`RunContext.check_collectives()`, called once right after `init_process_group` (the reference
trainer does), runs

1. a monitored barrier over gloo (a side group when the default backend is NCCL): rank 0 waits
   for every rank up to the timeout and names all that did not arrive, instead of the whole group
   hanging until the collective timeout with no culprit (seed 000, 8.7);
2. an all-reduce on the training backend and device, whose sum every rank checks against
   W (W + 1) / 2, so a group that connects but computes wrongly is caught too.

Rank 0 reports COLLECTIVE_CHECKED with the times; a rank that finds a fault reports it with the
missing ranks and raises `CollectiveCheckError`, which the controller classifies as
infrastructure (control/failures.py): the nodes, not the code.
"""

import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from runwright.errors import RunwrightError
from runwright.events import EventType

if TYPE_CHECKING:
    from runwright.runtime.context import RunContext

DEFAULT_TIMEOUT_SECONDS = 60.0
MISSING = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")
"""How gloo's monitored barrier names, on rank 0, the ranks that did not arrive."""


class CollectiveCheckError(RunwrightError):
    """The collective preflight failed: a rank did not arrive, or a collective computed wrong."""


def check_collectives(ctx: "RunContext", timeout_seconds: float | None = None) -> dict:
    """Run the check on the default process group; returns what rank 0 reports."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise CollectiveCheckError(
            "check_collectives() needs the process group: call torch.distributed."
            "init_process_group first"
        )
    if timeout_seconds is None:
        spec = ctx.spec
        timeout_seconds = (
            spec.recovery.progress_timeout_seconds if spec is not None else DEFAULT_TIMEOUT_SECONDS
        )
    backend = str(dist.get_backend())
    rank, world = dist.get_rank(), dist.get_world_size()
    # monitored_barrier exists for gloo only: NCCL groups check through a gloo side group.
    group = None if backend == "gloo" else dist.new_group(backend="gloo")
    started = time.monotonic()
    try:
        dist.monitored_barrier(
            group=group, timeout=timedelta(seconds=timeout_seconds), wait_all_ranks=True
        )
    except RuntimeError as exc:
        detail = str(exc).splitlines()[0][:500]
        named = MISSING.search(detail)
        missing = [int(r) for r in re.findall(r"\d+", named.group(1))] if named else None
        _fail(ctx, f"not every rank reached the preflight barrier in {timeout_seconds:g} s: "
              f"{detail}", backend, world, missing)  # fmt: skip
    barrier_seconds = time.monotonic() - started
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    value = torch.tensor([float(rank + 1)], dtype=torch.float64, device=device)
    started = time.monotonic()
    dist.all_reduce(value)
    reduce_seconds = time.monotonic() - started
    want = world * (world + 1) / 2
    if float(value.item()) != want:
        _fail(ctx, f"an all-reduce over {world} ranks on {backend} summed to {value.item():g}, "
              f"not {want:g}: a rank computes or transports wrongly", backend, world)  # fmt: skip
    figures = {
        "ok": True,
        "backend": backend,
        "world_size": world,
        "barrier_seconds": round(barrier_seconds, 6),
        "all_reduce_seconds": round(reduce_seconds, 6),
        "timeout_seconds": timeout_seconds,
    }
    if rank == 0:
        ctx.event(EventType.COLLECTIVE_CHECKED, **figures)
    return figures


def _fail(
    ctx: "RunContext", message: str, backend: str, world: int, missing: list[int] | None = None
) -> None:
    """Report the fault (`missing_ranks`: what rank 0's barrier named) and raise it."""
    ctx.event(
        EventType.COLLECTIVE_CHECKED,
        ok=False,
        backend=backend,
        world_size=world,
        error=message,
        missing_ranks=missing,
    )
    raise CollectiveCheckError(message)
