"""Global-step planning: which documents make this rank's rows of each step.

Global sample g (a packed row) starts at stream position g * stride. Global step k consumes
samples [k*B, (k+1)*B) for global batch B, and data-parallel rank r of D reads
[k*B + r*B/D, k*B + (r+1)*B/D). Every rank walks the same document stream (cheap: lengths
only) and reads tokens only for its own rows, so the global sequence does not depend on D and a
cursor taken under one D resumes under another.

Quarantined shards (`data.on_corrupt_shard: skip`, data/read/quarantine.py) are left out here:
their documents are still drawn, so the mixture's counters and every later draw stay what they
were, but they never enter the window that rows are packed from. Rows stay full (the next
documents move up), no sample is missing from the ledger, and each skipped document is counted
against its shard's record in the cursor. Every rank plans from the same cursor, so all skip
the same documents.

A staged mixture (stages.py) starts its next stage where the next step's first row starts: the
planner cuts the block of draws at the first (kept) document starting there, rewinds the stream
to the counters after the documents before it and lets the stream continue in the new stage.
"""

from dataclasses import dataclass

import numpy as np

from runwright.data.errors import DataError
from runwright.data.read.cursor import DataCursor, PackerResidual
from runwright.data.read.packing import DocWindow, Packer
from runwright.data.read.stages import Stage
from runwright.data.read.stream import DocBlock, DocStream, SourceTable, StreamState

_TRIM_DOCUMENTS = 4096
"""Consumed documents the planner's window may hold before it drops them."""


@dataclass(frozen=True)
class BatchPlan:
    """One global step, seen from one rank: what to read and where the cursor lands."""

    step: int
    """Global step number."""
    first_sample: int
    """First global sample of the step."""
    end_sample: int
    """One past its last global sample."""
    rows: int
    """Rows this rank materialises."""
    first_row_start: int
    """Stream unit where this rank's first row starts; the others follow at the packer's
    stride."""
    rows_end: int
    """One past the last stream unit this rank's rows read."""
    window: DocWindow
    """Documents covering the rows: the planner's window as it was, whose arrays are only ever
    replaced, never written, so a read worker can use them while planning goes on."""
    cursor: "CursorPoint"
    """Cursor after this step has been consumed."""
    doc_sources: np.ndarray | None = None
    """Source index of each window document (int64; replaced, never written, like `window`):
    what the loss breakdown groups labels by (data/read/loss_groups.py)."""

    def shards_read(self) -> list[int]:
        """The shards (ShardTable indices) holding a token of this rank's rows."""
        w = self.window
        lo = int(np.searchsorted(w.span_end, self.first_row_start, side="right"))
        hi = int(np.searchsorted(w.span_start, self.rows_end, side="left"))
        return np.unique(w.shard[lo:hi]).tolist()


@dataclass(frozen=True)
class CursorPoint:
    """Where the cursor lands after a step; `resolve()` builds the DataCursor when asked.

    Building a DataCursor (counters per source, a pydantic copy) costs tens of microseconds, a
    sizeable share of a step's planning; most steps' cursors are never read, so the planner
    keeps only the (immutable) block and index the counters come from.
    """

    template: DataCursor
    names: tuple[str, ...]
    block: DocBlock
    index: int
    """Documents of `block` drawn before the cursor's counters."""
    residual: tuple[int, int, int] | None
    """(source index, draw, token offset) of a document split by the step boundary."""
    step: int
    sample: int
    lost: tuple[tuple[int, int], ...] = ()
    """(documents, tokens) lost so far to each of the template's quarantined shards."""

    def resolve(self) -> DataCursor:
        state = self.block.state_before(self.index)
        residual = None
        if self.residual is not None:
            source, draw, token_offset = self.residual
            residual = PackerResidual(
                source=self.names[source], draw=draw, token_offset=token_offset
            )
        update = {
            "stage": state.stage,
            "stage_units": dict(zip(self.names, state.base, strict=True)) if state.base else {},
            "epoch": state.epoch,
            "step": self.step,
            "position": self.sample,
            "source_draws": dict(zip(self.names, state.draws, strict=True)),
            "source_units": dict(zip(self.names, state.units, strict=True)),
            "residual": residual,
        }
        if self.lost:
            update["quarantined"] = tuple(
                record.model_copy(update={"documents_lost": docs, "tokens_lost": tokens})
                for record, (docs, tokens) in zip(self.template.quarantined, self.lost, strict=True)
            )
        return self.template.model_copy(update=update)


