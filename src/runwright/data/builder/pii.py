"""The PII stage: e-mail addresses, IP addresses, phone numbers and credential-like strings,
redacted (`<EMAIL>`, `<IP>`, `<PHONE>`, `<CREDENTIAL>`) or the whole document dropped, as the
recipe's `pii.action` says (issue 26; seed 000 8.1).

It runs in the partition processes after the filters and before the hash, so dedup, the eval
split and tokenizer training see redacted text. It counts matches by kind and source; the
matched text is never kept, logged, quarantined or written anywhere: a dropped document is a
count under `pii:dropped`, nothing more.

Patterns are deliberately plain (regular expressions, validated where a parser exists): they
find the common forms, not every form. IPv4 and IPv6 candidates are checked with `ipaddress`;
phone numbers need 7 to 15 digits in a separated or `+`-prefixed form; credentials are
well-known key shapes (AWS, GitHub, Slack, JWT, PEM private keys) and `password=`/`api_key:`
style assignments, of which only the value is replaced.
"""

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from runwright.data.builder.recipe import PiiSpec
from runwright.data.builder.stages import Counters, Document
from runwright.data.format.manifest import StageRecord

PII_ALGORITHM = "pii-regex-v1"

_EMAIL = re.compile(
    r"\b[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}\b"
)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,4}(?![\w-])"
    r"|(?<![\w+])\+\d{7,15}(?!\w)"
)
_CREDENTIAL = re.compile(
    r"\bAKIA[0-9A-Z]{16}\b"
    r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)"
)
_ASSIGNED_SECRET = re.compile(
    r"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|token)"
    r"(\s*[:=]\s*[\"']?)([^\s\"',;]{6,})"
)


def _valid_ip(match: str) -> bool:
    try:
        ipaddress.ip_address(match)
    except ValueError:
        return False
    return True


def _valid_ipv6(match: str) -> bool:
    # A digit required: `dead::beef` is an address, but far more often C++ or Rust.
    return match.count(":") >= 2 and any(c.isdigit() for c in match) and _valid_ip(match)


def _valid_phone(match: str) -> bool:
    digits = sum(c.isdigit() for c in match)
    if not 7 <= digits <= 15:
        return False
    # A date (2024-01-31), a version (1.2.3) or a plain number run is not a phone number:
    # ask for a `+` or `(`, or separators between at least three groups.
    groups = re.split(r"[ .-]+", match.strip("+() "))
    if match.startswith("+") or "(" in match:
        return True
    return len(groups) >= 3 and all(len(g) >= 2 for g in groups) and not _looks_like_date(groups)


def _looks_like_date(groups: list[str]) -> bool:
    return len(groups) == 3 and len(groups[0]) == 4 and len(groups[1]) <= 2


Finder = Callable[[str], tuple[str, int]]
"""Text -> (text with this kind redacted, matches)."""


def _finder(
    pattern: re.Pattern[str],
    kind: str,
    valid: Callable[[str], bool] | None,
    needs: str | re.Pattern[str] | None = None,
) -> Finder:
    """A finder of `pattern`; `needs` is a substring (or pattern) every match holds, looked
    for first because that is much cheaper than the pattern."""
    mark = f"<{kind.upper()}>"

    def find(text: str) -> tuple[str, int]:
        if isinstance(needs, str) and needs not in text:
            return text, 0
        if isinstance(needs, re.Pattern) and needs.search(text) is None:
            return text, 0
        found = 0

        def replace(m: re.Match[str]) -> str:
            nonlocal found
            if valid is not None and not valid(m.group(0)):
                return m.group(0)
            found += 1
            return mark

        return pattern.sub(replace, text), found

    return find


_SECRET_WORDS = ("pass", "pwd", "secret", "key", "token")
"""Words one of which `_ASSIGNED_SECRET` needs: looking for them first skips the regex."""


_CREDENTIAL_START = re.compile(r"AKIA|gh[pousr]_|xox[abprs]-|eyJ|-----BEGIN")
_CREDENTIAL_FINDER = _finder(_CREDENTIAL, "credential", None, _CREDENTIAL_START)


def _credentials(text: str) -> tuple[str, int]:
    text, found = _CREDENTIAL_FINDER(text)
    lower = text.lower()
    if not any(w in lower for w in _SECRET_WORDS):
        return text, found
    more = 0

    def replace(m: re.Match[str]) -> str:
        nonlocal more
        if m.group(2) == "<CREDENTIAL>":
            return m.group(0)
        more += 1
        return m.group(0)[: m.start(2) - m.start(0)] + "<CREDENTIAL>"

    return _ASSIGNED_SECRET.sub(replace, text), found + more


def _ips(text: str) -> tuple[str, int]:
    text, v4 = _IPV4_FINDER(text)
    text, v6 = _IPV6_FINDER(text)
    return text, v4 + v6


_DIGIT = re.compile(r"\d")
_IPV4_FINDER = _finder(_IPV4, "ip", _valid_ip, _DIGIT)
_IPV6_FINDER = _finder(_IPV6, "ip", _valid_ipv6, ":")


# Order matters: credentials first (a token may hold digit runs), then e-mail (its domain may
# look like other things), IPs before phone numbers (1.2.3.4 is not a phone number).
_FINDERS: dict[str, Finder] = {
    "credential": _credentials,
    "email": _finder(_EMAIL, "email", None, "@"),
    "ip": _ips,
    "phone": _finder(_PHONE, "phone", _valid_phone, _DIGIT),
}


def scrub(text: str, kinds: Iterable[str]) -> tuple[str, Counter[str]]:
    """The text with every match of `kinds` redacted, and the matches per kind."""
    wanted = set(kinds)
    found: Counter[str] = Counter()
    for kind, find in _FINDERS.items():
        if kind in wanted:
            text, n = find(text)
            if n:
                found[kind] += n
    return text, found


@dataclass
class Pii:
    """Redact PII or drop the document; count matches by kind (never the matched text)."""

    name: ClassVar[str] = "pii"
    spec: PiiSpec
    counters: Counters = field(default_factory=Counters)
    found: dict[str, Counter[str]] = field(default_factory=dict)
    """Source -> kind -> matches."""
    documents: dict[str, Counter[str]] = field(default_factory=dict)
    """Source -> language -> documents with at least one match."""
    dropped: dict[str, Counter[str]] = field(default_factory=dict)
    """Source -> language -> documents dropped (`action: drop`)."""

    def lineage(self) -> StageRecord:
        return StageRecord(
            name=self.name,
            parameters={
                "algorithm": PII_ALGORITHM,
                "action": self.spec.action,
                "kinds": sorted(self.spec.kinds),
            },
        )

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        for doc in docs:
            text, found = scrub(doc.text, self.spec.kinds)
            if found:
                self.found.setdefault(doc.source, Counter()).update(found)
                self.documents.setdefault(doc.source, Counter())[doc.language] += 1
                if self.spec.action == "drop":
                    self.counters.drop(doc.source, "pii:dropped")
                    self.dropped.setdefault(doc.source, Counter())[doc.language] += 1
                    continue
                doc.text = text
            self.counters.keep(doc.source)
            yield doc

    def add(self, other: "Pii") -> None:
        """Add a partition's counts into these."""
        self.counters.add(other.counters)
        for mine, theirs in (
            (self.found, other.found),
            (self.documents, other.documents),
            (self.dropped, other.dropped),
        ):
            for source, counts in theirs.items():
                mine.setdefault(source, Counter()).update(counts)
