"""Which (source, length bucket) each label of a batch belongs to, so the per-token loss can be
reduced by source and by document length (issue 26; seed 000 8.2: "drift and training signals
per source and per length bucket rather than one loss").

The planner's document window knows each document's source and length; the fill kernels number
the documents of a row (segment ids 1, 2, ...; 0 is padding), starting with the document that
holds the row's first stream unit. So the document of row r, column c is

    window index = (document holding row r's first unit) + segment_ids[r, c] - 1

and a label belongs to its input's document: the one label that crosses into the next document
(the EOD -> next-document prediction) is masked by both packers (packing.py), as is padding.

A group id is `source * buckets + bucket`; a bucket is the document's length in tokens against
`length_edges` (inclusive upper bounds): edges (128, 512) give buckets 1-128, 129-512, >512.
The ids are computed by the read workers, off the training step; the runtime reduces the loss
over them on the loss's device (runtime/source_loss.py).
"""

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from runwright.data.errors import DataError

DEFAULT_LENGTH_EDGES: tuple[int, ...] = (128, 512, 2048, 8192)
"""Inclusive upper bounds of the default length buckets, in tokens per document."""
MAX_GROUPS = 4096
"""Sources x buckets the breakdown accepts: the per-step report carries one figure per source
and per bucket, and the device accumulator one per pair."""


@dataclass(frozen=True)
class LossGroups:
    """The (source, length bucket) pairs a batch's labels are counted in."""

    sources: tuple[str, ...]
    """Mixture source names, in the loader's order."""
    length_edges: tuple[int, ...] = DEFAULT_LENGTH_EDGES
    """Inclusive upper bounds of the length buckets (tokens per document), ascending."""

    def __post_init__(self) -> None:
        edges = self.length_edges
        if any(e < 1 for e in edges) or any(b <= a for a, b in itertools.pairwise(edges)):
            raise DataError(
                f"loss length buckets {list(edges)} must be positive and strictly ascending "
                "token counts, e.g. [128, 512, 2048]"
            )
        if not self.sources:
            raise DataError("a loss breakdown needs at least one source")
        if self.size > MAX_GROUPS:
            raise DataError(
                f"{len(self.sources)} sources x {self.buckets} length buckets = {self.size} "
                f"groups, more than {MAX_GROUPS}; use fewer length buckets"
            )

    @property
    def buckets(self) -> int:
        return len(self.length_edges) + 1

    @property
    def size(self) -> int:
        """Groups in all: sources x buckets."""
        return len(self.sources) * self.buckets

    def bucket_labels(self) -> list[str]:
        """Each bucket's name: `1-128`, `129-512`, ..., `>8192`."""
        lows = (1, *(e + 1 for e in self.length_edges))
        labels = [f"{lo}-{hi}" for lo, hi in zip(lows, self.length_edges, strict=False)]
        return [*labels, f">{self.length_edges[-1]}" if self.length_edges else "all"]

    def bucket_of(self, lengths: np.ndarray) -> np.ndarray:
        """Bucket index of each document length (int64)."""
        edges = np.asarray(self.length_edges, dtype=np.int64)
        return np.searchsorted(edges, lengths, side="left").astype(np.int64)

    def label_groups(
        self,
        span_end: np.ndarray,
        doc_sources: np.ndarray,
        doc_lengths: np.ndarray,
        first_row_start: int,
        stride: int,
        segment_ids: np.ndarray,
        loss_mask: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each label's group (int64, the shape of `segment_ids`; 0 where the mask is 0) and
        the loss tokens per group (int64, `size`), for rows starting at `first_row_start` and
        every `stride` stream units after it."""
        rows = segment_ids.shape[0]
        row_starts = first_row_start + stride * np.arange(rows, dtype=np.int64)
        first_doc = np.searchsorted(span_end, row_starts, side="right")
        doc = first_doc[:, None] + np.maximum(segment_ids, 1).astype(np.int64) - 1
        # Only the documents the rows touch: the planner's window holds thousands.
        lo, hi = int(first_doc[0]), min(int(doc.max()) + 1, doc_sources.shape[0])
        doc_group = doc_sources[lo:hi] * self.buckets + self.bucket_of(doc_lengths[lo:hi])
        counted = loss_mask > 0
        groups = np.where(counted, doc_group[np.minimum(doc - lo, hi - lo - 1)], 0)
        tokens = np.bincount(groups[counted], minlength=self.size).astype(np.int64)
        return groups, tokens

    def marginals(
        self, loss_sums: Sequence[float], loss_tokens: Sequence[float]
    ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
        """(by source, by length bucket): name -> [summed per-token loss, loss tokens], only for
        groups that had loss tokens. Per-group sums in `sources x buckets` order."""
        by_source: dict[str, list[float]] = {}
        by_length: dict[str, list[float]] = {}
        labels = self.bucket_labels()
        for g, tokens in enumerate(loss_tokens):
            if not tokens:
                continue
            source, bucket = self.sources[g // self.buckets], labels[g % self.buckets]
            for table, key in ((by_source, source), (by_length, bucket)):
                entry = table.setdefault(key, [0.0, 0])
                entry[0] += float(loss_sums[g])
                entry[1] += int(tokens)
        return by_source, by_length
