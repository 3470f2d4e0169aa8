"""Megatron indexed-dataset layout, written from the format description."""

import struct
from pathlib import Path

import numpy as np
import pytest

from runwright.data import IndexedWriter, ShardCorruptError, open_shard
from runwright.data.format.indexed_shard import read_index


def test_idx_layout_matches_the_format_description(tmp_path: Path) -> None:
    writer = IndexedWriter(tmp_path / "s", np.dtype(np.uint16))
    for doc in ([5, 6, 7], [8], [9, 10]):
        writer.add(doc)
    writer.finish()
    raw = (tmp_path / "s.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack_from("<Q", raw, 9) == (1,)
    assert raw[17] == 8  # uint16's dtype code
    assert struct.unpack_from("<QQ", raw, 18) == (3, 4)
    sizes = np.frombuffer(raw, np.int32, 3, 34)
    pointers = np.frombuffer(raw, np.int64, 3, 34 + 12)
    doc_idx = np.frombuffer(raw, np.int64, 4, 34 + 12 + 24)
    assert sizes.tolist() == [3, 1, 2]
    assert pointers.tolist() == [0, 6, 8]  # bytes: 3 tokens * 2 bytes, then 1 * 2
    assert doc_idx.tolist() == [0, 1, 2, 3]
    assert len(raw) == 34 + 12 + 24 + 32
    assert (tmp_path / "s.bin").read_bytes() == np.arange(5, 11, dtype=np.uint16).tobytes()


def test_round_trip_int32(tmp_path: Path) -> None:
    docs = [np.arange(70_000, 70_010), np.array([1, 2, 3])]
    writer = IndexedWriter(tmp_path / "big", np.dtype(np.int32))
    for d in docs:
        writer.add(d)
    writer.finish()
    shard = open_shard(tmp_path / "big")
    assert shard.documents == 2
    for i, d in enumerate(docs):
        assert np.array_equal(shard.document(i), d)
    assert read_index(tmp_path / "big.idx")[0] == np.dtype(np.int32)


def test_truncated_bin_is_a_named_error(tmp_path: Path) -> None:
    writer = IndexedWriter(tmp_path / "t", np.dtype(np.uint16))
    writer.add(list(range(100)))
    writer.finish()
    data = (tmp_path / "t.bin").read_bytes()
    (tmp_path / "t.bin").write_bytes(data[:-10])
    with pytest.raises(ShardCorruptError, match=r"t\.bin"):
        open_shard(tmp_path / "t")


def test_bad_magic_is_a_named_error(tmp_path: Path) -> None:
    (tmp_path / "x.idx").write_bytes(b"NOTANIDX" + bytes(40))
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(ShardCorruptError, match="bad magic"):
        open_shard(tmp_path / "x")


def test_a_multimodal_index_with_sequence_modes_is_read(tmp_path: Path) -> None:
    writer = IndexedWriter(tmp_path / "m", np.dtype(np.int32))
    for doc in ([1, 2, 3], [4, 5]):
        writer.add(doc)
    writer.finish()
    with open(tmp_path / "m.idx", "ab") as fh:
        fh.write(np.zeros(2, dtype=np.int8).tobytes())  # one mode per sequence
    shard = open_shard(tmp_path / "m")
    assert [shard.document(i).tolist() for i in range(2)] == [[1, 2, 3], [4, 5]]
    (tmp_path / "m.idx").write_bytes((tmp_path / "m.idx").read_bytes() + b"\x00")
    with pytest.raises(ShardCorruptError, match="truncated or corrupt"):
        open_shard(tmp_path / "m")
