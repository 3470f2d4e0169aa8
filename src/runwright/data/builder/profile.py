"""Counting the build profile (format/profile.py): per source and language, through the stages.

The partitions count the raw text's anomalies (control characters and binary content before
Normalise removes them, empty documents after it) and, per language, what reached the filters
and what passed them. The build process counts, per language, what the language filter and the
dedup stages dropped, and what Tokenize and Shard kept: tokens, characters, unknown tokens, empty
results and lengths. Nothing here keeps text: only counts keyed by source and language code.
"""

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from runwright.data.builder.stages import Document
from runwright.data.format.pretokenized import length_histogram
from runwright.data.format.profile import (
    BuildProfile,
    LanguageProfile,
    LengthBucket,
    SourceProfile,
    TokenizerAnomalies,
)

Key = tuple[str, str]
"""(source, language)."""

_CONTROL = frozenset(c for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)) | frozenset(
    range(0x7F, 0xA0)
)
_CONTROL_CHARS = "".join(map(chr, sorted(_CONTROL)))
BINARY_CONTROL_SHARE = 0.1
"""A document whose control characters are at least this share of it is binary content."""


def control_count(text: str) -> int:
    """C0/C1 control characters other than tab, newline and carriage return."""
    # str.translate deleting the controls and comparing lengths runs in C.
    return len(text) - len(text.translate(_DELETE_CONTROL))


_DELETE_CONTROL = {c: None for c in _CONTROL}


def tally(docs: Iterable[Document], into: Counter[Key]) -> Iterator[Document]:
    """Pass documents on, counting them per (source, language)."""
    for doc in docs:
        into[(doc.source, doc.language)] += 1
        yield doc


@dataclass
class PartitionProfile:
    """What one partition counts for the profile (pickled with its result)."""

    control_chars: Counter[str] = field(default_factory=Counter)
    documents_with_control: Counter[str] = field(default_factory=Counter)
    binary_documents: Counter[str] = field(default_factory=Counter)
    empty_documents: Counter[str] = field(default_factory=Counter)
    identified: Counter[Key] = field(default_factory=Counter)
    """Documents that reached the filters, per (source, language)."""
    passed_filters: Counter[Key] = field(default_factory=Counter)
    after_pii: Counter[Key] = field(default_factory=Counter)

    def raw(self, docs: Iterable[Document]) -> Iterator[Document]:
        """Count control characters and binary content in the text as read."""
        for doc in docs:
            n = control_count(doc.text)
            if n:
                self.control_chars[doc.source] += n
                self.documents_with_control[doc.source] += 1
                if "\x00" in doc.text or n >= BINARY_CONTROL_SHARE * len(doc.text):
                    self.binary_documents[doc.source] += 1
            yield doc

    def normalised(self, docs: Iterable[Document]) -> Iterator[Document]:
        """Count documents that normalise to nothing (or only whitespace)."""
        for doc in docs:
            if not doc.text.strip():
                self.empty_documents[doc.source] += 1
            yield doc

    def add(self, other: "PartitionProfile") -> None:
        for name in self.__dataclass_fields__:
            getattr(self, name).update(getattr(other, name))


@dataclass
class _Kept:
    documents: int = 0
    tokens: int = 0
    chars: int = 0
    unknown: int = 0
    empty: int = 0
    lengths: list[int] = field(default_factory=list)
    by_length: dict[str, list[int]] = field(default_factory=dict)
    """Bucket -> [documents, tokens, chars]."""


def _ratio(a: int, b: int) -> float:
    return round(a / b, 6) if b else 0.0


def _bucket(tokens: int) -> str:
    return str(1 << (tokens.bit_length() - 1)) if tokens > 0 else "0"


