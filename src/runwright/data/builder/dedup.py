"""Exact and near dedup, and an eval split isolated from train.

Order (deterministic: candidates arrive in recipe source order, input order, record order):
1. exact: drop a document whose normalised-text hash was seen before (blake2b-128);
2. eval selection: a document is eval when a seeded hash of its text hash falls below
   `fraction`, so every exact copy of it lands on the same side (and step 1 kept only one);
3. near: MinHash signatures over word shingles (Broder, "On the resemblance and containment of
   documents", 1997) go into datasketch's MinHashLSH. Eval documents are inserted first, then each
   train document is queried: a hit on an eval document drops it as `near-duplicate-of-eval`
   (this is the recorded train/eval boundary), a hit on a train document as `near-duplicate`.

The stages that apply them, and count what they drop, are ExactDedup, EvalSplit and NearDedup
(stages.py); the hashes and signatures are computed in the partition processes.
"""

import hashlib
import re

import numpy as np
from datasketch import LeanMinHash, MinHash, MinHashLSH

from runwright.data.builder.recipe import EvalSpec, NearDedupSpec

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


def near_duplicates(
    splits: list[str | None], signatures: list[np.ndarray | None], spec: NearDedupSpec
) -> dict[int, str]:
    """Index -> `near-duplicate-of-eval` or `near-duplicate` for the documents near dedup drops.

    Eval documents are queried and inserted first, in order, then train documents: a train
    document whose hit is an eval document is the train/eval boundary's drop. Documents without
    a split or a signature take no part.
    """
    lsh = MinHashLSH(threshold=spec.threshold, num_perm=spec.num_perm)
    eval_keys: set[int] = set()
    dropped: dict[int, str] = {}
    for phase in ("eval", "train"):
        for k, (split, sig) in enumerate(zip(splits, signatures, strict=True)):
            if split != phase or sig is None:
                continue
            mh = LeanMinHash(seed=spec.seed, hashvalues=sig, scheme=MINHASH_SCHEME)
            hits = lsh.query(mh)
            if hits:
                of_eval = phase == "train" and any(h in eval_keys for h in hits)
                dropped[k] = "near-duplicate-of-eval" if of_eval else "near-duplicate"
                continue
            lsh.insert(k, mh)
            if phase == "eval":
                eval_keys.add(k)
    return dropped
