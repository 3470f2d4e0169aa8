"""How the reference trainer spreads the GPT over its ranks, from `parallelism` in the spec.

    ddp        dp replicas (DistributedDataParallel), gradients all-reduced       tp 1
    fsdp2      parameters, gradients and optimizer state sharded over dp           tp 1
               (torch.distributed.fsdp.fully_shard, per block and the root)
    tp         each block's heads and feed-forward width split over tp ranks       dp 1
               (DTensor parallelize_module: q/k/v and fc ColwiseParallel, proj and fc_out
               RowwiseParallel, the Megatron-LM split: Shoeybi et al. 2019, section 3)
    fsdp2 x tp a (dp, tp) DeviceMesh: tp inside each dp group, FSDP2 over dp           2-D

Ranks are laid out row-major over the (dp, tp) mesh, so rank = dp_rank x tp + tp_rank: the tp
ranks of one dp group are neighbours (one node's fast links, `resources.same_node_tp`) and read
the same batch, so the loader takes the dp rank and size, never the global rank. Everything runs
on gloo (CPU) and NCCL (GPU). The checkpoint's state dict holds DTensors wherever a layout shards
(torch.distributed.checkpoint.state_dict), so DCP saves real shards and reshards them into any
other layout on restore. `ddp` with tp > 1 at dp > 1 is refused at submit (spec/parallel.py).
"""

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.nn.parallel import DistributedDataParallel

from runwright.runtime import allreduce_bucket, record_fsdp
from runwright.spec import JobSpec

BLOCK_PLAN = {
    "q": ColwiseParallel(),
    "k": ColwiseParallel(),
    "v": ColwiseParallel(),
    "proj": RowwiseParallel(),
    "fc": ColwiseParallel(),
    "fc_out": RowwiseParallel(),
}
"""Per block: the column-split projections' outputs stay local (each rank's heads, its slice of
the feed-forward width); the row-split ones all-reduce, so the residual stream is replicated."""


@dataclass
class Layout:
    """A model spread over the ranks, and what the training step needs of that."""

    name: str
    """ddp, fsdp2, tp or fsdp2+tp."""
    model: nn.Module
    """The module to call (DDP's wrapper, or the model itself when it is sharded in place)."""
    dp: int
    dp_rank: int
    tp: int
    dp_group: Any
    """Process group of this rank's dp peers: the loss-token count is summed over it."""
    grad_sync_seconds: float = 0.0
    """DDP only: seconds in the gradient all-reduce this step (it overlaps backward); FSDP2's
    reduce-scatter runs inside backward and is counted there."""
    _ddp: DistributedDataParallel | None = field(default=None, repr=False)

    @property
    def replica_ranks(self) -> tuple[int, ...]:
        """The ranks holding bitwise the same parameters and optimizer state as this one (the
        corruption checks compare them): every dp rank under DDP; () when each rank holds its
        own shard (fsdp2 shards over every dp rank, tp splits every block)."""
        return tuple(range(self.dp)) if self._ddp is not None and self.dp > 1 else ()

    @contextlib.contextmanager
    def accumulating(self, last: bool) -> Iterator[None]:
        """Gradients of every micro-batch but the last stay local: one sync per step."""
        if self._ddp is not None and not last:
            with self._ddp.no_sync():
                yield
            return
        if self.name.startswith("fsdp2"):
            self.model.set_requires_gradient_sync(last)
        yield

    def clip_grad_norm(self, parameters: list[nn.Parameter], max_norm: float) -> torch.Tensor:
        """Clip to the global norm over every shard; a plain scalar tensor on every rank."""
        grads = [p.grad for p in parameters if p.grad is not None]
        by_mesh: dict[Any, list[torch.Tensor]] = {}
        for grad in grads:
            by_mesh.setdefault(grad.device_mesh if isinstance(grad, DTensor) else None, []).append(
                grad
            )
        if len(by_mesh) == 1:  # one kind: torch's own, as DDP always did
            norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
            return norm.full_tensor() if isinstance(norm, DTensor) else norm
        # Tensor parallel: the split projections' gradients are DTensors on the (dp, tp) mesh,
        # the rest plain tensors (or, under FSDP2, DTensors on the dp mesh alone), which torch's
        # foreach kernels will not mix. The global norm is sqrt(sum of each group's norm^2).
        parts = []
        for group in by_mesh.values():
            part = torch.nn.utils.get_total_norm(group)
            parts.append((part.full_tensor() if isinstance(part, DTensor) else part).float())
        norm = torch.stack(parts).square().sum().sqrt()
        coefficient = min(1.0, max_norm / (float(norm) + 1e-6))  # torch's clip_grads_with_norm_
        if coefficient < 1.0:
            for grad in grads:
                grad.mul_(coefficient)
        return norm


def apply_layout(
    model: nn.Module, spec: JobSpec, device: torch.device, dp: int | None = None
) -> Layout:
    """Spread `model` (built identically on every rank, from the same seed) over the ranks as
    the spec's parallelism asks; call after init_process_group. `dp`: the data-parallel degree
    of the plan this generation runs (an elastic run's differs from the spec's own plan)."""
    dp = int(spec.plan.dp.value or 1) if dp is None else dp
    tp = spec.parallelism.tp
    sharded = spec.parallelism.dp_mode == "fsdp2"
    if tp == 1 and not sharded:
        return _ddp(model, device, dp)
    mesh = init_device_mesh(device.type, (dp, tp), mesh_dim_names=("dp", "tp"))
    if tp > 1:
        _tensor_parallel(model, mesh["tp"])
    if sharded and dp > 1:
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        record_fsdp(model)  # every all-gather and reduce-scatter in the collective log
    name = "+".join(n for n, used in (("fsdp2", sharded and dp > 1), ("tp", tp > 1)) if used)
    return Layout(
        name=name or "fsdp2",
        model=model,
        dp=dp,
        dp_rank=mesh["dp"].get_local_rank(),
        tp=tp,
        dp_group=mesh["dp"].get_group(),
    )


def _tensor_parallel(model: nn.Module, mesh: DeviceMesh) -> None:
    for block in model.blocks:
        parallelize_module(block, mesh, BLOCK_PLAN)


def timed_allreduce(state: Layout, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default gradient hook (average over the dp ranks: divide, then all-reduce), with
    its seconds added to `state.grad_sync_seconds` (the step's grad_sync phase)."""
    started = time.perf_counter()

    def done() -> None:
        state.grad_sync_seconds += time.perf_counter() - started

    # Recorded in the collective log with the bucket's index and bytes (hang attribution).
    return allreduce_bucket(bucket, None, state.dp, on_done=done)


def _ddp(model: nn.Module, device: torch.device, dp: int) -> Layout:
    cuda = device.type == "cuda"
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    layout = Layout(
        name="ddp", model=ddp, dp=dp, dp_rank=dist.get_rank(), tp=1,
        dp_group=dist.group.WORLD, _ddp=ddp,
    )  # fmt: skip

    ddp.register_comm_hook(layout, timed_allreduce)
    return layout
