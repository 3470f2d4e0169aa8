"""Row materialisation: packer pieces -> the arrays of a batch (tokens, labels, ids, loss mask).

A packer describes rows as pieces (row, doc, first, stop, column): extended tokens [first, stop)
of a document (its tokens, then one EOD slot) fill columns [column, column + stop - first) of a
row of S + 1 cells. This module turns pieces into numpy arrays with a fixed number of numpy
calls per batch; the only per-piece Python work is taking one memmap view per piece.

Every field is built from the piece boundaries, not per piece:
- tokens: one `np.concatenate` of one memmap view per piece straight into the int64
  (rows, S + 1) grid, casting uint16/int32 on the fly. A piece that ends with its EOD slot reads
  one token past its document and that cell is then overwritten with EOD, so EOD cells cost no
  array of their own (np.concatenate's cost is per array); a document that ends its shard has
  nothing after it, and a batch holding one falls back to separate EOD cells;
- position ids: `arange(cells) - repeat(piece_start, n)`, the cell index minus the first cell
  of its piece;
- segment ids: `repeat(1 + piece index - index of the row's first piece, n)`;
- loss mask: ones, with a zero where a piece ends before its row does (that label is the next
  document's first token) and over the padding; its sum is counted from the same boundaries.
Tokens and labels are views of the one grid (`[:, :-1]`, `[:, 1:]`), as in raw slicing.

concat-v1 pieces tile the grid in order (piece k starts where piece k - 1 ends), so the
concatenation *is* the grid. pad-v1 pieces leave padding; their cells are scattered into a
grid that starts as padding (EOD, segment 0, position 0).

Cost at S = 2048, 32 rows (~140 pieces), one core: ~0.15 us per view plus ~0.12 us per array
inside np.concatenate (~40 us, most of the token copy), ~20 us for position ids and ~10 us for
segment ids (one int64 and one int32 pass over 65,568 cells each), ~15 us for the rest.
"""

import numpy as np

from runwright.data.packing import PACKERS

Pieces = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]

# Shared cell counter for position ids: 2^20 int64 = 8 MiB covers 512 rows of S = 2047.
_ARANGE = np.arange(1 << 20, dtype=np.int64)


def _cell_index(cells: int) -> np.ndarray:
    return _ARANGE[:cells] if cells <= _ARANGE.shape[0] else np.arange(cells, dtype=np.int64)


def _concatenate_pieces(
    out: np.ndarray,
    storage: list[np.ndarray],
    piece_storage: np.ndarray,
    piece_source: np.ndarray,
    real: np.ndarray,
    n: np.ndarray,
) -> None:
    """Write every piece's stored tokens, then one cell for its EOD if it has one, into `out`.

    A piece's n cells are read as n consecutive stored tokens from its start: where the piece
    ends with the EOD slot, that reads the token after the document, which the caller then
    overwrites with EOD. This takes one view per piece instead of one per piece plus one per
    EOD (np.concatenate's cost is per array), unless a document with an EOD slot is the last
    of its shard (nothing to read after it); then the EOD cells are concatenated separately.
    """
    stop = piece_source + n
    shard_tokens = np.fromiter((a.shape[0] for a in storage), dtype=np.int64, count=len(storage))
    if (stop > shard_tokens[piece_storage]).any():
        eod = np.zeros(1, dtype=out.dtype)
        parts: list[np.ndarray] = []
        append = parts.append
        for a, s, m, e in zip(
            piece_storage.tolist(),
            piece_source.tolist(),
            real.tolist(),
            (real < n).tolist(),
            strict=True,
        ):
            if m:
                append(storage[a][s : s + m])
            if e:
                append(eod)
    elif len(storage) == 1:
        tokens = storage[0]
        parts = [tokens[s:t] for s, t in zip(piece_source.tolist(), stop.tolist(), strict=True)]
    else:
        parts = [
            storage[a][s:t]
            for a, s, t in zip(
                piece_storage.tolist(), piece_source.tolist(), stop.tolist(), strict=True
            )
        ]
    if parts:
        np.concatenate(parts, out=out, casting="same_kind")


