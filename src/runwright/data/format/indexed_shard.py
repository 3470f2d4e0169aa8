"""Megatron-LM's indexed dataset layout: a flat `.bin` of tokens and an `.idx` describing it.

Written from the format description (Megatron-LM `megatron/core/datasets/indexed_dataset.py`
documents it; we do not copy its code). All integers are little-endian:

    offset  size            field
    0       9               magic  b"MMIDIDX\\x00\\x00"
    9       8   <Q          version = 1
    17      1   <B          dtype code (table below)
    18      8   <Q          S = number of sequences
    26      8   <Q          D = number of document-index entries (documents + 1)
    34      4*S <i4         sequence lengths, in tokens
    ...     8*S <i8         sequence pointers, byte offsets into .bin
    ...     8*D <i8         document index: first sequence of each document, then S

runwright writes one sequence per document, so the document index is 0, 1, ..., S, and reads
every sequence of a foreign index as one document. A multimodal index may carry S more bytes
(one int8 sequence mode each) after the document index; they are accepted and not used.
Header arithmetic: 9 + 8 + 1 + 8 + 8 = 34 bytes before the arrays.
"""

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runwright.data.errors import ShardCorruptError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = 34

# Megatron's dtype codes.
DTYPE_CODES: dict[int, type[np.generic]] = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
CODE_OF_DTYPE = {np.dtype(v): k for k, v in DTYPE_CODES.items()}


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 holds ids below 65,536 (half the bytes of int32); larger vocabularies need int32."""
    return np.dtype(np.uint16) if vocab_size <= 65_536 else np.dtype(np.int32)


@dataclass(frozen=True)
class IndexedShard:
    """An opened shard: its token memmap and per-document lengths and token offsets."""

    bin_path: Path
    dtype: np.dtype
    lengths: np.ndarray
    """Tokens per document (int64)."""
    token_offsets: np.ndarray
    """First token of each document inside `tokens` (pointer bytes / itemsize, int64)."""
    doc_index: np.ndarray
    """Megatron document index (int64)."""
    tokens: np.ndarray
    """Read-only memmap of the flat token array."""

    @property
    def documents(self) -> int:
        return int(self.lengths.shape[0])

    def document(self, i: int) -> np.ndarray:
        start = int(self.token_offsets[i])
        return self.tokens[start : start + int(self.lengths[i])]


class IndexedWriter:
    """Streams documents into `<prefix>.bin`; `finish()` writes `<prefix>.idx`."""

    def __init__(self, prefix: Path, dtype: np.dtype) -> None:
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_OF_DTYPE:
            raise ValueError(f"dtype {self.dtype} has no Megatron dtype code")
        self._bin = open(self.prefix.with_suffix(".bin"), "wb")  # noqa: SIM115 - closed in finish
        self._lengths: list[int] = []
        self.tokens = 0

    def add(self, ids: Iterable[int] | np.ndarray) -> None:
        arr = np.asarray(ids, dtype=self.dtype)
        self._bin.write(arr.tobytes(order="C"))
        self._lengths.append(int(arr.shape[0]))
        self.tokens += int(arr.shape[0])

    def finish(self) -> tuple[Path, Path]:
        self._bin.close()
        write_index(self.prefix.with_suffix(".idx"), self.dtype, self._lengths)
        return self.prefix.with_suffix(".bin"), self.prefix.with_suffix(".idx")


def write_index(path: Path, dtype: np.dtype, lengths: list[int] | np.ndarray) -> None:
    sizes = np.asarray(lengths, dtype=np.int32)
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(sizes.shape[0], dtype=np.int64)
    if sizes.shape[0] > 1:
        pointers[1:] = np.cumsum(sizes[:-1], dtype=np.int64) * itemsize
    doc_index = np.arange(sizes.shape[0] + 1, dtype=np.int64)
    with open(path, "wb") as fh:
        fh.write(MAGIC)
        fh.write(struct.pack("<Q", VERSION))
        fh.write(struct.pack("<B", CODE_OF_DTYPE[np.dtype(dtype)]))
        fh.write(struct.pack("<Q", sizes.shape[0]))
        fh.write(struct.pack("<Q", doc_index.shape[0]))
        fh.write(sizes.tobytes(order="C"))
        fh.write(pointers.tobytes(order="C"))
        fh.write(doc_index.tobytes(order="C"))


def read_index(path: Path) -> tuple[np.dtype, np.ndarray, np.ndarray, np.ndarray]:
    """Parse an .idx file; returns (dtype, sizes int32, pointers int64, doc_index int64)."""
    path = Path(path)
    raw = path.read_bytes()
    if len(raw) < HEADER_BYTES or raw[:9] != MAGIC:
        raise ShardCorruptError(
            f"{path.name}: not a Megatron indexed-dataset index (bad magic); rebuild the dataset "
            "or restore the file from its source"
        )
    (version,) = struct.unpack_from("<Q", raw, 9)
    if version != VERSION:
        raise ShardCorruptError(f"{path.name}: index version {version}, only {VERSION} is readable")
    (code,) = struct.unpack_from("<B", raw, 17)
    if code not in DTYPE_CODES:
        raise ShardCorruptError(f"{path.name}: unknown dtype code {code}")
    count, doc_count = struct.unpack_from("<QQ", raw, 18)
    expected = HEADER_BYTES + 4 * count + 8 * count + 8 * doc_count
    # Megatron's multimodal indices append one int8 mode per sequence after the document index;
    # the header does not say so, and the tokens do not depend on it.
    if len(raw) not in (expected, expected + count):
        raise ShardCorruptError(
            f"{path.name}: index is {len(raw)} bytes but its header implies {expected}; the file "
            "is truncated or corrupt"
        )
    off = HEADER_BYTES
    sizes = np.frombuffer(raw, dtype=np.int32, count=count, offset=off)
    off += 4 * count
    pointers = np.frombuffer(raw, dtype=np.int64, count=count, offset=off)
    off += 8 * count
    doc_index = np.frombuffer(raw, dtype=np.int64, count=doc_count, offset=off)
    return np.dtype(DTYPE_CODES[code]), sizes, pointers, doc_index


def open_shard(prefix: Path) -> IndexedShard:
    """Open `<prefix>.bin/.idx`, checking that the index and the token file agree in size."""
    prefix = Path(prefix)
    dtype, sizes, pointers, doc_index = read_index(prefix.with_suffix(".idx"))
    bin_path = prefix.with_suffix(".bin")
    if not bin_path.exists():
        raise ShardCorruptError(f"{bin_path.name} is missing; rebuild or restore the dataset")
    nbytes = bin_path.stat().st_size
    itemsize = dtype.itemsize
    lengths = sizes.astype(np.int64)
    total_bytes = int(lengths.sum()) * itemsize
    if nbytes != total_bytes or (
        lengths.shape[0] and int(pointers[-1]) + int(lengths[-1]) * itemsize != nbytes
    ):
        raise ShardCorruptError(
            f"{bin_path.name} holds {nbytes} bytes but its index describes {total_bytes}; "
            "the shard is truncated or corrupt - run `runwright data verify` and rebuild it"
        )
    tokens = np.memmap(bin_path, dtype=dtype, mode="r") if nbytes else np.zeros(0, dtype=dtype)
    return IndexedShard(
        bin_path=bin_path,
        dtype=dtype,
        lengths=lengths,
        token_offsets=pointers // itemsize,
        doc_index=doc_index,
        tokens=tokens,
    )
