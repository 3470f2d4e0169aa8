"""Exact and near dedup, and an eval split isolated from train.

Order (deterministic: candidates arrive in recipe source order, input order, record order):
1. exact: drop a document whose normalised-text hash was seen before (blake2b-128);
2. eval selection: a document is eval when a seeded hash of its text hash falls below
   `fraction`, so every exact copy of it lands on the same side (and step 1 kept only one);
3. near: MinHash signatures over word shingles (Broder, "On the resemblance and containment of
   documents", 1997) go into datasketch's MinHashLSH. Eval documents are inserted first, then each
   train document is queried: a hit on an eval document drops it as `near-duplicate-of-eval`
   (this is the recorded train/eval boundary), a hit on a train document as `near-duplicate`.
"""

import hashlib
import re
from dataclasses import dataclass

import numpy as np
from datasketch import LeanMinHash, MinHash, MinHashLSH

from runwright.data.builder.recipe import DedupSpec, EvalSpec, NearDedupSpec

# datasketch >= 2 names its hashing scheme; pinning it keeps signatures comparable across versions.
MINHASH_SCHEME = "affine32"
_WORD = re.compile(r"\w+", re.UNICODE)


def text_hash(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def shingles(text: str, words: int) -> list[bytes]:
    """Word k-shingles of the lower-cased text (the whole text when shorter than k words)."""
    tokens = _WORD.findall(text.lower())
    if len(tokens) <= words:
        return [" ".join(tokens).encode("utf-8")]
    return [" ".join(tokens[i : i + words]).encode("utf-8") for i in range(len(tokens) - words + 1)]


def signature(text: str, spec: NearDedupSpec) -> np.ndarray:
    """MinHash hash values (uint64, num_perm long)."""
    m = MinHash(num_perm=spec.num_perm, seed=spec.seed, scheme=MINHASH_SCHEME)
    m.update_batch(shingles(text, spec.shingle_words))
    return m.hashvalues.astype(np.uint64)


def is_eval(digest: bytes, spec: EvalSpec) -> bool:
    """Seeded hash of the text hash below fraction * 2^64 (a uniform, stable selection)."""
    if spec.fraction <= 0:
        return False
    h = hashlib.blake2b(spec.seed.to_bytes(8, "little") + digest, digest_size=8).digest()
    return int.from_bytes(h, "little") < spec.fraction * (1 << 64)


@dataclass(frozen=True)
class Candidate:
    """A document that passed the filters."""

    source: str
    digest: bytes
    signature: np.ndarray | None


@dataclass(frozen=True)
class Decision:
    """What happened to one candidate."""

    split: str | None
    """`train` or `eval`, or None when dropped."""
    reason: str | None = None
    """`exact-duplicate`, `near-duplicate` or `near-duplicate-of-eval` when dropped."""


def decide(candidates: list[Candidate], dedup: DedupSpec, evals: EvalSpec) -> list[Decision]:
    """One decision per candidate, in order."""
    seen: set[bytes] = set()
    split: list[str | None] = []
    reasons: list[str | None] = []
    for c in candidates:
        if dedup.exact and c.digest in seen:
            split.append(None)
            reasons.append("exact-duplicate")
            continue
        seen.add(c.digest)
        split.append("eval" if is_eval(c.digest, evals) else "train")
        reasons.append(None)
    near = dedup.near
    if near is not None:
        lsh = MinHashLSH(threshold=near.threshold, num_perm=near.num_perm)
        eval_keys: set[int] = set()
        for phase in ("eval", "train"):
            for k, c in enumerate(candidates):
                if split[k] != phase or c.signature is None:
                    continue
                mh = LeanMinHash(seed=near.seed, hashvalues=c.signature, scheme=MINHASH_SCHEME)
                hits = lsh.query(mh)
                if hits:
                    split[k] = None
                    of_eval = phase == "train" and any(h in eval_keys for h in hits)
                    reasons[k] = "near-duplicate-of-eval" if of_eval else "near-duplicate"
                    continue
                lsh.insert(k, mh)
                if phase == "eval":
                    eval_keys.add(k)
    return [Decision(s, r) for s, r in zip(split, reasons, strict=True)]
