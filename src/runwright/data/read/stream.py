"""The logical document sequence: mixture picks a source, the shuffle picks its next document.

Draw number c of source i in epoch e is document `permute(c mod n_i, n_i, key(i, e, c div n_i))`
of that source, so a source that repeats gets a fresh permutation on every pass. The mixture
picks sources from counters alone. Documents are produced in blocks (vectorised permutation and
length look-up); a block never crosses an epoch, and never lets a non-repeating source run past
its end, so the set of active sources is constant inside it.

Exhaustion policies, applied when a source has given all n_i documents of the epoch:
- `repeat`: keep drawing; its next pass is a new permutation.
- `renormalise`: drop it; the remaining weights are renormalised.
- `stop`: the epoch ends.
- `error`: the next draw of the epoch raises SourceExhaustedError.
An epoch also ends when no source is left. The next epoch resets the counters and reshuffles.

A staged mixture (`staged-quota-v1`, stages.py) swaps the sources' weights at a stage's start: a
source at weight 0 is not drawn, and the mixture sees the units consumed since the stage began
(`StreamState.base` holds the units at its start), so its quotas are exact within each stage
while every source's draws, and so its place in its permutation, carry on.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from runwright.data.errors import SourceExhaustedError
from runwright.data.read.mixture import Mixture
from runwright.data.read.shuffle import Shuffle, context_key

BLOCK_DOCS = 16384
"""Draws per block. The shuffle's cycle walk and the mixture cost a fixed number of numpy calls
per block, so bigger blocks amortise them (4,096 -> 16,384 halved the stream's share of planning
at S = 2048); the price is one ~5 ms planning burst per block, which the prefetch queue absorbs.
The sequence does not depend on it."""


@dataclass(frozen=True)
class SourceTable:
    """One mixture source's train documents, in shard order."""

    name: str
    lengths: np.ndarray
    """Tokens per document (int64)."""
    shard: np.ndarray
    """Index of the shard holding each document (int64)."""
    offset: np.ndarray
    """First token of each document within its shard (int64)."""
    weight: float
    """Target share (normalised over the active sources)."""
    exhaustion: str
    """`stop`, `repeat`, `renormalise` or `error`."""

    @property
    def documents(self) -> int:
        return int(self.lengths.shape[0])


@dataclass
class StreamState:
    """Counters the next draw depends on."""

    epoch: int
    draws: list[int]
    units: list[int]
    stage: int = 0
    """Mixture stage (0 unless the mixture is staged)."""
    base: tuple[int, ...] | None = None
    """Units per source when the stage began in this epoch; None: all 0."""


@dataclass(frozen=True)
class DocBlock:
    """Consecutive draws of one epoch."""

    epoch: int
    start_draws: tuple[int, ...]
    start_units: tuple[int, ...]
    source: np.ndarray
    """Source index of each document (int64)."""
    draw: np.ndarray
    """Draw number of each document within its source (int64)."""
    doc: np.ndarray
    """Document index within its source table (int64)."""
    length: np.ndarray
    """Tokens of each document (int64)."""
    units: np.ndarray
    """Mixture units of each document (int64)."""
    stage: int = 0
    """Mixture stage the block was drawn in."""
    base: tuple[int, ...] | None = None
    """Units per source when that stage began in this epoch; None: all 0."""

    def __len__(self) -> int:
        return int(self.source.shape[0])

    def head(self, count: int) -> "DocBlock":
        """The block's first `count` draws."""
        return replace(
            self,
            source=self.source[:count],
            draw=self.draw[:count],
            doc=self.doc[:count],
            length=self.length[:count],
            units=self.units[:count],
        )

    def state_before(self, j: int) -> StreamState:
        """Counters before document j of the block was drawn."""
        m = len(self.start_draws)
        src, units = self.source[:j], self.units[:j]
        d = np.bincount(src, minlength=m)
        u = [int(units[src == i].sum()) for i in range(m)]
        return StreamState(
            epoch=self.epoch,
            draws=[a + int(b) for a, b in zip(self.start_draws, d, strict=True)],
            units=[a + b for a, b in zip(self.start_units, u, strict=True)],
            stage=self.stage,
            base=self.base,
        )


