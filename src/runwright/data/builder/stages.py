"""Build stages: each has a name, its parameters, counters of what it kept and dropped by reason,
and the lineage record the manifest stores for it.

    partition processes (in parallel):  Read -> Normalise -> Filter
    the build process (in order):       ExactDedup -> EvalSplit -> NearDedup -> Tokenize -> Shard

Document stages are generators in the style of datatrove's pipeline steps: `run(docs)` yields
the documents it keeps and counts the others under a reason. The partition processes run their
own Read, Normalise and Filter over some input files and send back the counters, which the
build adds into the recipe-wide stages (`Counters.add`). A stage's `lineage()` is
`StageRecord(name, parameters)` with the parameters that change its output, so the manifest's
lineage is what the stages that ran say about themselves. The statistics are their counters.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
from tokenizers import Tokenizer

from runwright.data.builder.clean import FilterCheck, first_rejection, make_filters, normalise
from runwright.data.builder.dedup import MINHASH_SCHEME, is_eval, near_duplicates
from runwright.data.builder.recipe import (
    LANGUAGE_UNDETERMINED,
    EvalSpec,
    FilterSpec,
    NearDedupSpec,
    NormaliseSpec,
    SourceSpec,
    TokenizerRecipe,
)
from runwright.data.builder.sources import READERS
from runwright.data.builder.tokenizer import load_tokenizer, save_and_describe, train_bpe
from runwright.data.format.manifest import (
    InputRecord,
    ShardRecord,
    SourceStatistics,
    StageRecord,
    TokenizerRecord,
)
from runwright.data.format.pretokenized import length_histogram
from runwright.data.format.shard_set import ShardSet
from runwright.spec import sha256_hex


@dataclass(slots=True)
class Document:
    """One document on its way through the stages; each stage fills in what it computes."""

    source: str
    """Source the document came from."""
    text: str
    """Its text (normalised once Normalise ran)."""
    digest: bytes = b""
    """blake2b-128 of the normalised text (the exact-dedup key; set in the partition)."""
    signature: np.ndarray | None = None
    """MinHash values when near dedup is on (set in the partition)."""
    split: str | None = None
    """`train` or `eval` once EvalSplit ran."""
    language: str = LANGUAGE_UNDETERMINED
    """Language code once the language stage ran (language.py); `und` until then or without it."""


@dataclass
class Counters:
    """What one stage saw, kept and dropped, per source (datatrove's per-step statistics)."""

    seen: Counter[str] = field(default_factory=Counter)
    """Source -> records that reached the stage."""
    kept: Counter[str] = field(default_factory=Counter)
    """Source -> records the stage passed on."""
    dropped: dict[str, Counter[str]] = field(default_factory=dict)
    """Source -> reason -> records (or, for `reader-error`, inputs) the stage dropped."""

    def keep(self, source: str) -> None:
        self.seen[source] += 1
        self.kept[source] += 1

    def drop(self, source: str, reason: str, seen: int = 1) -> None:
        """Count a drop; `seen=0` when no record was read (a whole input that failed to parse)."""
        self.seen[source] += seen
        self.dropped.setdefault(source, Counter())[reason] += 1

    def sieve(
        self, docs: Iterable["Document"], rejection: Callable[[int, "Document"], str | None]
    ) -> Iterator["Document"]:
        """Pass on each document `rejection(index, doc)` has no reason for; count both ways."""
        for k, doc in enumerate(docs):
            reason = rejection(k, doc)
            if reason is not None:
                self.drop(doc.source, reason)
                continue
            self.keep(doc.source)
            yield doc

    def add(self, other: "Counters") -> None:
        """Add a partition's counts into these."""
        self.seen.update(other.seen)
        self.kept.update(other.kept)
        for source, reasons in other.dropped.items():
            self.dropped.setdefault(source, Counter()).update(reasons)

    def seen_per_source(self, sources: list[str]) -> dict[str, int]:
        return {s: self.seen[s] for s in sources}

    def dropped_per_source(self, sources: list[str]) -> dict[str, int]:
        return {s: sum(self.dropped.get(s, Counter()).values()) for s in sources}

    def reasons_per_source(self, sources: list[str]) -> dict[str, dict[str, int]]:
        return {s: dict(sorted(self.dropped.get(s, Counter()).items())) for s in sources}

    def dropped_for(self, reason: str) -> int:
        """Drops under one reason, over every source."""
        return sum(reasons[reason] for reasons in self.dropped.values())


class Stage(Protocol):
    """What the build asks of every stage."""

    name: ClassVar[str]
    counters: Counters

    def lineage(self) -> StageRecord:
        """This stage's entry in the manifest's lineage: its name and output-changing parameters."""
        ...


def source_lineage(source: SourceSpec) -> dict[str, Any]:
    """A source as lineage records it. Paths stay out: they are machine-specific (inputs are
    recorded by relative path and digest instead), and so does the partition size."""
    return source.model_dump(exclude={"paths", "files_per_partition"})


@dataclass
class Read:
    """Parse input files into documents; send what cannot be used to quarantine, with a reason
    (`reader-error`, `oversized-record`, or the reader's own: `undecodable-bytes`, ...)."""

    name: ClassVar[str] = "read"
    sources: list[SourceSpec]
    counters: Counters = field(default_factory=Counters)
    inputs: list[InputRecord] = field(default_factory=list)
    """Every input read, with its digest, in read order (the lineage's inputs)."""
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    """What went to quarantine and why (`quarantine/records.jsonl`)."""

    def lineage(self) -> StageRecord:
        sources = [source_lineage(s) for s in self.sources]
        return StageRecord(name=self.name, parameters={"sources": sources})

    def run(self, source: SourceSpec, files: Iterable[tuple[str, bytes]]) -> Iterator[Document]:
        """Documents of `files` (relative path, bytes), all inputs of `source`."""
        reader = READERS.get(source.kind)
        for relative, data in files:
            self.inputs.append(
                InputRecord(
                    source=source.name, path=relative, bytes=len(data), sha256=sha256_hex(data)
                )
            )
            try:
                items = list(reader.items(source, data, relative))
            except Exception as exc:  # a custom extractor failing is a property of this input
                self._quarantine(source.name, relative, 0, "reader-error", repr(exc), seen=0)
                continue
            for item in items:
                text, reason, detail = item.text, item.reason, item.detail
                if text is not None and len(text) > source.max_record_chars:
                    text, reason, detail = None, "oversized-record", f"{len(text)} chars"
                if text is None:
                    self._quarantine(source.name, relative, item.record, reason, detail)
                    continue
                self.counters.keep(source.name)
                yield Document(source.name, text)

    def _quarantine(
        self,
        source: str,
        relative: str,
        record: int,
        reason: str | None,
        detail: str,
        seen: int = 1,
    ) -> None:
        self.counters.drop(source, reason or "unknown", seen=seen)
        self.quarantine.append(
            {
                "source": source,
                "input": relative,
                "record": record,
                "reason": reason,
                "detail": detail,
            }
        )


@dataclass
class Normalise:
    """Unicode normal form, newline folding, control-character removal; drops nothing."""

    name: ClassVar[str] = "normalise"
    spec: NormaliseSpec
    counters: Counters = field(default_factory=Counters)

    def lineage(self) -> StageRecord:
        return StageRecord(name=self.name, parameters=self.spec.model_dump())

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        for doc in docs:
            doc.text = normalise(doc.text, self.spec)
            self.counters.keep(doc.source)
            yield doc


@dataclass
class Filter:
    """The recipe's filters in order; a drop counts under `<filter kind>:<reason>`."""

    name: ClassVar[str] = "filter"
    specs: list[FilterSpec]
    counters: Counters = field(default_factory=Counters)

    def lineage(self) -> StageRecord:
        return StageRecord(
            name=self.name, parameters={"filters": [f.model_dump() for f in self.specs]}
        )

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        # Built when run, not when constructed: a custom-v1 filter imports the user's function,
        # which only the processes that filter need.
        checks: list[tuple[str, FilterCheck]] = make_filters(self.specs)
        yield from self.counters.sieve(docs, lambda _k, doc: first_rejection(doc.text, checks))


@dataclass
class ExactDedup:
    """Drop a document whose normalised-text hash was seen before (over all sources)."""

    name: ClassVar[str] = "exact-dedup"
    enabled: bool
    counters: Counters = field(default_factory=Counters)

    def lineage(self) -> StageRecord:
        return StageRecord(name=self.name, parameters={"enabled": self.enabled})

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        seen: set[bytes] = set()
        for doc in docs:
            if self.enabled and doc.digest in seen:
                self.counters.drop(doc.source, "exact-duplicate")
                continue
            seen.add(doc.digest)
            self.counters.keep(doc.source)
            yield doc


@dataclass
class EvalSplit:
    """Send a document to eval when a seeded hash of its text hash falls below the fraction."""

    name: ClassVar[str] = "eval-split"
    spec: EvalSpec
    counters: Counters = field(default_factory=Counters)

    def lineage(self) -> StageRecord:
        return StageRecord(name=self.name, parameters=self.spec.model_dump())

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        for doc in docs:
            doc.split = "eval" if is_eval(doc.digest, self.spec) else "train"
            self.counters.keep(doc.source)
            yield doc


@dataclass
class NearDedup:
    """MinHash LSH over every document (eval first): drop `near-duplicate-of-eval` (the recorded
    train/eval boundary) and `near-duplicate`. Off when the recipe's `dedup.near` is null."""

    name: ClassVar[str] = "near-dedup"
    spec: NearDedupSpec | None
    counters: Counters = field(default_factory=Counters)

    def lineage(self) -> StageRecord:
        if self.spec is None:
            return StageRecord(name=self.name, parameters={"enabled": False})
        return StageRecord(
            name=self.name, parameters={**self.spec.model_dump(), "scheme": MINHASH_SCHEME}
        )

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        docs = list(docs)  # eval documents go into the index before any train document
        dropped = (
            near_duplicates([d.split for d in docs], [d.signature for d in docs], self.spec)
            if self.spec is not None
            else {}
        )
        yield from self.counters.sieve(docs, lambda k, _doc: dropped.get(k))


@dataclass
class Tokenize:
    """Load the recipe's tokenizer.json or train byte-level BPE on train, then encode."""

    name: ClassVar[str] = "tokenize"
    spec: TokenizerRecipe
    counters: Counters = field(default_factory=Counters)
    tokenizer: Tokenizer | None = field(default=None, init=False, repr=False)
    """The tokenizer, once `prepare` loaded or trained it."""
    chunk_documents: ClassVar[int] = 512
    """Documents per `encode_batch` call (and per progress update)."""

    @property
    def trained(self) -> bool:
        return self.spec.path is None

    def lineage(self) -> StageRecord:
        train = self.spec.train
        return StageRecord(
            name=self.name,
            parameters={
                "trained": self.trained,
                "train": train.model_dump() if train else None,
                "eod_token": self.spec.eod_token,
            },
        )

    def prepare(self, docs: list[Document], folder: Path) -> TokenizerRecord:
        """Load or train (on the train documents, in order) and save it into the dataset folder."""
        if self.trained:
            self.tokenizer = train_bpe((d.text for d in docs if d.split == "train"), self.spec)
        else:
            self.tokenizer = load_tokenizer(self.spec)
        return save_and_describe(self.tokenizer, folder, self.spec, self.trained)

    def unknown_token_id(self) -> int | None:
        """The id of the tokenizer's unknown token; None when it has none (byte-level BPE)."""
        if self.tokenizer is None:
            raise RuntimeError("Tokenize.prepare must run before Tokenize.unknown_token_id")
        unk = getattr(self.tokenizer.model, "unk_token", None)
        if isinstance(unk, str):
            return self.tokenizer.token_to_id(unk)
        unk_id = getattr(self.tokenizer.model, "unk_id", None)  # Unigram
        return unk_id if isinstance(unk_id, int) else None

    def run(
        self, docs: list[Document], advance: Callable[[int], None] | None = None
    ) -> Iterator[tuple[Document, list[int]]]:
        """Each document with its token ids. The ids are not kept on the document: held for
        every document at once they would take ~36 bytes per token (a Python int and its slot)."""
        if self.tokenizer is None:
            raise RuntimeError("Tokenize.prepare must run before Tokenize.run")
        for start in range(0, len(docs), self.chunk_documents):
            chunk = docs[start : start + self.chunk_documents]
            encoded = self.tokenizer.encode_batch([d.text for d in chunk], add_special_tokens=False)
            for doc, enc in zip(chunk, encoded, strict=True):
                self.counters.keep(doc.source)
                yield doc, enc.ids
            if advance is not None:
                advance(len(chunk))


@dataclass
class _SplitCounts:
    documents: int = 0
    tokens: int = 0
    chars: int = 0
    lengths: list[int] = field(default_factory=list)


SHARD_FORMAT = "megatron-mmidx-v1"


@dataclass
class Shard:
    """Write each (source, split)'s documents into size-bounded Megatron shards."""

    name: ClassVar[str] = "shard"
    max_tokens_per_shard: int
    dtype: np.dtype
    """Token dtype, from the vocabulary size (format/indexed_shard.py, `token_dtype`)."""
    counters: Counters = field(default_factory=Counters)
    _splits: dict[tuple[str, str], _SplitCounts] = field(default_factory=dict, init=False)

    def lineage(self) -> StageRecord:
        return StageRecord(
            name=self.name,
            parameters={
                "format": SHARD_FORMAT,
                "dtype": np.dtype(self.dtype).name,
                "max_tokens_per_shard": self.max_tokens_per_shard,
            },
        )

    def run(self, encoded: Iterable[tuple[Document, list[int]]], folder: Path) -> list[ShardRecord]:
        """Write (document, token ids) pairs; the shards' manifest records, in a stable order."""
        shards = ShardSet(folder, self.dtype, self.max_tokens_per_shard)
        for doc, ids in encoded:
            if doc.split is None:
                raise ValueError("Shard needs documents that EvalSplit assigned to a split")
            shards.add(doc.source, doc.split, ids)
            counts = self._splits.setdefault((doc.split, doc.source), _SplitCounts())
            counts.documents += 1
            counts.tokens += len(ids)
            counts.chars += len(doc.text)
            counts.lengths.append(len(ids))
            self.counters.keep(doc.source)
        return shards.finish()

    def statistics(self) -> dict[str, dict[str, SourceStatistics]]:
        """Split -> source -> what was written."""
        splits: dict[str, dict[str, SourceStatistics]] = {}
        for (split, source), c in sorted(self._splits.items()):
            splits.setdefault(split, {})[source] = SourceStatistics(
                documents=c.documents,
                tokens=c.tokens,
                chars=c.chars,
                chars_per_token=round(c.chars / c.tokens, 4) if c.tokens else 0.0,
                length_histogram=length_histogram(c.lengths),
            )
        return splits
