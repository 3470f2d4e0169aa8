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

Both fill rows straight from the planner's document window in compiled code (`csrc/fill.c`):
one pass per row writes token ids (cast from the shard dtype), position ids, segment ids and
the loss mask, so a batch costs one call, not a fixed number of numpy passes per field.
"""

from typing import NamedTuple, Protocol

import numpy as np

from runwright.data.read.kernels import ShardTable, fill_concat, fill_pad
from runwright.data.registry import Registry


class DocWindow(NamedTuple):
    """Consecutive documents of the logical stream, as the fill kernels read them (int64)."""

    span_start: np.ndarray
    """First stream unit of each document."""
    span_end: np.ndarray
    """One past its last stream unit."""
    length: np.ndarray
    """Tokens of each document."""
    shard: np.ndarray
    """Index of the shard (in the ShardTable) holding it."""
    offset: np.ndarray
    """Its first token within that shard."""


RowCounts = tuple[int, int, int]
"""(loss tokens, padded tokens, stored tokens copied out of the shards)."""


class Packer(Protocol):
    """Maps a stream of document lengths to rows."""

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

    def fill(
        self,
        storage: ShardTable,
        window: DocWindow,
        first_row_start: int,
        sequence_length: int,
        eod_id: int,
        out: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    ) -> RowCounts:
        """Fill consecutive rows, the first starting at stream unit `first_row_start`.

        `out` is (ids (rows, S + 1) int64, position_ids (rows, S) int64, segment_ids (rows, S)
        int32, loss_mask (rows, S) float32); inputs are ids[:, :-1], labels ids[:, 1:]. The
        window must cover every row (ValueError otherwise).
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

    def fill(self, storage, window, first_row_start, sequence_length, eod_id, out):
        rows = out[0].shape[0]
        return fill_concat(storage, *window, first_row_start, rows, sequence_length, eod_id, *out)


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

    def fill(self, storage, window, first_row_start, sequence_length, eod_id, out):
        rows = out[0].shape[0]
        return fill_pad(storage, *window, first_row_start, rows, sequence_length, eod_id, *out)


PACKERS: Registry[Packer] = Registry("packing")
PACKERS.register("concat-v1", ConcatPacker())
PACKERS.register("pad-v1", PadPacker())
