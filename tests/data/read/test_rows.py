"""The compiled fill kernels equal the packing definitions, written out piece by piece.

The reference is the packers' definition in two steps: `reference_pieces` cuts rows into
pieces (row, doc, first, stop, column): extended tokens [first, stop) of window document doc go
to `column` of row `row`; `reference_fill_rows` copies each piece and pads each row.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runwright.data import PACKERS
from runwright.data.read.kernels import ShardTable
from runwright.data.read.packing import DocWindow
from runwright.data.read.rows import fill_rows


def reference_pieces(packing, row_starts, span_start, span_end, lengths, sequence_length):
    """Pieces of the rows starting at `row_starts` (stream units), in stream order."""
    if packing == "pad-v1":
        docs = np.searchsorted(span_end, row_starts, side="right")
        n = row_starts.shape[0]
        stop = np.minimum(lengths[docs] + 1, sequence_length + 1)
        return np.arange(n), docs, np.zeros(n, dtype=np.int64), stop, np.zeros(n, dtype=np.int64)
    row_ends = row_starts + sequence_length + 1
    first = np.searchsorted(span_end, row_starts, side="right")
    last = np.searchsorted(span_start, row_ends, side="left")
    counts = last - first
    rows = np.repeat(np.arange(row_starts.shape[0]), counts)
    offsets = np.arange(rows.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    docs = np.repeat(first, counts) + offsets
    lo = np.maximum(span_start[docs], row_starts[rows])
    hi = np.minimum(span_end[docs], row_ends[rows])
    return rows, docs, lo - span_start[docs], hi - span_start[docs], lo - row_starts[rows]


def reference_fill_rows(
    rows, sequence_length, eod_id, pieces, lengths, storage, doc_storage, doc_offset
):
    """Three slice copies per piece, padding per row."""
    width = sequence_length + 1
    row, doc, first, stop, col = pieces
    n = stop - first
    real = np.clip(np.minimum(stop, lengths[doc]) - first, 0, None)
    src = doc_offset[doc] + first
    ids = np.empty((rows, width), dtype=np.int64)
    seg = np.empty((rows, width), dtype=np.int32)
    pos = np.empty((rows, width), dtype=np.int64)
    seg_no, prev_row = 0, -1
    for r, c, k, m, a, s in zip(
        row.tolist(),
        col.tolist(),
        n.tolist(),
        real.tolist(),
        doc_storage[doc].tolist(),
        src.tolist(),
        strict=True,
    ):
        seg_no = seg_no + 1 if r == prev_row else 1
        prev_row = r
        ids[r, c : c + m] = storage[a][s : s + m]
        if m < k:
            ids[r, c + m] = eod_id
        seg[r, c : c + k] = seg_no
        pos[r, c : c + k] = np.arange(k)
    ends = np.zeros(rows, dtype=np.int64)
    np.maximum.at(ends, row, col + n)
    loss_mask = np.ones((rows, sequence_length), dtype=np.float32)
    inner = (col + n < ends[row]) & (col + n - 1 < sequence_length)
    loss_mask[row[inner], (col + n - 1)[inner]] = 0.0
    padded = 0
    for r in np.flatnonzero(ends < width).tolist():
        e = int(ends[r])
        ids[r, e:] = eod_id
        seg[r, e:] = 0
        pos[r, e:] = 0
        loss_mask[r, max(e - 1, 0) :] = 0.0
        padded += sequence_length - min(e, sequence_length)
    return {
        "tokens": ids[:, :-1],
        "labels": ids[:, 1:],
        "position_ids": pos[:, :-1].copy(),
        "segment_ids": seg[:, :-1].copy(),
        "loss_mask": loss_mask,
        "device_tokens": rows * sequence_length,
        "padded_tokens": padded,
        "loss_tokens": int(np.count_nonzero(loss_mask)),
        "stored_tokens": int(real.sum()),
    }


@st.composite
def packed_windows(draw: st.DrawFn):
    """Documents spread over uint16 shards in shuffled order, and a window of rows to pack."""
    lengths = np.asarray(draw(st.lists(st.integers(0, 40), min_size=1, max_size=30)), np.int64)
    packing = draw(st.sampled_from(["concat-v1", "pad-v1"]))
    seq = draw(st.integers(1, 24))
    shards = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    doc_storage = rng.integers(0, shards, size=lengths.shape[0])
    storage, doc_offset = [], np.zeros(lengths.shape[0], dtype=np.int64)
    for a in range(shards):
        mine = np.flatnonzero(doc_storage == a)
        offsets = np.concatenate([[0], np.cumsum(lengths[mine])])
        doc_offset[mine] = offsets[:-1]
        storage.append(rng.integers(1, 60_000, size=int(offsets[-1])).astype(np.uint16))
    packer = PACKERS.get(packing)
    spans = packer.spans(lengths)
    span_end = np.cumsum(spans)
    span_start = span_end - spans
    stride = packer.stride(seq)
    extent = seq + 1 if packing == "concat-v1" else 1
    total = int(span_end[-1])
    available = 0 if total < extent else (total - extent) // stride + 1
    rows = draw(st.integers(0, available))
    first_row = draw(st.integers(0, available - rows))
    window = DocWindow(span_start, span_end, lengths, doc_storage, doc_offset)
    return packing, rows, first_row * stride, seq, window, storage


def check_against_reference(packing, rows, first, seq, eod, window, storage) -> None:
    packer = PACKERS.get(packing)
    fast = fill_rows(packer, ShardTable(storage), window, first, rows, seq, eod)
    starts = first + np.arange(rows, dtype=np.int64) * packer.stride(seq)
    pieces = reference_pieces(
        packing, starts, window.span_start, window.span_end, window.length, seq
    )
    slow = reference_fill_rows(
        rows, seq, eod, pieces, window.length, storage, window.shard, window.offset
    )
    assert fast.keys() == slow.keys()
    for key, want in slow.items():
        got = fast[key]
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert got.size == 0 or got.strides == want.strides, key
            assert np.array_equal(got, want), key
        else:
            assert got == want, key


@given(case=packed_windows(), eod=st.integers(0, 7))
@settings(max_examples=300, deadline=None)
def test_compiled_rows_equal_the_reference(case, eod: int) -> None:
    packing, rows, first, seq, window, storage = case
    check_against_reference(packing, rows, first, seq, eod, window, storage)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64])
def test_every_megatron_token_dtype_is_read(dtype) -> None:
    lengths = np.array([5, 3, 7, 4], dtype=np.int64)
    rng = np.random.default_rng(1)
    storage = [rng.integers(1, 120, size=int(lengths.sum())).astype(dtype)]
    offsets = np.cumsum(lengths) - lengths
    for packing in ("concat-v1", "pad-v1"):
        spans = PACKERS.get(packing).spans(lengths)
        span_end = np.cumsum(spans)
        window = DocWindow(span_end - spans, span_end, lengths, np.zeros(4, np.int64), offsets)
        check_against_reference(packing, 2, 0, 4, 0, window, storage)


def test_a_window_that_does_not_cover_the_rows_is_refused() -> None:
    lengths = np.array([5, 3], dtype=np.int64)
    span_end = np.cumsum(lengths + 1)
    window = DocWindow(
        span_end - lengths - 1, span_end, lengths, np.zeros(2, np.int64), np.array([0, 5], np.int64)
    )
    storage = ShardTable([np.arange(8, dtype=np.uint16)])
    with pytest.raises(ValueError, match="does not cover"):
        fill_rows(PACKERS.get("concat-v1"), storage, window, 0, 3, 4, 0)
    # A document whose offset runs past its shard is named, not read out of bounds.
    bad = window._replace(offset=np.array([0, 6], np.int64))
    with pytest.raises(IndexError, match="outside its shard"):
        fill_rows(PACKERS.get("concat-v1"), storage, bad, 0, 1, 8, 0)