@dataclass(frozen=True)
class Exclusion:
    """The shards a planner leaves out, and how it counts what they lose."""

    slot: np.ndarray
    """Per shard (ShardTable index): its record in the cursor's `quarantined`, or -1 (int64)."""
    lost_lengths: list[np.ndarray]
    """Per source, per document: the tokens a skipped one counts as lost (int64)."""
    stop_after_draws: int
    """Consecutive skipped draws after which nothing readable can be left (the stream's every
    document and a block more): the planner then raises rather than draw forever."""


@dataclass(frozen=True)
class _Skips:
    """What one block of draws left out."""

    before: np.ndarray
    """(documents, tokens) lost per record before the block, shape (records, 2)."""
    slot: np.ndarray | None = None
    """Per draw of the block: its shard's record, or -1 when it was kept; None: all kept."""
    tokens: np.ndarray | None = None
    """Per draw: tokens it lost (0 when kept)."""

    def lost_before(self, index: int) -> tuple[tuple[int, int], ...]:
        """Cumulative (documents, tokens) per record before draw `index` of the block."""
        lost = self.before
        if self.slot is not None and self.tokens is not None:
            lost = lost + _count(self.slot[:index], self.tokens[:index], lost.shape[0])
        return tuple((int(docs), int(toks)) for docs, toks in lost)


def _count(slot: np.ndarray, tokens: np.ndarray, records: int) -> np.ndarray:
    """(documents, tokens) per record of the skipped draws among `slot` (-1: kept)."""
    mask = slot >= 0
    docs = np.bincount(slot[mask], minlength=records)
    # Token counts of one block stay far below 2**53, so float weights are exact.
    toks = np.bincount(slot[mask], weights=tokens[mask], minlength=records)
    return np.stack([docs, toks.astype(np.int64)], axis=1)


