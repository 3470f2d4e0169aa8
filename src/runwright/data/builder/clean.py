"""Normalisation and filters: what a document looks like before dedup, and why records drop.

Every filter returns None (keep) or a short reason; the build counts drops per source under
`<filter kind>:<reason>` (datatrove's "every step counts what it dropped, by reason").
"""

import unicodedata
from collections.abc import Callable

from runwright.data.builder.functions import resolve_function
from runwright.data.builder.recipe import FilterSpec, NormaliseSpec

# C0/C1 control characters except tab and newline; carriage returns are folded into newlines.
_CONTROL = {c: None for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROL.update({c: None for c in range(0x7F, 0xA0)})


def normalise(text: str, spec: NormaliseSpec) -> str:
    """Unicode normal form, newline folding and control-character removal."""
    if spec.unicode_form != "none":
        text = unicodedata.normalize(spec.unicode_form, text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if spec.strip_control:
        text = text.translate(_CONTROL)
    return text


FilterCheck = Callable[[str], str | None]
"""None to keep a text, or the reason to drop it."""


def _length(spec: FilterSpec) -> FilterCheck:
    def check(text: str) -> str | None:
        if spec.min_chars is not None and len(text) < spec.min_chars:
            return "too-short"
        if spec.max_chars is not None and len(text) > spec.max_chars:
            return "too-long"
        return None

    return check


def _char_ratio(spec: FilterSpec) -> FilterCheck:
    def check(text: str) -> str | None:
        n = len(text) or 1
        if spec.min_alnum_ratio is not None:
            alnum = sum(ch.isalnum() for ch in text)
            if alnum / n < spec.min_alnum_ratio:
                return "low-alnum-ratio"
        if spec.max_whitespace_ratio is not None:
            space = sum(ch.isspace() for ch in text)
            if space / n > spec.max_whitespace_ratio:
                return "high-whitespace-ratio"
        return None

    return check


def _custom(spec: FilterSpec) -> FilterCheck:
    fn = resolve_function(spec.function or "")

    def check(text: str) -> str | None:
        reason = fn(text)
        return None if reason is None else str(reason)

    return check


_FACTORIES: dict[str, Callable[[FilterSpec], FilterCheck]] = {
    "length-v1": _length,
    "char-ratio-v1": _char_ratio,
    "custom-v1": _custom,
}


def make_filters(specs: list[FilterSpec]) -> list[tuple[str, FilterCheck]]:
    """(kind, check) pairs in recipe order."""
    return [(s.kind, _FACTORIES[s.kind](s)) for s in specs]


def first_rejection(text: str, filters: list[tuple[str, FilterCheck]]) -> str | None:
    """`<kind>:<reason>` of the first filter that drops the text, or None."""
    for kind, check in filters:
        reason = check(text)
        if reason is not None:
            return f"{kind}:{reason}"
    return None