@dataclass
class ProfileCounter:
    """The build-wide profile counts; `profile()` turns them into the manifest's record."""

    sources: list[str]
    language_identified: bool
    unknown_token_id: int | None = None
    partitions: PartitionProfile = field(default_factory=PartitionProfile)
    language_kept: Counter[Key] = field(default_factory=Counter)
    after_exact: Counter[Key] = field(default_factory=Counter)
    after_near: Counter[Key] = field(default_factory=Counter)
    pii_found: dict[str, Counter[str]] = field(default_factory=dict)
    pii_documents: Counter[str] = field(default_factory=Counter)
    _kept: dict[Key, _Kept] = field(default_factory=dict)

    def encoded(
        self, pairs: Iterable[tuple[Document, list[int]]]
    ) -> Iterator[tuple[Document, list[int]]]:
        """Pass (document, token ids) on, counting what is kept per (source, language)."""
        unk = self.unknown_token_id
        for doc, ids in pairs:
            k = self._kept.get((doc.source, doc.language))
            if k is None:
                k = self._kept[(doc.source, doc.language)] = _Kept()
            n, chars = len(ids), len(doc.text)
            k.documents += 1
            k.tokens += n
            k.chars += chars
            if unk is not None:
                k.unknown += ids.count(unk)
            if n == 0:
                k.empty += 1
            k.lengths.append(n)
            b = k.by_length.setdefault(_bucket(n), [0, 0, 0])
            b[0] += 1
            b[1] += n
            b[2] += chars
            yield doc, ids

    def profile(self, read: dict[str, int], quarantined: dict[str, int]) -> BuildProfile:
        """The record, given records read and quarantined per source (the Read stage's)."""
        p = self.partitions
        keys = set(p.identified) | set(self._kept)
        sources: dict[str, SourceProfile] = {}
        totals: Counter[str] = Counter()
        for source in self.sources:
            langs: dict[str, LanguageProfile] = {}
            for _, lang in sorted(k for k in keys if k[0] == source):
                key = (source, lang)
                kept = self._kept.get(key, _Kept())
                totals[lang] += kept.documents
                langs[lang] = LanguageProfile(
                    identified=p.identified[key],
                    filtered=p.identified[key] - p.passed_filters[key],
                    pii_dropped=p.passed_filters[key] - p.after_pii[key],
                    language_dropped=p.after_pii[key] - self.language_kept[key],
                    exact_duplicates=self.language_kept[key] - self.after_exact[key],
                    near_duplicates=self.after_exact[key] - self.after_near[key],
                    documents=kept.documents,
                    tokens=kept.tokens,
                    chars=kept.chars,
                    unknown_tokens=kept.unknown,
                    zero_token_documents=kept.empty,
                    tokens_per_char=_ratio(kept.tokens, kept.chars),
                    length_histogram=length_histogram(kept.lengths),
                    by_length={
                        b: LengthBucket(
                            documents=d, tokens=t, chars=c, tokens_per_char=_ratio(t, c)
                        )
                        for b, (d, t, c) in sorted(kept.by_length.items(), key=lambda x: int(x[0]))
                    },
                )
            sources[source] = self._source(source, langs, read, quarantined)
        everything = sum(totals.values())
        return BuildProfile(
            language_identified=self.language_identified,
            unknown_token_id=self.unknown_token_id,
            sources=sources,
            languages={k: _ratio(v, everything) for k, v in sorted(totals.items())},
        )

    def _source(
        self,
        source: str,
        langs: dict[str, LanguageProfile],
        read: dict[str, int],
        quarantined: dict[str, int],
    ) -> SourceProfile:
        p = self.partitions
        documents = sum(lp.documents for lp in langs.values())
        langs = {
            lang: lp.model_copy(update={"share": _ratio(lp.documents, documents)})
            for lang, lp in langs.items()
        }
        tokens = sum(lp.tokens for lp in langs.values())
        chars = sum(lp.chars for lp in langs.values())
        unknown = sum(lp.unknown_tokens for lp in langs.values())
        identified = sum(lp.identified for lp in langs.values())
        dropped = sum(lp.filtered + lp.pii_dropped + lp.language_dropped for lp in langs.values())
        at_dedup = sum(
            lp.identified - lp.filtered - lp.pii_dropped - lp.language_dropped
            for lp in langs.values()
        )
        duplicates = sum(lp.exact_duplicates + lp.near_duplicates for lp in langs.values())
        errors = quarantined.get(source, 0)
        return SourceProfile(
            records_read=read.get(source, 0),
            quarantined=errors,
            documents=documents,
            tokens=tokens,
            filter_rate=_ratio(dropped, identified),
            duplicate_rate=_ratio(duplicates, at_dedup),
            error_rate=_ratio(errors, max(read.get(source, 0), errors)),
            anomalies=TokenizerAnomalies(
                unknown_tokens=unknown,
                unknown_token_rate=_ratio(unknown, tokens),
                control_chars=p.control_chars[source],
                documents_with_control=p.documents_with_control[source],
                binary_documents=p.binary_documents[source],
                empty_documents=p.empty_documents[source],
                zero_token_documents=sum(lp.zero_token_documents for lp in langs.values()),
                tokens_per_char=_ratio(tokens, chars),
            ),
            pii=dict(sorted(self.pii_found.get(source, Counter()).items())),
            pii_documents=self.pii_documents[source],
            languages=langs,
        )
