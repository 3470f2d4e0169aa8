"""Build recipes: which sources, which stages, which tokenizer (YAML or JSON on disk).

Paths in a recipe are globs, local or fsspec URLs. Relative paths are taken from the recipe's
folder, and `${NAME}` is replaced from the variables given to the build (`--set NAME=VALUE`) or
the environment, so one recipe serves every machine without machine paths inside it.
"""

import os
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from runwright.data.builder.functions import check_code
from runwright.data.errors import RecipeError
from runwright.data.format.manifest import MAX_VOCAB_SIZE
from runwright.data.format.untrusted import (
    MAX_RECIPE_BYTES,
    check_shape,
    guarded_parse,
    is_local,
    parse_json,
    read_capped,
)
from runwright.records import Record

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SourceSpec(Record):
    """One input source; its name is what mixtures refer to."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.]*$")
    """Source name (lower case, digits, `_` and `.`), e.g. `code`, `prose`."""
    kind: str = "text-v1"
    """Reader: `text-v1` (a file is a document), `jsonl-v1`, `parquet-v1`, `python-docs-v1`
    (docstrings and comments of .py files)."""
    paths: list[str] = Field(min_length=1)
    """Globs or fsspec URLs (`**` allowed); relative to the recipe's folder."""
    exclude: list[str] = Field(default_factory=list)
    """Glob patterns (matched against the path relative to the source base) to skip."""
    text_field: str = "text"
    """JSONL key / Parquet column holding the text."""
    extract: str | None = None
    """Optional function turning one input text into documents (applied by `text-v1`): a
    registered one (`paragraphs-v1`), or `module:function(relative_path, text) -> iterable of
    str`, which is code and runs only with `--allow-code` (docs/trust.md)."""
    files_per_partition: int = Field(default=64, gt=0, le=1 << 20)
    """Input files per work partition (the unit of completion markers and retries)."""
    max_record_chars: int = Field(default=1_000_000, gt=0, le=1 << 40)
    """Records longer than this are quarantined as oversized."""


class NormaliseSpec(Record):
    """Text normalisation applied before filters and dedup."""

    unicode_form: Literal["NFC", "NFKC", "none"] = "NFC"
    """Unicode normal form."""
    strip_control: bool = True
    """Remove control characters other than newline and tab."""


class FilterSpec(Record):
    """One filter; a dropped record is counted under `<kind>:<reason>`."""

    kind: Literal["length-v1", "char-ratio-v1", "custom-v1"]
    """Filter algorithm."""
    min_chars: int | None = Field(default=None, ge=0, le=1 << 40)
    """length-v1: drop shorter documents."""
    max_chars: int | None = Field(default=None, gt=0, le=1 << 40)
    """length-v1: drop longer documents."""
    min_alnum_ratio: float | None = Field(default=None, ge=0, le=1)
    """char-ratio-v1: drop when letters+digits are a smaller share of characters."""
    max_whitespace_ratio: float | None = Field(default=None, ge=0, le=1)
    """char-ratio-v1: drop when whitespace is a larger share."""
    function: str | None = None
    """custom-v1: a registered function (`replacement-char-v1`), or `module:function(text) ->
    None | reason`, which is code and runs only with `--allow-code` (docs/trust.md)."""

    @model_validator(mode="after")
    def _fields_match_kind(self) -> "FilterSpec":
        if self.kind == "custom-v1" and not self.function:
            raise ValueError("a custom-v1 filter needs function: 'module:function'")
        return self


class NearDedupSpec(Record):
    """MinHash LSH near-duplicate removal (Broder 1997; datasketch's MinHashLSH)."""

    threshold: float = Field(default=0.8, gt=0, lt=1)
    """Estimated Jaccard similarity at or above which two documents are duplicates."""
    num_perm: int = Field(default=64, ge=16, le=512)
    """MinHash permutations (signature length)."""
    shingle_words: int = Field(default=5, ge=1, le=1024)
    """Words per shingle."""
    seed: int = Field(default=1, ge=0, lt=1 << 32)
    """MinHash seed (datasketch seeds numpy's generator: 0 <= seed < 2^32)."""


