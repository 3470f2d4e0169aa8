"""Row materialisation: a packer fills a batch's arrays from a document window.

The arrays are allocated here and filled in one compiled call (packing.py, `csrc/fill.c`):
- ids: one (rows, S + 1) int64 grid; tokens and labels are its views [:, :-1] and [:, 1:], as
  in raw slicing, so the one token two consecutive fields share is copied once;
- position_ids (int64) and segment_ids (int32), (rows, S) and contiguous;
- loss_mask (float32), (rows, S).
"""

import numpy as np

from runwright.data.read.kernels import ShardTable
from runwright.data.read.packing import PACKERS, DocWindow, Packer


def fill_rows(
    packer: Packer,
    storage: ShardTable,
    window: DocWindow,
    first_row_start: int,
    rows: int,
    sequence_length: int,
    eod_id: int,
) -> dict:
    """`rows` consecutive rows from stream unit `first_row_start`, and their token counts.

    Returns numpy arrays `tokens`, `labels`, `position_ids` (int64), `segment_ids` (int32),
    `loss_mask` (float32) of shape (rows, S), and the counts `device_tokens`, `padded_tokens`,
    `loss_tokens` and `stored_tokens` (tokens copied out of `storage`).
    """
    ids = np.empty((rows, sequence_length + 1), dtype=np.int64)
    pos = np.empty((rows, sequence_length), dtype=np.int64)
    seg = np.empty((rows, sequence_length), dtype=np.int32)
    loss_mask = np.empty((rows, sequence_length), dtype=np.float32)
    loss, padded, stored = packer.fill(
        storage, window, first_row_start, sequence_length, eod_id, (ids, pos, seg, loss_mask)
    )
    return {
        "tokens": ids[:, :-1],
        "labels": ids[:, 1:],
        "position_ids": pos,
        "segment_ids": seg,
        "loss_mask": loss_mask,
        "device_tokens": rows * sequence_length,
        "padded_tokens": padded,
        "loss_tokens": loss,
        "stored_tokens": stored,
    }


def pack_documents(
    documents: list[np.ndarray], sequence_length: int, packing: str, eod_id: int
) -> dict[str, np.ndarray]:
    """Pack in-memory documents into every complete row (the pure entry point used in tests)."""
    packer = PACKERS.get(packing)
    lengths = np.asarray([d.shape[0] for d in documents], dtype=np.int64)
    spans = packer.spans(lengths)
    span_end = np.cumsum(spans)
    total = int(span_end[-1]) if lengths.shape[0] else 0
    stride = packer.stride(sequence_length)
    extent = sequence_length + 1 if packing == "concat-v1" else 1
    n_rows = 0 if total < extent else (total - extent) // stride + 1
    offsets = np.cumsum(lengths) - lengths
    tokens = [np.asarray(d, dtype=np.int64) for d in documents]
    storage = ShardTable([np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.int64)])
    window = DocWindow(
        span_end - spans, span_end, lengths, np.zeros_like(lengths), offsets.astype(np.int64)
    )
    return fill_rows(packer, storage, window, 0, n_rows, sequence_length, eod_id)
