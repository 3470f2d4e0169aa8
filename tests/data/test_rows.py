"""Vectorised row materialisation equals the straightforward per-piece reference."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from runwright.data import PACKERS
from runwright.data.rows import fill_rows


def reference_fill_rows(
    rows, sequence_length, eod_id, pieces, lengths, storage, doc_storage, doc_offset
):
    """The per-piece loop fill_rows replaced: three slice copies per piece, padding per row."""
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
        "position_ids": pos[:, :-1],
        "segment_ids": seg[:, :-1],
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
    starts = (first_row + np.arange(rows, dtype=np.int64)) * stride
    pieces = packer.pieces(starts, span_start, span_end, lengths, seq)
    return rows, seq, pieces, lengths, storage, doc_storage, doc_offset


@given(case=packed_windows(), eod=st.integers(0, 7))
@settings(max_examples=200, deadline=None)
def test_vectorised_rows_equal_the_reference(case, eod: int) -> None:
    rows, seq, pieces, lengths, storage, doc_storage, doc_offset = case
    fast = fill_rows(rows, seq, eod, pieces, lengths, storage, doc_storage, doc_offset)
    slow = reference_fill_rows(rows, seq, eod, pieces, lengths, storage, doc_storage, doc_offset)
    assert fast.keys() == slow.keys()
    for key, want in slow.items():
        got = fast[key]
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert got.size == 0 or got.strides == want.strides, key
            assert np.array_equal(got, want), key
        else:
            assert got == want, key


def test_both_ways_of_placing_the_eod_match_the_reference() -> None:
    """EOD cells read past the document (then overwritten), or, at a shard's end, appended."""
    lengths = np.array([5, 3, 7, 4, 6], dtype=np.int64)
    # Shard 0 holds documents 0, 1, 2 back to back and 3 more tokens; shard 1 holds 3 and 4,
    # and 4 ends it. In stream order 0..4 no row reaches document 4's EOD (every EOD is read
    # past its document); in the other order it is in the first row (appended instead).
    doc_storage = np.array([0, 0, 0, 1, 1])
    doc_offset = np.array([0, 5, 8, 0, 4], dtype=np.int64)
    rng = np.random.default_rng(0)
    storage = [
        rng.integers(1, 60_000, size=18).astype(np.uint16),
        rng.integers(1, 60_000, size=10).astype(np.uint16),
    ]
    packer = PACKERS.get("concat-v1")
    spans = packer.spans(lengths)
    seq = 4
    for order in ([0, 1, 2, 3, 4], [4, 0, 3, 1, 2]):
        docs = np.array(order)
        span_end = np.cumsum(spans[docs])
        rows = (int(span_end[-1]) - seq - 1) // seq + 1
        starts = np.arange(rows, dtype=np.int64) * seq
        pieces = packer.pieces(starts, span_end - spans[docs], span_end, lengths[docs], seq)
        args = (rows, seq, 9, pieces, lengths[docs], storage, doc_storage[docs], doc_offset[docs])
        fast, slow = fill_rows(*args), reference_fill_rows(*args)
        for key, want in slow.items():
            assert np.array_equal(fast[key], want), key