class DedupSpec(Record):
    """Duplicate removal over all sources, before the eval split."""

    exact: bool = True
    """Drop documents whose normalised text hash was seen before."""
    near: NearDedupSpec | None = Field(default_factory=NearDedupSpec)
    """Near dedup; null turns it off."""


class EvalSpec(Record):
    """Eval split, isolated from train."""

    fraction: float = Field(default=0.01, ge=0, lt=1)
    """Share of unique documents selected for eval, by a seeded hash of their text."""
    seed: int = Field(default=0, ge=0, lt=1 << 64)
    """Seed of the selection (8 bytes of the hash key: 0 <= seed < 2^64)."""


class BpeTrainSpec(Record):
    """Train a byte-level BPE tokenizer on the train split."""

    vocab_size: int = Field(default=4096, ge=260, le=MAX_VOCAB_SIZE)
    """Target vocabulary size including special tokens."""
    min_frequency: int = Field(default=2, ge=1, lt=1 << 32)
    """Minimum pair count for a merge."""
    max_training_chars: int = Field(default=20_000_000, gt=0, le=1 << 40)
    """Characters of train text (in build order) the trainer sees."""


class TokenizerRecipe(Record):
    """Where token ids come from: a tokenizer.json, or BPE trained by the build."""

    path: str | None = None
    """HF `tokenizers` tokenizer.json (relative to the recipe's folder)."""
    train: BpeTrainSpec | None = None
    """Train BPE when no path is given."""
    eod_token: str = "<|endoftext|>"
    """End-of-document token; must be a special token of a loaded tokenizer."""

    @model_validator(mode="after")
    def _one_origin(self) -> "TokenizerRecipe":
        if (self.path is None) == (self.train is None):
            raise ValueError("give exactly one of tokenizer.path or tokenizer.train")
        return self


LANGUAGE_UNDETERMINED = "und"
"""The language of a document the identifier could not decide on (BCP 47's `und`)."""


class LanguageSpec(Record):
    """Language identification (py3langid's model, shipped inside the package) and an optional
    language filter by list or by share."""

    min_confidence: float = Field(default=0.5, ge=0, le=1)
    """Below this probability a document's language is `und` (undetermined)."""
    max_chars: int = Field(default=1000, gt=0, le=1 << 24)
    """Characters of each document the identifier reads (its start): its cost is linear in
    them (~0.7 ms per 1,000 characters on one core)."""
    keep: list[str] | None = None
    """Keep only documents in these languages (ISO 639-1 codes, `und` allowed); null keeps all."""
    min_share: float | None = Field(default=None, gt=0, lt=1)
    """Drop documents whose language is less than this share of its source's documents."""

    @field_validator("keep")
    @classmethod
    def _codes(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        bad = [c for c in value if not re.fullmatch(r"[a-z]{2,3}", c)]
        if bad or not value:
            raise ValueError(
                "language.keep lists language codes such as en, de, zh (or und); "
                f"got {bad or value}"
            )
        return sorted(set(value))


PII_KINDS = ("email", "ip", "phone", "credential")
"""What the PII stage finds (pii.py)."""


class PiiSpec(Record):
    """Personal data and credentials in the text: redacted, or the document dropped."""

    action: Literal["redact", "drop"] = "redact"
    """`redact` replaces each match with `<KIND>`; `drop` removes the whole document."""
    kinds: list[Literal["email", "ip", "phone", "credential"]] = Field(
        default_factory=lambda: list(PII_KINDS), min_length=1
    )
    """Kinds to look for."""


class BuildSpec(Record):
    """Execution settings (they do not change the output, so they are not hashed)."""

    workers: int = Field(default=2, gt=0, le=256)
    """Processes for the partition stage."""
    max_attempts: int = Field(default=3, gt=0, le=20)
    """Attempts per input on transient errors (I/O, timeouts)."""
    backoff_seconds: float = Field(default=0.2, ge=0, le=60)
    """First retry delay; doubled per attempt (at most 60 s, so 20 attempts stay bounded)."""


class Recipe(Record):
    """A dataset build recipe."""

    name: str = Field(min_length=1)
    """Dataset name."""
    sources: list[SourceSpec] = Field(min_length=1)
    """Input sources."""
    normalise: NormaliseSpec = Field(default_factory=NormaliseSpec)
    """Normalisation."""
    filters: list[FilterSpec] = Field(default_factory=list)
    """Filters in order."""
    dedup: DedupSpec = Field(default_factory=DedupSpec)
    """Exact and near dedup."""
    eval: EvalSpec = Field(default_factory=EvalSpec)
    """Eval split."""
    tokenizer: TokenizerRecipe = Field(
        default_factory=lambda: TokenizerRecipe(train=BpeTrainSpec())
    )
    """Tokenizer."""
    max_tokens_per_shard: int = Field(default=1 << 25, gt=0, le=1 << 40)
    """Shard size bound (32 Mi tokens = 64 MiB of uint16)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Usage and licence tags copied into the manifest."""
    language: LanguageSpec | None = None
    """Language identification and filter; null (the default) skips the stage."""
    pii: PiiSpec | None = None
    """PII redaction or removal; null (the default) skips the stage."""
    build: BuildSpec = Field(default_factory=BuildSpec)
    """Execution settings."""

    @model_validator(mode="after")
    def _unique_sources(self) -> "Recipe":
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"source names must be unique; repeated: {dupes}")
        return self