@dataclass
class DocStream:
    """Generates DocBlocks from a StreamState; deterministic in (dataset id, seed, algorithms)."""

    sources: list[SourceTable]
    shuffle: Shuffle
    mixture: Mixture
    doc_units: Callable[[np.ndarray], np.ndarray] | None
    """Units per document from lengths; None for the `documents` unit."""
    dataset_id: str
    seed: int
    state: StreamState
    epochs: int | None = None
    """Epochs to produce; None for an endless stream."""
    block_docs: int = BLOCK_DOCS
    """Draws per block (BLOCK_DOCS)."""
    epoch_ends: dict[int, StreamState] = field(default_factory=dict)
    """epoch -> the state it ended in (the loader's drift windows count across a boundary)."""
    _poisoned: str | None = field(default=None, init=False)

    def _key(self, *parts: object) -> int:
        return context_key(self.dataset_id, self.seed, *parts)

    def _exhausted(self, i: int) -> bool:
        src = self.sources[i]
        return src.exhaustion != "repeat" and self.state.draws[i] >= src.documents

    def _new_epoch(self) -> None:
        self.epoch_ends[self.state.epoch] = self.state
        m = len(self.sources)
        self.state = StreamState(
            epoch=self.state.epoch + 1, draws=[0] * m, units=[0] * m, stage=self.state.stage
        )

    def enter_stage(self, stage: int, sources: list[SourceTable], state: StreamState) -> None:
        """Continue from `state` (counters after the previous stage's last draw) in `stage`,
        drawing from `sources` (the same tables with that stage's weights)."""
        self.sources = sources
        self.state = StreamState(
            epoch=state.epoch,
            draws=list(state.draws),
            units=list(state.units),
            stage=stage,
            base=tuple(state.units),
        )
        self._poisoned = None
        for i, src in enumerate(sources):
            if (
                src.exhaustion == "error"
                and src.weight > 0
                and self.state.draws[i] >= src.documents
            ):
                self._poisoned = src.name

    def lookup(self, i: int, draws: np.ndarray, epoch: int) -> np.ndarray:
        """Document indices of source i's draws (increasing), vectorised over passes."""
        n = self.sources[i].documents
        out = np.empty_like(draws)
        if not draws.shape[0]:
            return out
        # Draws come in increasing order, so each pass is one contiguous run.
        passes = draws // n
        first, last = int(passes[0]), int(passes[-1])
        bounds = np.searchsorted(passes, np.arange(first, last + 2)).tolist()
        for p in range(first, last + 1):
            lo, hi = bounds[p - first], bounds[p - first + 1]
            key = self._key(self.shuffle.name, self.sources[i].name, epoch, p)
            out[lo:hi] = self.shuffle.permute(draws[lo:hi] - p * n, n, key)
        return out

    def next_block(self) -> DocBlock | None:
        """The next block of draws, or None when the requested epochs are done."""
        while True:
            if self.epochs is not None and self.state.epoch >= self.epochs:
                return None
            if self._poisoned is not None:
                raise SourceExhaustedError(
                    f"source {self._poisoned!r} ran out in epoch {self.state.epoch} and its "
                    "exhaustion policy is `error`; give it exhaustion `repeat`, `renormalise` or "
                    "`stop`, or lower its weight"
                )
            stop = any(
                self._exhausted(i) and s.exhaustion == "stop" for i, s in enumerate(self.sources)
            )
            active = [
                i
                for i in range(len(self.sources))
                if not self._exhausted(i) and self.sources[i].weight > 0
            ]
            if stop or not active:
                self._new_epoch()
                continue
            return self._draw(active)

    def _draw(self, active: list[int]) -> DocBlock:
        st = self.state
        count = self.block_docs
        for i in active:
            if self.sources[i].exhaustion != "repeat":
                count = min(count, self.sources[i].documents - st.draws[i])
        # Token units need each source's next document lengths while choosing (look-ahead);
        # the documents unit does not, so only the chosen draws are permuted.
        ahead_doc: dict[int, np.ndarray] = {}
        ahead: list[np.ndarray] | None = None
        if self.doc_units is not None:
            ahead = []
            for i in active:
                draws = np.arange(st.draws[i], st.draws[i] + count, dtype=np.int64)
                ahead_doc[i] = self.lookup(i, draws, st.epoch)
                ahead.append(self.doc_units(self.sources[i].lengths[ahead_doc[i]]))
        total_weight = sum(self.sources[i].weight for i in active)
        shares = [self.sources[i].weight / total_weight for i in active]
        base = st.base or (0,) * len(self.sources)
        local_units = [st.units[i] - base[i] for i in active]
        draws_so_far = sum(st.draws)
        mix_key = self._key(self.mixture.name, st.epoch)
        local = self.mixture.choose_block(shares, local_units, draws_so_far, mix_key, count, ahead)
        source = np.asarray(active, dtype=np.int64)[local]
        draw = np.empty(count, dtype=np.int64)
        doc = np.empty(count, dtype=np.int64)
        for k, i in enumerate(active):
            sel = np.flatnonzero(local == k)
            mine = st.draws[i] + np.arange(sel.shape[0], dtype=np.int64)
            draw[sel] = mine
            if i in ahead_doc:
                doc[sel] = ahead_doc[i][: sel.shape[0]]
            elif sel.shape[0]:
                doc[sel] = self.lookup(i, mine, st.epoch)
        length = np.empty(count, dtype=np.int64)
        for i in active:
            sel = source == i
            length[sel] = self.sources[i].lengths[doc[sel]]
        units = np.ones(count, dtype=np.int64) if self.doc_units is None else self.doc_units(length)
        block = DocBlock(
            epoch=st.epoch,
            start_draws=tuple(st.draws),
            start_units=tuple(st.units),
            source=source,
            draw=draw,
            doc=doc,
            length=length,
            units=units,
            stage=st.stage,
            base=st.base,
        )
        self.state = block.state_before(count)
        for i in active:
            src = self.sources[i]
            if src.exhaustion == "error" and self.state.draws[i] >= src.documents:
                self._poisoned = src.name
        return block
