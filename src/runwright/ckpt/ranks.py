"""How the ranks of one run agree on checkpoint decisions.

A save is a collective: if one rank decided to save and another did not, DCP's collectives would
hang. Every decision that depends on a clock, a backlog or a file check is therefore agreed (max
over ranks, or rank 0's value broadcast) on a gloo group of the checkpointer's own, so these small
collectives never interleave with the trainer's. A second group belongs to the commit protocol,
which may run on the async backlog's thread while the main thread agrees on the next decision.
Without torch.distributed (one process) every call returns its input.
"""

from typing import Any

import torch
import torch.distributed as dist


class Ranks:
    """This process's rank, the world size, and the checkpointer's two gloo groups."""

    def __init__(self) -> None:
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        self.control_group = dist.new_group(backend="gloo") if self.distributed else None
        """Main-thread agreement (save due, backlog full, restore choice)."""
        self.persist_group = dist.new_group(backend="gloo") if self.distributed else None
        """The commit protocol's collectives (DCP save/load, the coordinator's verdict)."""

    def any(self, flag: bool) -> bool:
        """True on every rank if `flag` is true on any rank."""
        if not self.distributed:
            return flag
        value = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.control_group)
        return bool(value.item())

    def from_rank0(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (picklable values)."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self.control_group)
        return box[0]
