"""Language identification and the language filter (issue 26).

The identifier is py3langid (Lui & Baldwin's langid.py, 97 languages, naive Bayes over byte
n-grams): its model ships inside the package, so nothing is downloaded when a build runs. A
document's language is the most probable one when its normalised probability reaches
`min_confidence`, otherwise `und`. The model's identity (package version and the sha256 of its
file) is in the stage's lineage, so another model is another dataset.

    LanguageId      (partition processes)  sets Document.language (the profile counts them)
    LanguageFilter  (build process)        drops by list (`keep`) or by share of the source
                                           (`min_share`), which needs every partition's counts
"""

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

from runwright.data.builder.recipe import LANGUAGE_UNDETERMINED, LanguageSpec
from runwright.data.builder.stages import Counters, Document
from runwright.data.format.manifest import StageRecord

IDENTIFIER = "py3langid"


@cache
def _identifier() -> Any:
    """The identifier, loaded once per process (~1 s: it decompresses the model)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def preload() -> None:
    """Load the identifier in this process, so the partition workers forked from it share it
    instead of each decompressing the model again."""
    _identifier()


@cache
def model_identity() -> dict[str, str]:
    """Package version and model file digest: what makes two identifications equal."""
    import py3langid.langid as module

    model = Path(module.__file__).parent / module.MODEL_FILE
    return {
        "identifier": IDENTIFIER,
        "version": version(IDENTIFIER),
        "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
    }


def identify(text: str, spec: LanguageSpec) -> tuple[str, float]:
    """(language code, probability) of the start of `text`; `und` below the confidence."""
    sample = text[: spec.max_chars]
    if not sample.strip():
        return LANGUAGE_UNDETERMINED, 0.0
    lang, prob = _identifier().classify(sample)
    prob = float(prob)
    return (str(lang) if prob >= spec.min_confidence else LANGUAGE_UNDETERMINED), prob


@dataclass
class LanguageId:
    """Identify each document's language; drops nothing."""

    name: ClassVar[str] = "language-id"
    spec: LanguageSpec
    counters: Counters = field(default_factory=Counters)

    def lineage(self) -> StageRecord:
        return StageRecord(
            name=self.name,
            parameters={
                **model_identity(),
                "min_confidence": self.spec.min_confidence,
                "max_chars": self.spec.max_chars,
            },
        )

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        for doc in docs:
            doc.language, _ = identify(doc.text, self.spec)
            self.counters.keep(doc.source)
            yield doc


def kept_languages(spec: LanguageSpec, identified: Counter[str]) -> set[str] | None:
    """The languages a source keeps under the recipe's list and share; None when all stay."""
    if spec.keep is None and spec.min_share is None:
        return None
    kept = set(identified) if spec.keep is None else set(spec.keep)
    if spec.min_share is not None:
        total = sum(identified.values())
        kept = {lang for lang in kept if total and identified[lang] / total >= spec.min_share}
    return kept


@dataclass
class LanguageFilter:
    """Drop documents whose language is not kept: `not-listed` (outside `keep`) or
    `below-share` (under `min_share` of its source's identified documents)."""

    name: ClassVar[str] = "language-filter"
    spec: LanguageSpec
    identified: dict[str, Counter[str]]
    """Source -> language -> documents identified (every partition's LanguageId)."""
    counters: Counters = field(default_factory=Counters)

    def lineage(self) -> StageRecord:
        return StageRecord(
            name=self.name, parameters={"keep": self.spec.keep, "min_share": self.spec.min_share}
        )

    def run(self, docs: Iterable[Document]) -> Iterator[Document]:
        kept = {s: kept_languages(self.spec, c) for s, c in self.identified.items()}

        def rejection(_k: int, doc: Document) -> str | None:
            allowed = kept.get(doc.source)
            if allowed is None or doc.language in allowed:
                return None
            if self.spec.keep is not None and doc.language not in self.spec.keep:
                return "language:not-listed"
            return "language:below-share"

        yield from self.counters.sieve(docs, rejection)
