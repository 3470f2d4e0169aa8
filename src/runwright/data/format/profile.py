"""The build profile: what a dataset holds per source and language, and the tokenizer's
anomalies (issue 26; seed 000 8.1/8.2).

It sits in the manifest as `statistics.profile` and is outside the dataset id (like `build`):
every count in it follows from the hashed inputs and stage parameters, and keeping it out of the
hash kept every dataset built before it existed at the same id. `data verify` checks it against
the hashed statistics (documents and tokens per source must agree). It holds counts, lengths and
language codes, never text.
"""

from collections.abc import Mapping
from typing import Annotated, Protocol

from pydantic import Field

from runwright.records import Record

Count = Annotated[int, Field(ge=0, le=(1 << 63) - 1)]
Rate = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Ratio = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]

PROFILE_SCHEMA = "build-profile-v1"


class LengthBucket(Record):
    """Documents of one token-length bucket `[2^k, 2^(k+1))`."""

    documents: Count = 0
    tokens: Count = 0
    chars: Count = 0
    tokens_per_char: Ratio = 0.0
    """tokens / chars."""


class LanguageProfile(Record):
    """One language within one source: what reached the stages and what was kept."""

    identified: Count = 0
    """Documents the language stage saw (passed Read and Normalise)."""
    filtered: Count = 0
    """Dropped by the recipe's filters."""
    pii_dropped: Count = 0
    """Dropped by the PII stage (`action: drop`)."""
    language_dropped: Count = 0
    """Dropped by the language filter."""
    exact_duplicates: Count = 0
    near_duplicates: Count = 0
    documents: Count = 0
    """Kept (train and eval)."""
    tokens: Count = 0
    """Effective tokens: the kept documents' tokens."""
    chars: Count = 0
    unknown_tokens: Count = 0
    """Tokens equal to the tokenizer's unknown token."""
    zero_token_documents: Count = 0
    """Kept documents that tokenize to no tokens."""
    tokens_per_char: Ratio = 0.0
    share: Rate = 0.0
    """This language's share of the source's kept documents."""
    length_histogram: dict[str, Count] = Field(default_factory=dict)
    """Documents per token-length bucket, keyed by the lower bound."""
    by_length: dict[str, LengthBucket] = Field(default_factory=dict)
    """Tokens per character per token-length bucket."""


class TokenizerAnomalies(Record):
    """The tokenizer contract's counts for one source (raw text: before normalisation)."""

    unknown_tokens: Count = 0
    unknown_token_rate: Rate = 0.0
    """unknown tokens / tokens kept."""
    control_chars: Count = 0
    """C0/C1 control characters other than tab, newline and carriage return, as read."""
    documents_with_control: Count = 0
    binary_documents: Count = 0
    """Documents holding NUL, or whose control characters are >= 10% of their characters."""
    empty_documents: Count = 0
    """Documents empty or only whitespace after normalisation (whether kept or not)."""
    zero_token_documents: Count = 0
    """Kept documents that tokenize to no tokens."""
    tokens_per_char: Ratio = 0.0


class SourceProfile(Record):
    """One source: rates, anomalies, PII counts, and its languages."""

    records_read: Count = 0
    quarantined: Count = 0
    """Records (or whole inputs) sent to quarantine: the source's errors."""
    documents: Count = 0
    tokens: Count = 0
    filter_rate: Rate = 0.0
    """Dropped by filters (language and PII drops included) / records read and usable."""
    duplicate_rate: Rate = 0.0
    """(exact + near duplicates) / documents that reached dedup."""
    error_rate: Rate = 0.0
    """quarantined / records read (quarantined ones included)."""
    anomalies: TokenizerAnomalies = Field(default_factory=TokenizerAnomalies)
    pii: dict[str, Count] = Field(default_factory=dict)
    """Kind -> matches found (empty when the PII stage is off)."""
    pii_documents: Count = 0
    """Documents with at least one match (redacted or dropped)."""
    languages: dict[str, LanguageProfile] = Field(default_factory=dict)
    """Language code (`und` when undetermined or not identified) -> its profile."""


class BuildProfile(Record):
    """Per source and language statistics of a build."""

    schema_version: str = PROFILE_SCHEMA
    language_identified: bool = False
    """True when the recipe ran the language stage (otherwise every language is `und`)."""
    unknown_token_id: int | None = None
    """The tokenizer's unknown token id, None when it has none (byte-level BPE)."""
    sources: dict[str, SourceProfile] = Field(default_factory=dict)
    languages: dict[str, Rate] = Field(default_factory=dict)
    """Language -> share of all kept documents."""


class Counted(Protocol):
    """What the profile is checked against: a SourceStatistics of the hashed statistics."""

    documents: int
    tokens: int


def profile_problems(
    profile: BuildProfile | None, splits: Mapping[str, Mapping[str, "Counted"]]
) -> list[str]:
    """The profile against the hashed statistics: per source, its documents and tokens must be
    the sum over splits (`splits`: split -> source -> SourceStatistics)."""
    if profile is None:
        return []
    problems: list[str] = []
    stated: dict[str, tuple[int, int]] = {}
    for by_source in splits.values():
        for source, s in by_source.items():
            docs, tokens = stated.get(source, (0, 0))
            stated[source] = (docs + s.documents, tokens + s.tokens)
    for source in sorted(set(stated) | set(profile.sources)):
        p = profile.sources.get(source)
        have = (p.documents, p.tokens) if p else (0, 0)
        langs = (
            (
                sum(x.documents for x in p.languages.values()),
                sum(x.tokens for x in p.languages.values()),
            )
            if p
            else (0, 0)
        )
        want = stated.get(source, (0, 0))
        if have != want or langs != want:
            problems.append(
                f"statistics.profile.sources.{source}: {have[0]} documents / {have[1]} tokens "
                f"(its languages {langs[0]} / {langs[1]}), the statistics' splits hold "
                f"{want[0]} / {want[1]}"
            )
    return problems
