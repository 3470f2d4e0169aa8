"""Mixture algorithms: which source the next document of the logical sequence comes from.

A mixture sees only counters (units consumed per source, draws so far) and the set of sources
still active, so its state is exactly what a DataCursor stores.

- `quota-v1`: deterministic exact quotas. Draw t is a unit time slot; source i's (u_i + 1)-th unit
  has the pseudo-release floor(u_i / w_i) and pseudo-deadline ceil((u_i + 1) / w_i), and the
  released source with the earliest deadline wins (ties: lower index). This is earliest-deadline
  scheduling of Pfair subtasks (Baruah, Cohen, Plaxton and Varvel, "Proportionate progress",
  Algorithmica 1996); on one "processor" with sum(w) = 1 it keeps every prefix of k draws within
  `|c_i - w_i * k| < 1` (tested by hypothesis). Megatron-LM's blend uses the simpler
  largest-deficit rule `argmax w_i * (k + 1) - c_i`, which drifts past 1 (e.g. 1.02 with 8
  sources), so it is not used. For `tokens`/`loss_tokens` units, u counts units and t is the units
  consumed so far; each source then stays within one document's units of its target. `edf_loop`
  is the definition; the loader runs the same loop compiled (`_kernels.quota_v1`, ~5 ns per
  draw with two sources against ~0.3 us in Python), and the tests check one against the other.
- `staged-quota-v1`: quota-v1 within each stage of `mixture.stages` (stages.py). The stream hands
  it the units consumed since the stage began, so every prefix of a stage keeps quota-v1's bound
  against that stage's weights; what changes is only where the counters start.
- `categorical-v1`: independent draws, `I_t ~ Categorical(w)`, so `E[N_i(H)] = H * w_i` but not
  exact (seed 003, "shuffle and mixture are versioned algorithms"). Draw t uses a counter-based
  uniform from splitmix64(key + t), so draw t is random-access too.
"""

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from runwright.data.read.kernels import quota_v1
from runwright.data.read.shuffle import splitmix64
from runwright.data.registry import Registry


class Mixture(Protocol):
    """Chooses the sources of the next block of draws from counters alone.

    Only the sources active for the whole block are passed; `shares` sum to one. `units[i]` is
    what source i consumed so far (updated in place). `ahead` is None for the `documents` unit
    (one unit per draw); otherwise `ahead[i][k]` is the units of source i's k-th next document,
    `count` of them per source.
    """

    name: str

    def choose_block(
        self,
        shares: Sequence[float],
        units: list[int],
        draws: int,
        key: int,
        count: int,
        ahead: list[np.ndarray] | None,
    ) -> np.ndarray:
        """Source indices (int64) of draws `draws .. draws + count - 1`."""
        ...


class QuotaMixture:
    """quota-v1: earliest-deadline-first over Pfair windows (exact quotas)."""

    name = "quota-v1"

    def choose_block(
        self,
        shares: Sequence[float],
        units: list[int],
        draws: int,
        key: int,
        count: int,
        ahead: list[np.ndarray] | None,
    ) -> np.ndarray:
        counters = np.asarray(units, dtype=np.int64)
        out = np.empty(count, dtype=np.int64)
        look_ahead = None if ahead is None else [np.ascontiguousarray(a, np.int64) for a in ahead]
        quota_v1(np.asarray(shares, dtype=np.float64), counters, out, look_ahead)
        units[:] = counters.tolist()
        return out


def edf_loop(
    shares: Sequence[float],
    units: list[int],
    count: int,
    ahead: list[np.ndarray] | None,
) -> list[int]:
    """quota-v1 one draw at a time: the definition (any unit), in Python."""
    floor, ceil = math.floor, math.ceil
    m = len(shares)
    slot = sum(units)
    release = [floor(u / w) for u, w in zip(units, shares, strict=True)]
    deadline = [ceil((u + 1) / w) for u, w in zip(units, shares, strict=True)]
    taken = [0] * m
    out: list[int] = []
    append = out.append
    for _ in range(count):
        best, best_deadline = -1, math.inf
        for i in range(m):
            if release[i] <= slot and deadline[i] < best_deadline:
                best, best_deadline = i, deadline[i]
        if best < 0:
            # Nothing released (only possible when units grow by more than one per draw):
            # take the largest deficit share * (slot + 1) - u.
            best = max(range(m), key=lambda i: shares[i] * (slot + 1) - units[i])
        step = 1
        if ahead is not None:
            step = int(ahead[best][taken[best]])
            taken[best] += 1
        units[best] += step
        slot += step
        release[best] = floor(units[best] / shares[best])
        deadline[best] = ceil((units[best] + 1) / shares[best])
        append(best)
    return out


class StagedQuotaMixture(QuotaMixture):
    """staged-quota-v1: quota-v1 over the current stage's counters (the stream resets them)."""

    name = "staged-quota-v1"


class CategoricalMixture:
    """categorical-v1: independent draws with the target weights as probabilities."""

    name = "categorical-v1"

    def choose_block(
        self,
        shares: Sequence[float],
        units: list[int],
        draws: int,
        key: int,
        count: int,
        ahead: list[np.ndarray] | None,
    ) -> np.ndarray:
        t = np.arange(draws, draws + count, dtype=np.uint64)
        with np.errstate(over="ignore"):
            mixed = splitmix64(t + np.uint64(key))
        # 53 high bits give a uniform double in [0, 1) (the IEEE-754 mantissa width).
        u = (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        edges = np.cumsum(np.asarray(shares, dtype=np.float64))
        choice = np.minimum(np.searchsorted(edges, u, side="right"), len(shares) - 1)
        # Source i's picks take its next documents in order, so it consumed the first c_i.
        picked = np.bincount(choice, minlength=len(shares)).tolist()
        for i, c in enumerate(picked):
            units[i] += c if ahead is None else int(ahead[i][:c].sum())
        return choice.astype(np.int64)


MIXTURES: Registry[Mixture] = Registry("mixture")
MIXTURES.register("quota-v1", QuotaMixture())
MIXTURES.register("categorical-v1", CategoricalMixture())
MIXTURES.register("staged-quota-v1", StagedQuotaMixture())


def mixture_sequence(
    algorithm: str, weights: Sequence[float], draws: int, key: int = 0
) -> list[int]:
    """The first `draws` source choices with every source active and the documents unit."""
    total = float(sum(weights))
    shares = [w / total for w in weights]
    units = [0] * len(weights)
    return MIXTURES.get(algorithm).choose_block(shares, units, 0, key, draws, None).tolist()
