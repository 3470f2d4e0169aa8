"""Checkpoints under the control plane: the runtime binds `runwright.ckpt` to the run.

- Checkpoint events go to the controller through the file channel (`ChannelSink`), where the
  controller records each commit in the store's catalog (for queries; not a second pointer).
- The fence is the fence of the run's checkpoint root (`layout.checkpoint_root`: the spec's
  `checkpoint.location`/<run id>, else `<run_dir>/checkpoints/`): a `LocalFence` in a folder, an
  `ObjectFence` on `s3://` (`ckpt.fence.open_fence`). It is the one authority for which
  generation may publish and which checkpoint is latest. The store raises its generation inside
  every transaction that bumps the run's generation, so a stale worker cannot publish even while
  the controller is down; no database connection is needed in the worker.
"""

import os
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from runwright.ckpt import Checkpointer, CheckpointError
from runwright.ckpt.events import CheckpointEvent
from runwright.ckpt.fence import open_fence
from runwright.ckpt.inventory import resume_root
from runwright.ckpt.start import start_generation
from runwright.ckpt.storage import CheckpointStorage
from runwright.events import EventType
from runwright.layout import RunPaths, checkpoint_root
from runwright.protocol import ENV_RESTORE_AT_MOST_STEP, ENV_RESUME_FROM
from runwright.runtime.tracing import rank_tracer
from runwright.spec.parallel import parallel_layout

if TYPE_CHECKING:
    from runwright.runtime.context import RunContext


class ChannelSink:
    """An `EventSink` that forwards checkpoint events into the worker's channel."""

    def __init__(self, ctx: "RunContext") -> None:
        self.ctx = ctx

    def emit(self, event: CheckpointEvent) -> None:
        # One RESTORED per generation and rank, whatever retries the process makes.
        restored = event.type == EventType.RESTORED
        self.ctx.channel.send(
            str(event.type),
            event_id=f"g{event.generation}-r{self.ctx.rank}-restored" if restored else None,
            step=event.step,
            checkpoint_id=event.checkpoint_id,
            world_size=self.ctx.world_size,
            attributes=dict(event.attributes),
            generation=event.generation,
        )
        if (tracer := rank_tracer(self.ctx)) is not None:
            tracer.checkpoint_event(event.type, event.step, event.checkpoint_id,
                                    event.time_unix_seconds, event.attributes)  # fmt: skip


def make_checkpointer(ctx: "RunContext", **kwargs: Any) -> Checkpointer:
    spec = ctx.spec
    defaults: dict[str, Any] = {}
    if spec is not None:
        defaults = {
            "policy": spec.checkpoint,
            "spec_hash": spec.spec_hash,
            # The plan this generation resolved (an elastic run's size may differ from the spec's).
            "parallel_layout": parallel_layout(
                spec, int(ctx.plan.dp.value or 1) if ctx.plan else None
            ),
        }
    root = checkpoint_root(
        RunPaths(ctx.run_dir), spec.checkpoint.location if spec is not None else None
    )
    # checkpoint.resume_from: the controller resolved it against the run's root; under plain
    # torchrun a run id is looked up under the default root.
    resume_from = os.environ.get(ENV_RESUME_FROM) or None
    if resume_from is None and spec is not None and spec.checkpoint.resume_from is not None:
        resume_from = resume_root(spec.checkpoint.resume_from)
    if resume_from is not None:
        defaults["resume_from"] = resume_from
    at_most = os.environ.get(ENV_RESTORE_AT_MOST_STEP)
    if at_most and at_most.isdigit():
        defaults["restore_at_most_step"] = int(at_most)
    fence = open_fence(root)
    if not ctx.managed:
        # Standalone: this start fences off any writer left from an earlier one, collecting
        # residue first so a full volume has room for the generation file. The other ranks read
        # the new generation only after rank 0 has written it, and raise what rank 0 raised
        # instead of waiting for it forever.
        outcome: list[BaseException | None] = [None]
        if ctx.rank == 0:
            try:
                start_generation(
                    fence,
                    CheckpointStorage(root),
                    gc_min_age_seconds=kwargs.get("gc_min_age_seconds", 3600.0),
                )
            except CheckpointError as exc:
                outcome[0] = exc
        if dist.is_available() and dist.is_initialized():
            dist.broadcast_object_list(outcome, src=0)
        if outcome[0] is not None:
            raise outcome[0]
    return Checkpointer(
        str(root),
        fence=fence,
        generation=ctx.generation if ctx.managed else None,
        events=ChannelSink(ctx),
        **{**defaults, **kwargs},
    )