def substitute(text: str, variables: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        key = m.group(1)
        if key in variables:
            return variables[key]
        if key in os.environ:
            return os.environ[key]
        raise RecipeError(f"recipe uses ${{{key}}} but no value was given; pass --set {key}=...")

    return _VAR.sub(one, text)


def resolve_path(path: str, base: Path) -> str:
    """A recipe path made absolute against the recipe folder (URLs pass through)."""
    if "://" in path or os.path.isabs(path):
        return path
    return str((base / path).resolve()) if "*" not in path else str(base.resolve() / path)


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader (plain data, no Python tags), in C when libyaml is there."""


def load_recipe(
    path: str | Path, variables: dict[str, str] | None = None, *, allow_code: bool = False
) -> Recipe:
    """Parse a recipe file (YAML or JSON, UTF-8, at most 1 MiB), substituting `${NAME}` and
    resolving relative paths.

    A recipe is data: it is bounded in size, nesting and node count, the tokenizer file it names
    must exist, and it may name only registered functions unless `allow_code` (functions.py).
    """
    path = Path(path)
    raw = read_capped(path, MAX_RECIPE_BYTES, "recipe", RecipeError)
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(
            f"recipe {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8"
        ) from None
    text = substitute(decoded, variables or {})
    try:
        if path.suffix == ".json":
            raw_recipe = parse_json(text)
        else:
            raw_recipe = guarded_parse(lambda: yaml.load(text, Loader=_Loader))
        check_shape(raw_recipe)
        if not isinstance(raw_recipe, dict):
            raise ValueError(
                f"a recipe is a mapping (name, sources, ...), got {type(raw_recipe).__name__}"
            )
        recipe = Recipe.model_validate(raw_recipe)
    except (ValueError, yaml.YAMLError, ValidationError) as exc:
        raise RecipeError(f"recipe {path} is invalid:\n{exc}") from None
    base = path.parent
    sources = [
        s.model_copy(update={"paths": [resolve_path(p, base) for p in s.paths]})
        for s in recipe.sources
    ]
    tok = recipe.tokenizer
    if tok.path is not None:
        tok = tok.model_copy(update={"path": resolve_path(tok.path, base)})
    resolved = recipe.model_copy(update={"sources": sources, "tokenizer": tok})
    check_tokenizer_path(resolved, f"recipe {path}")
    check_code(resolved, allow_code, f"recipe {path}")
    return resolved


def check_tokenizer_path(recipe: Recipe, where: str = "recipe") -> None:
    """A tokenizer.path must name a local regular file (it is hashed and loaded as one)."""
    tok = recipe.tokenizer.path
    if tok is None:
        return
    if not is_local(tok):
        raise RecipeError(f"{where}: tokenizer.path {tok} must be a local file, not a URL")
    local = Path(tok.removeprefix("file://"))
    if not local.is_file():
        state = "is a directory" if local.is_dir() else "does not exist"
        raise RecipeError(
            f"{where}: tokenizer.path {local} {state}; name a tokenizer.json (relative to the "
            "recipe's folder) or use tokenizer.train"
        )
