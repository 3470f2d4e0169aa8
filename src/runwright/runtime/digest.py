"""Replica digests and the vote over them (silent-data-corruption checks, runtime/integrity.py).

Data-parallel replicas hold bitwise-equal parameters and optimizer state after every step (they
apply the same all-reduced gradient to the same state with the same kernels). A digest must be
cheap enough to take every K steps, run where the tensors live (no copy to the host) and change
with any single flipped bit:

    per tensor, its raw bytes as signed integers w (int32 for fp32, int16 for bf16/fp16, ...),
    widened to int64:   lane 1 = sum(w) mod 2^64,   lane 2 = sum(w * w) mod 2^64

A flipped bit k changes one word by +-2^k, so lane 1 changes by +-2^k mod 2^64, never 0: one flip
is always seen. Two corruptions that cancel in lane 1 (+2^k in one word, -2^k in another) change
lane 2 unless w1^2 - w2^2 cancels as well; we accept that residue (it takes two faults in one
check interval, arranged just so). The (tensors x 2) lanes fold into one 64-bit number
(BLAKE2b of their bytes, on the host: 16 bytes per tensor), so the ranks exchange 8 bytes each.
The lanes are kept, so a failed vote can name the first tensor that differs.

The same pass checks that every floating tensor is finite (an exponent flip can make Inf/NaN,
which the step guards would only see one step later, as a NaN loss, and misclassify).
"""

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch

CHUNK_ELEMENTS = 1 << 22
"""Widened to int64 a chunk at a time: 4 Mi elements = 32 MiB of scratch per lane, whatever the
tensor's size."""
_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def state_tensors(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every parameter, then every optimizer-state tensor (`<param>/<key>`),
    in one fixed order on every rank: the parameters' declaration order, the state keys sorted."""
    named = [(name, p) for name, p in model.named_parameters()]
    found: list[tuple[str, torch.Tensor]] = [(name, p.detach()) for name, p in named]
    if optimizer is not None:
        for name, p in named:
            state = optimizer.state.get(p, {})
            for key in sorted(state):
                value = state[key]
                if isinstance(value, torch.Tensor):
                    found.append((f"{name}/{key}", value.detach()))
    return found


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's own shard (replicas of a shard compare shards); a plain tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None else tensor


def tensor_lanes(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 [2] lanes of the tensor's raw bytes, a bool scalar: every element is finite),
    both where the tensor lives (no synchronisation here)."""
    flat = _local(tensor).detach().contiguous().reshape(-1)
    words = flat.view(_WORDS[flat.element_size()])
    lanes, finite = [], []
    for start in range(0, max(words.numel(), 1), CHUNK_ELEMENTS):
        wide = words[start : start + CHUNK_ELEMENTS].to(torch.int64)
        # not in place: an int64 tensor's .to(torch.int64) is the tensor itself
        lanes.append(torch.stack([wide.sum(), (wide * wide).sum()]))
        if flat.is_floating_point():
            finite.append(torch.isfinite(flat[start : start + CHUNK_ELEMENTS]).all())
    summed = lanes[0] if len(lanes) == 1 else torch.stack(lanes).sum(dim=0)
    ok = torch.stack(finite).all() if finite else torch.ones((), dtype=torch.bool)
    return summed, ok.to(summed.device)


@dataclass(frozen=True)
class Digest:
    """One rank's digest of its state."""

    value: int
    """The folded 64-bit digest (signed, to travel in an int64 tensor)."""
    lanes: torch.Tensor
    """(tensors x 2) int64 lanes on the host, in `names` order."""
    names: tuple[str, ...]
    nonfinite: tuple[str, ...]
    """Names of the floating tensors holding an Inf or NaN."""


def digest(tensors: Iterable[tuple[str, torch.Tensor]]) -> Digest:
    names, rows, finite = [], [], []
    for name, tensor in tensors:
        lanes, ok = tensor_lanes(tensor)
        names.append(name)
        rows.append(lanes)
        finite.append(ok)
    if not rows:
        return Digest(0, torch.zeros((0, 2), dtype=torch.int64), (), ())
    table = torch.stack(rows).cpu()  # the one synchronisation: 16 bytes per tensor
    flags = torch.stack(finite).cpu()
    nonfinite = tuple(name for name, ok in zip(names, flags.tolist(), strict=True) if not ok)
    folded = hashlib.blake2b(table.numpy().tobytes(), digest_size=8).digest()
    value = int.from_bytes(folded, "little", signed=True)
    return Digest(value, table, tuple(names), nonfinite)


def first_difference(mine: Digest, other_lanes: torch.Tensor) -> str | None:
    """The first tensor whose lanes differ from `other_lanes` (same names, same order)."""
    if other_lanes.shape != mine.lanes.shape:
        return "the tensor list itself (a different model or optimizer state)"
    differs = (mine.lanes != other_lanes).any(dim=1).nonzero()
    return mine.names[int(differs[0])] if len(differs) else None


@dataclass(frozen=True)
class Vote:
    """The verdict over one replica group's digests."""

    agreed: bool
    suspects: tuple[int, ...]
    """Ranks whose digest differs from the strict majority's; every rank of the group when
    there is no strict majority (two replicas that differ: each may be the bad one)."""
    majority: tuple[int, ...]
    """Ranks holding the majority digest; () without a strict majority."""

    def words(self) -> str:
        if self.agreed:
            return "replicas agree"
        if self.majority:
            return (
                f"rank{'s' if len(self.suspects) > 1 else ''} "
                f"{','.join(map(str, self.suspects))} differ from ranks "
                f"{','.join(map(str, self.majority))} (majority)"
            )
        return (
            f"ranks {','.join(map(str, self.suspects))} disagree with no majority: each may be "
            "the corrupted one (the rollback to the last known-good checkpoint decides the state)"
        )


def vote(digests: dict[int, int]) -> Vote:
    """`digests`: rank -> digest within one replica group."""
    counts = Counter(digests.values())
    if len(counts) <= 1:
        return Vote(True, (), tuple(sorted(digests)))
    value, count = counts.most_common(1)[0]
    if count * 2 > len(digests):
        majority = tuple(sorted(r for r, d in digests.items() if d == value))
        suspects = tuple(sorted(r for r, d in digests.items() if d != value))
        return Vote(False, suspects, majority)
    return Vote(False, tuple(sorted(digests)), ())
