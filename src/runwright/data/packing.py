"""Packing algorithms: how the document stream becomes fixed-length training rows.

Each document occupies its tokens plus one EOD slot ("extended" tokens 0..len, slot len is EOD).
A row is `sequence_length + 1` tokens (S + 1) so that inputs are row[:-1] and labels row[1:].

- `concat-v1`: the extended documents are concatenated into one stream and row k is the window
  [k*S, k*S + S + 1): consecutive rows share one token, so every stream token after the first
  is a label exactly once (Megatron-LM's GPT dataset does the same). Position ids restart at 0 at
  the row start and at every document start; segment ids number the documents within the row
  (1, 2, ...); the loss mask drops the label that crosses from one document into the next (the
  EOD -> next document prediction), so no loss depends on another document's context.
- `pad-v1`: one document per row, truncated to S + 1 extended tokens and padded with EOD; padding
  has segment id 0, position 0 and no loss. Truncated tokens are never trained on.

Counts per row: device tokens = S; padded tokens = inputs with segment 0; loss tokens = sum of
the loss mask.
"""

from typing import Protocol

import numpy as np

from runwright.data.registry import Registry


class Packer(Protocol):
    """Maps a stream of document lengths to row pieces."""

    name: str

    def spans(self, lengths: np.ndarray) -> np.ndarray:
        """Stream units each document occupies."""
        ...

    def stride(self, sequence_length: int) -> int:
        """Stream units between the starts of consecutive rows."""
        ...

    def units(self, lengths: np.ndarray, unit: str, sequence_length: int) -> np.ndarray:
        """Mixture units per document for `tokens` or `loss_tokens`."""
        ...

    def pieces(
        self,
        row_starts: np.ndarray,
        span_start: np.ndarray,
        span_end: np.ndarray,
        lengths: np.ndarray,
        sequence_length: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Pieces of the rows starting at `row_starts` (stream units).

        Returns flat arrays (row, doc, first, stop, column): extended tokens [first, stop) of
        window document `doc` go to `column` of row `row` (an index into row_starts). Pieces are
        listed in stream order: rows and documents are nondecreasing (the planner and
        rows.fill_rows rely on it).
        """
        ...


class ConcatPacker:
    """concat-v1: EOD-separated documents in S + 1 windows that share one token."""

    name = "concat-v1"

    def spans(self, lengths: np.ndarray) -> np.ndarray:
        return lengths + 1

    def stride(self, sequence_length: int) -> int:
        return sequence_length

    def units(self, lengths: np.ndarray, unit: str, sequence_length: int) -> np.ndarray:
        # tokens: the document and its EOD; loss_tokens: len predictions inside the document
        # (tokens 1..len-1 and the EOD), the EOD -> next-document label is masked.
        return lengths + 1 if unit == "tokens" else lengths.copy()

    def pieces(self, row_starts, span_start, span_end, lengths, sequence_length):
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


class PadPacker:
    """pad-v1: one document per row, truncated, padded, no cross-document context."""

    name = "pad-v1"

    def spans(self, lengths: np.ndarray) -> np.ndarray:
        return np.ones_like(lengths)

    def stride(self, sequence_length: int) -> int:
        return 1

    def units(self, lengths: np.ndarray, unit: str, sequence_length: int) -> np.ndarray:
        kept = np.minimum(lengths + 1, sequence_length + 1)
        return kept if unit == "tokens" else kept - 1

    def pieces(self, row_starts, span_start, span_end, lengths, sequence_length):
        docs = np.searchsorted(span_end, row_starts, side="right")
        n = row_starts.shape[0]
        stop = np.minimum(lengths[docs] + 1, sequence_length + 1)
        return np.arange(n), docs, np.zeros(n, dtype=np.int64), stop, np.zeros(n, dtype=np.int64)


PACKERS: Registry[Packer] = Registry("packing")
PACKERS.register("concat-v1", ConcatPacker())
PACKERS.register("pad-v1", PadPacker())
