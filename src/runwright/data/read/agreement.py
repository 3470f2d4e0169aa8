"""Every rank's findings about bad shards, combined: a shard one rank found bad is bad for all.

Each rank checks only the shards its own rows read, and a shard damaged while the ranks read it
can look whole to one rank and broken to the next (rank 0 checked it before the write, rank 1
after). Acting on its own view, rank 1 would leave the shard out and rank 0 would not: their
streams, and with them which samples each rank trains on, would part for good. So the loader
never acts on its own view. At each point where it could (every step it hands out, and before it
plans), every rank brings its findings to one all-reduce and all act on the union: the same
shards, left out from the same step. A decision taken at a fixed step by every rank needs no
later correction, and the cursor each rank then commits records the same quarantine.

The all-reduce runs on a gloo group of the loader's own (a side group), so it is never
interleaved with the training backend's collectives and never waits for a device. Each decision
is one int64 all-reduce (any new finding?) and, only when there is one, a second of one code per
shard (MAX: `missing` over `corrupt`). Without a process group, or with one rank, a rank's
findings are the decision.
"""

from typing import Any

REASONS = ("corrupt", "missing")
"""Reason codes 1 and 2 (0: nothing found); MAX keeps the graver, a file that is gone."""


def _distributed(group: Any) -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


class ShardAgreement:
    """The union of every rank's bad shards, decided together.

    Every rank of `group` (default: all ranks of the default process group) must construct one
    and call `agree` at the same points, as every rank's loader does when all of them read the
    same steps; the side group is made here, a collective call of its own.
    """

    def __init__(self, shard_count: int, group: Any = None) -> None:
        self.shard_count = shard_count
        self._group: Any = None
        self._active = False
        if _distributed(group):
            import torch.distributed as dist

            self._group = group if group is not None else dist.new_group(backend="gloo")
            self._active = True

    @property
    def active(self) -> bool:
        """True when there are other ranks to agree with."""
        return self._active

    def agree(self, local: dict[int, str]) -> dict[int, str]:
        """Shard index -> reason, for every shard any rank holds in its `local` findings."""
        if not self._active:
            return dict(local)
        import torch
        import torch.distributed as dist

        flag = torch.tensor([len(local)], dtype=torch.int64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        if not int(flag.item()):
            return {}
        codes = torch.zeros(self.shard_count, dtype=torch.int64)
        for index, reason in local.items():
            codes[index] = REASONS.index(reason) + 1
        dist.all_reduce(codes, op=dist.ReduceOp.MAX, group=self._group)
        return {i: REASONS[code - 1] for i, code in enumerate(codes.tolist()) if code}