def fill_rows(
    rows: int,
    sequence_length: int,
    eod_id: int,
    pieces: Pieces,
    lengths: np.ndarray,
    storage: list[np.ndarray],
    doc_storage: np.ndarray,
    doc_offset: np.ndarray,
) -> dict[str, np.ndarray]:
    """Materialise rows from non-overlapping pieces listed in row order.

    Piece document j's tokens are `storage[doc_storage[j]][doc_offset[j]:][:lengths[j]]`. Returns
    numpy arrays `tokens`, `labels`, `position_ids` (int64), `segment_ids` (int32), `loss_mask`
    (float32) of shape (rows, S), the counts `device_tokens`, `padded_tokens`, `loss_tokens`,
    and `stored_tokens` (tokens copied out of `storage`). Pieces' rows must be nondecreasing
    (every packer lists rows in order). Cells before a row's last piece end must be covered by
    pieces (every packer guarantees it); cells after it are padding.
    """
    width = sequence_length + 1
    grid_cells = rows * width
    row, doc, first, stop, col = pieces
    n = stop - first
    # Stored tokens of each piece (first <= length: extended token `length` is the EOD slot);
    # the remaining cell (if any) is the EOD slot.
    real = np.minimum(stop, lengths[doc]) - first
    piece_end = np.cumsum(n)
    piece_start = piece_end - n
    content_cells = int(piece_end[-1]) if n.shape[0] else 0
    dest = row * width + col
    tiled = content_cells == grid_cells and not (dest != piece_start).any()

    content = np.empty(content_cells, dtype=np.int64)
    _concatenate_pieces(content, storage, doc_storage[doc], doc_offset[doc] + first, real, n)
    eod_cells = (piece_start + real)[real < n]
    content[eod_cells] = eod_id
    cell = _cell_index(content_cells)
    pos_content = np.repeat(piece_start, n)
    np.subtract(cell, pos_content, out=pos_content)
    # Segment number of a piece: 1 + its index minus the index of its row's first piece.
    piece_number = _cell_index(row.shape[0]) - np.searchsorted(row, row)
    seg_content = np.repeat((piece_number + 1).astype(np.int32), n)

    loss_mask = np.ones((rows, sequence_length), dtype=np.float32)
    piece_stop = col + n
    if tiled:
        # Every row is full: a piece ending before its row does ends in front of the next
        # document, whose first token is then a label not predicted from this one's context.
        ids = content.reshape(rows, width)
        pos = pos_content.reshape(rows, width)
        seg = seg_content.reshape(rows, width)
        inner = piece_stop < width
        loss_mask.reshape(-1)[(piece_end - 1 - row)[inner]] = 0.0
        return _fields(
            ids, pos, seg, loss_mask, sequence_length, 0, int(np.count_nonzero(inner)), real
        )

    # Where each row's content ends; the rest is padding (pad-v1 only).
    ends = np.zeros(rows, dtype=np.int64)
    np.maximum.at(ends, row, piece_stop)
    ids = np.full((rows, width), eod_id, dtype=np.int64)
    pos = np.zeros((rows, width), dtype=np.int64)
    seg = np.zeros((rows, width), dtype=np.int32)
    # Grid cell of content cell i: its piece's destination plus its offset in the piece.
    target = np.repeat(dest - piece_start, n)
    np.add(target, cell, out=target)
    ids.reshape(-1)[target] = content
    pos.reshape(-1)[target] = pos_content
    seg.reshape(-1)[target] = seg_content

    # A label that starts the next document is not predicted from this one's context.
    inner = (piece_stop < ends[row]) & (piece_stop - 1 < sequence_length)
    loss_mask[row[inner], (piece_stop - 1)[inner]] = 0.0
    # Padding: inputs from column e are padding; labels from column e - 1 are (the EOD -> pad).
    short = np.flatnonzero(ends < width)
    zeros = int(np.count_nonzero(inner))
    padded = 0
    if short.shape[0]:
        masked_from = np.maximum(ends[short] - 1, 0)
        columns = np.arange(sequence_length, dtype=np.int64)
        loss_mask[short] *= columns < masked_from[:, None]
        padded = int((sequence_length - np.minimum(ends[short], sequence_length)).sum())
        # Inner zeros lie before column e - 1 of their row, so they never overlap the padding's.
        zeros += int((sequence_length - masked_from).sum())
    return _fields(ids, pos, seg, loss_mask, sequence_length, padded, zeros, real)


def _fields(
    ids: np.ndarray,
    pos: np.ndarray,
    seg: np.ndarray,
    loss_mask: np.ndarray,
    sequence_length: int,
    padded: int,
    zeros: int,
    real: np.ndarray,
) -> dict:
    """The batch fields of a filled (rows, S + 1) grid: inputs are [:, :-1], labels [:, 1:]."""
    rows = ids.shape[0]
    return {
        "tokens": ids[:, :-1],
        "labels": ids[:, 1:],
        "position_ids": pos[:, :-1],
        "segment_ids": seg[:, :-1],
        "loss_mask": loss_mask,
        "device_tokens": rows * sequence_length,
        "padded_tokens": padded,
        "loss_tokens": rows * sequence_length - zeros,
        "stored_tokens": int(real.sum()),
    }


def pack_documents(
    documents: list[np.ndarray], sequence_length: int, packing: str, eod_id: int
) -> dict[str, np.ndarray]:
    """Pack in-memory documents into every complete row (the pure entry point used in tests)."""
    packer = PACKERS.get(packing)
    lengths = np.asarray([d.shape[0] for d in documents], dtype=np.int64)
    spans = packer.spans(lengths)
    span_end = np.cumsum(spans)
    span_start = span_end - spans
    total = int(span_end[-1]) if lengths.shape[0] else 0
    stride = packer.stride(sequence_length)
    extent = sequence_length + 1 if packing == "concat-v1" else 1
    n_rows = 0 if total < extent else (total - extent) // stride + 1
    starts = np.arange(n_rows, dtype=np.int64) * stride
    pieces = packer.pieces(starts, span_start, span_end, lengths, sequence_length)
    return fill_rows(
        n_rows,
        sequence_length,
        eod_id,
        pieces,
        lengths,
        [np.asarray(d, dtype=np.int64) for d in documents],
        np.arange(len(documents), dtype=np.int64),
        np.zeros(len(documents), dtype=np.int64),
    )
