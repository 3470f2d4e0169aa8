"""Shuffle algorithms: random-access permutations of [0, n), keyed by the logical context.

`permute-v1` is a 4-round balanced Feistel network on the smallest even-bit domain 2^(2h) >= n,
with cycle walking to stay inside [0, n) (Black and Rogaway, "Ciphers with Arbitrary Finite
Domains", CT-RSA 2002). A Feistel network is a bijection whatever its round function, and cycle
walking restricted to [0, n) keeps it one, so sample k of an epoch is computed without
materialising samples 0..k-1: O(1) memory and O(1) expected time per sample. With b = bits(n - 1)
and 2h = b rounded up to even, the domain is 2^(2h) <= 2^(b + 1) <= 4n, so a cycle walk takes at
most 4 steps on average (e.g. n = 1000: b = 10, domain 1024, 1.02 steps).

The key is derived from (dataset id, seed, source, epoch, pass) by sha256, so the logical order is
a pure function of those values and nothing else (seed 003, "shuffle and mixture are versioned
algorithms").
"""

from typing import Protocol

import numpy as np

from runwright.data.registry import Registry
from runwright.spec import sha256_hex

_MASK64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
# splitmix64 constants (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
# OOPSLA 2014).
_GOLDEN = np.uint64(0x9E37_79B9_7F4A_7C15)
_MIX1 = np.uint64(0xBF58_476D_1CE4_E5B9)
_MIX2 = np.uint64(0x94D0_49BB_1331_11EB)
_ROUNDS = 4


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser applied elementwise to uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def context_key(*parts: object) -> int:
    """A 64-bit key from the logical context, e.g. ("permute-v1", dataset_id, seed, source)."""
    text = "|".join(str(p) for p in parts)
    return int(sha256_hex(text)[:16], 16)


class Shuffle(Protocol):
    """A keyed, random-access bijection on [0, n)."""

    name: str

    def permute(self, positions: np.ndarray, n: int, key: int) -> np.ndarray:
        """Map logical positions (int64 in [0, n)) to sample indices (int64 in [0, n))."""
        ...


def _mix_inplace(z: np.ndarray) -> np.ndarray:
    """splitmix64 on a uint64 array, overwriting it (the caller holds np.errstate)."""
    z += _GOLDEN
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


# Below this many positions still cycle-walking, plain Python integers are cheaper than
# another round of numpy calls (a numpy pass costs ~20 us whatever its size).
_PYTHON_WALK = 16
_MASK64_INT = (1 << 64) - 1


def _mix_int(z: int) -> int:
    """splitmix64 on one Python integer (the same wrapping arithmetic as `splitmix64`)."""
    z = (z + 0x9E37_79B9_7F4A_7C15) & _MASK64_INT
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64_INT
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64_INT
    return z ^ (z >> 31)


class FeistelPermutation:
    """permute-v1; memory O(1), expected time O(1) per position.

    Each cycle-walk pass encrypts only the positions still outside [0, n); the work per pass
    is a fixed number of in-place numpy operations, and the last few stragglers (a domain of
    up to 4n leaves a long geometric tail of passes) are walked with Python integers.
    """

    name = "permute-v1"

    def permute(self, positions: np.ndarray, n: int, key: int) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if n <= 0:
            raise ValueError("cannot permute an empty range")
        if pos.size and (pos.min() < 0 or pos.max() >= n):
            raise ValueError(f"positions must lie in [0, {n})")
        if n == 1:
            return np.zeros_like(pos)
        half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
        half_mask = np.uint64((1 << half_bits) - 1)
        round_keys = [splitmix64(np.array([key + r], dtype=np.uint64))[0] for r in range(_ROUNDS)]
        limit = np.uint64(n)
        with np.errstate(over="ignore"):
            out = self._encrypt(pos.astype(np.uint64), half_bits, half_mask, round_keys)
            todo = np.flatnonzero(out >= limit)
            while todo.shape[0] > _PYTHON_WALK:
                x = self._encrypt(out[todo], half_bits, half_mask, round_keys)
                out[todo] = x
                todo = todo[x >= limit]
        if todo.shape[0]:
            keys = [int(k) for k in round_keys]
            mask = (1 << half_bits) - 1
            for i in todo.tolist():
                v = int(out[i])
                while v >= n:
                    left, right = v >> half_bits, v & mask
                    for rk in keys:
                        left, right = right, left ^ (_mix_int(right ^ rk) & mask)
                    v = (left << half_bits) | right
                out[i] = v
        return out.astype(np.int64)

    @staticmethod
    def _encrypt(
        x: np.ndarray, half_bits: int, half_mask: np.uint64, round_keys: list[np.uint64]
    ) -> np.ndarray:
        """One Feistel encryption of `x` (consumed; the caller holds np.errstate)."""
        shift = np.uint64(half_bits)
        left = x >> shift
        right = x
        right &= half_mask
        f = np.empty_like(right)
        for rk in round_keys:
            np.bitwise_xor(right, rk, out=f)
            _mix_inplace(f)
            f &= half_mask
            f ^= left
            left, right, f = right, f, left
        left <<= shift
        left |= right
        return left


SHUFFLES: Registry[Shuffle] = Registry("shuffle")
SHUFFLES.register("permute-v1", FeistelPermutation())