class Planner:
    """Turns the document stream into BatchPlans for one rank, starting from a cursor."""

    def __init__(
        self,
        stream: DocStream,
        packer: Packer,
        sources: list[SourceTable],
        cursor: DataCursor,
        *,
        global_batch_samples: int,
        dp_rank: int,
        dp_size: int,
        exclusion: Exclusion | None = None,
        stages: list[Stage] | None = None,
    ) -> None:
        self.stream = stream
        self.exclusion = exclusion
        self.packer = packer
        self.sources = sources
        self.template = cursor
        self.seq = cursor.sequence_length
        self.global_batch = global_batch_samples
        self.local_rows = global_batch_samples // dp_size
        self.first_local = dp_rank * self.local_rows
        self.stride = packer.stride(self.seq)
        self.extent = self.seq + 1 if self.stride == self.seq else 1
        self.names = tuple(s.name for s in sources)
        self.step = cursor.step
        self.sample = cursor.position
        self.pos = 0
        self._blocks: list[tuple[int, DocBlock, _Skips | None]] = []
        """(window index of the block's first kept document, the block, what it skipped)."""
        self._base = 0
        self._lost = np.asarray(
            [[r.documents_lost, r.tokens_lost] for r in cursor.quarantined], dtype=np.int64
        ).reshape(-1, 2)
        self._skipped_run = 0
        self._src = np.zeros(0, dtype=np.int64)
        self._draw = np.zeros(0, dtype=np.int64)
        self._doc = np.zeros(0, dtype=np.int64)
        self._len = np.zeros(0, dtype=np.int64)
        self._shard = np.zeros(0, dtype=np.int64)
        self._offset = np.zeros(0, dtype=np.int64)
        self._start = np.zeros(0, dtype=np.int64)
        self._end = np.zeros(0, dtype=np.int64)
        self._bidx = np.zeros(0, dtype=np.int64)
        """Each window document's index within its block."""
        self.stages = stages
        self._stage = cursor.stage
        self._boundary: int | None = None
        """Stream position where the next stage begins (this planner's positions), or None."""
        self._set_boundary()
        if cursor.residual is not None:
            self._seed_residual(cursor.residual)

    def _set_boundary(self) -> None:
        stages = self.stages
        if stages is None or self._stage + 1 >= len(stages):
            self._boundary = None
            return
        # Position 0 is the cursor's step; the next stage's first row starts its steps later.
        steps_ahead = stages[self._stage + 1].start_step - self.template.step
        self._boundary = steps_ahead * self.global_batch * self.stride

    def _enter_next_stage(self, state: StreamState) -> None:
        """Continue the stream from `state` in the next stage."""
        assert self.stages is not None
        self._stage += 1
        tables = self.stages[self._stage].tables(self.sources)
        self.stream.enter_stage(self._stage, tables, state)
        self._set_boundary()

    def _stage_cut(self, block: DocBlock, shard: np.ndarray, origin: int) -> int | None:
        """Index of the block's first kept document starting at or after the next stage's
        start, or None when the whole block lies before it."""
        if self._boundary is None:
            return None
        kept = np.ones(len(block), dtype=bool)
        if self.exclusion is not None:
            kept = self.exclusion.slot[shard] < 0
        spans = self.packer.spans(block.length[kept])
        starts = origin + np.cumsum(spans) - spans
        first = int(np.searchsorted(starts, self._boundary, side="left"))
        if first == starts.shape[0]:
            return None
        return int(np.flatnonzero(kept)[first])

    def _seed_residual(self, residual: PackerResidual) -> None:
        names = [s.name for s in self.sources]
        i = names.index(residual.source)
        epoch = self.stream.state.epoch
        doc = self.stream.lookup(i, np.array([residual.draw], dtype=np.int64), epoch)
        length = self.sources[i].lengths[doc]
        units = np.ones(1, dtype=np.int64)
        if self.stream.doc_units is not None:
            units = self.stream.doc_units(length)
        st = self.stream.state
        before_draws = list(st.draws)
        before_units = list(st.units)
        before_draws[i] -= 1
        before_units[i] -= int(units[0])
        block = DocBlock(
            epoch=epoch,
            start_draws=tuple(before_draws),
            start_units=tuple(before_units),
            source=np.array([i], dtype=np.int64),
            draw=np.array([residual.draw], dtype=np.int64),
            doc=doc,
            length=length,
            units=units,
            stage=st.stage,
            base=st.base,
        )
        self._append(block, first_start=-residual.token_offset)

    def _append(self, block: DocBlock, first_start: int | None = None) -> None:
        # Where each document's tokens live, looked up once per block rather than per step.
        shard = np.empty(len(block), dtype=np.int64)
        offset = np.empty(len(block), dtype=np.int64)
        for i in range(len(self.sources)):
            sel = block.source == i
            table = self.sources[i]
            shard[sel] = table.shard[block.doc[sel]]
            offset[sel] = table.offset[block.doc[sel]]
        origin = (
            (int(self._end[-1]) if self._end.shape[0] else 0)
            if first_start is None
            else (first_start)
        )
        cut = None if first_start is not None else self._stage_cut(block, shard, origin)
        if cut is not None:
            # The rest of the block belongs to the next stage: draw it again there.
            block, shard, offset = block.head(cut), shard[:cut], offset[:cut]
            self._enter_next_stage(block.state_before(cut))
        source, draw, doc, length = block.source, block.draw, block.doc, block.length
        bidx = np.arange(len(block), dtype=np.int64)
        skips = self._skips(block, shard)
        if skips is not None and skips.slot is not None:
            kept = skips.slot < 0
            source, draw, doc, length = source[kept], draw[kept], doc[kept], length[kept]
            shard, offset, bidx = shard[kept], offset[kept], bidx[kept]
        spans = self.packer.spans(length)
        ends = origin + np.cumsum(spans)
        self._blocks.append((self._base + self._src.shape[0], block, skips))
        self._src = np.concatenate([self._src, source])
        self._draw = np.concatenate([self._draw, draw])
        self._doc = np.concatenate([self._doc, doc])
        self._len = np.concatenate([self._len, length])
        self._shard = np.concatenate([self._shard, shard])
        self._offset = np.concatenate([self._offset, offset])
        self._start = np.concatenate([self._start, ends - spans])
        self._end = np.concatenate([self._end, ends])
        self._bidx = np.concatenate([self._bidx, bidx])

    def _skips(self, block: DocBlock, shard: np.ndarray) -> _Skips | None:
        """The block's draws from quarantined shards and what they lose; None without any
        quarantined shard."""
        if self.exclusion is None:
            return None
        slot = self.exclusion.slot[shard]
        skipped = slot >= 0
        if not skipped.any():
            self._skipped_run = 0
            return _Skips(before=self._lost)
        tokens = np.zeros(len(block), dtype=np.int64)
        for i in np.unique(block.source[skipped]).tolist():
            sel = skipped & (block.source == i)
            tokens[sel] = self.exclusion.lost_lengths[i][block.doc[sel]]
        before = self._lost
        self._lost = before + _count(slot, tokens, before.shape[0])
        kept = np.flatnonzero(~skipped)
        self._skipped_run = (
            self._skipped_run + len(block) if not kept.shape[0] else len(block) - 1 - int(kept[-1])
        )
        if self._skipped_run > self.exclusion.stop_after_draws:
            raise DataError(
                f"the last {self._skipped_run} documents drawn were all in quarantined shards: "
                "nothing readable is left to train on. Restore the shards named by the "
                "DATA_SHARD_QUARANTINED events (`runwright data verify` says what is wrong) and "
                "resume"
            )
        return _Skips(before=before, slot=slot, tokens=tokens)

    def _cover(self, position: int) -> bool:
        """Extend the window until a document ends after `position`; False at stream end."""
        while not self._end.shape[0] or int(self._end[-1]) <= position:
            end = int(self._end[-1]) if self._end.shape[0] else 0
            while self._boundary is not None and end >= self._boundary:
                # The window ends at or past the next stage's start: draw in that stage.
                self._enter_next_stage(self.stream.state)
            block = self.stream.next_block()
            if block is None:
                return False
            if len(block):
                self._append(block)
        return True

    def _locate(self, j: int) -> tuple[DocBlock, int, _Skips | None]:
        """The block holding window document j, j's index inside it, and the block's skips;
        past the window's end, the last block and its length (everything drawn)."""
        if j >= self._end.shape[0]:
            _, block, skips = self._blocks[-1]
            return block, len(block), skips
        absolute = self._base + j
        # A block whose draws were all skipped starts where the next one does: scanning from
        # the end finds the block that holds document j.
        for first, block, skips in reversed(self._blocks):
            if first <= absolute:
                return block, int(self._bidx[j]), skips
        raise AssertionError("window index before the first block")

    def _cursor_at(self, j: int, position: int, step: int, sample: int) -> CursorPoint:
        """The cursor at stream `position`, inside or just before window document j. Draws
        skipped before document j count as consumed; those after a split one do not yet."""
        start = int(self._start[j]) if j < self._end.shape[0] else position
        residual = None
        block, index, skips = self._locate(j)
        if start != position:
            # Counters after document j itself: it is drawn, the rest of it waits in the residual.
            index += 1
            residual = (int(self._src[j]), int(self._draw[j]), position - start)
        lost = skips.lost_before(index) if skips is not None else ()
        return CursorPoint(self.template, self.names, block, index, residual, step, sample, lost)

    def _trim(self, keep: int) -> None:
        """Drop the window's first `keep` documents (all ended before the planned position)."""
        self._base += keep
        self._src, self._draw = self._src[keep:], self._draw[keep:]
        self._doc, self._len = self._doc[keep:], self._len[keep:]
        self._shard, self._offset = self._shard[keep:], self._offset[keep:]
        self._start, self._end = self._start[keep:], self._end[keep:]
        self._bidx = self._bidx[keep:]
        while len(self._blocks) > 1 and self._blocks[1][0] <= self._base:
            self._blocks.pop(0)

    def next_batch(self) -> BatchPlan | None:
        """Plan the next global step, or None when the stream cannot fill a whole step."""
        new_pos = self.pos + self.global_batch * self.stride
        last_end = new_pos - self.stride + self.extent
        if not self._cover(last_end - 1):
            return None
        # The cursor needs the document at new_pos; at the very end of a finite stream there is
        # none, and the cursor is the state after the last document.
        self._cover(new_pos)
        j = int(np.searchsorted(self._end, new_pos, side="right"))
        first_row = self.pos + self.first_local * self.stride
        plan = BatchPlan(
            step=self.step,
            first_sample=self.sample,
            end_sample=self.sample + self.global_batch,
            rows=self.local_rows,
            first_row_start=first_row,
            rows_end=first_row + (self.local_rows - 1) * self.stride + self.extent,
            window=DocWindow(self._start, self._end, self._len, self._shard, self._offset),
            cursor=self._cursor_at(j, new_pos, self.step + 1, self.sample + self.global_batch),
            doc_sources=self._src,
        )
        self.pos = new_pos
        self.step += 1
        self.sample += self.global_batch
        # Documents before j are consumed; dropping them costs eight slices, so it waits until
        # there are enough of them (every kernel and look-up searches the window anyway).
        if j >= _TRIM_DOCUMENTS:
            self._trim(j)
        return plan
