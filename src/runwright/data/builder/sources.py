"""Source readers: turn input files into text records, or quarantine reasons.

Listing and byte reading go through fsspec (local paths or URLs). Parsing is deterministic, so a
parse failure is a property of the record, not of the moment: it yields a quarantine reason
instead of raising, and the build goes on. Readers are a Protocol plus a registry of versioned
names.
"""

import ast
import fnmatch
import io
import json
import posixpath
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import fsspec

from runwright.data.builder.functions import resolve_function
from runwright.data.builder.recipe import SourceSpec
from runwright.data.errors import RecipeError
from runwright.data.registry import Registry

_GLOB_CHARS = "*?["


@dataclass(frozen=True)
class InputFile:
    """One input of a source."""

    source: str
    url: str
    """Where to read it (local path or fsspec URL)."""
    relative: str
    """Path relative to the source's base folder; what lineage records."""
    size: int


@dataclass(frozen=True)
class Item:
    """A record's text, or why it goes to quarantine (then `text` is None)."""

    record: int
    text: str | None = None
    reason: str | None = None
    detail: str = ""


def _static_base(pattern: str) -> str:
    cut = min((pattern.find(c) for c in _GLOB_CHARS if c in pattern), default=-1)
    if cut < 0:
        return posixpath.dirname(pattern)
    return posixpath.dirname(pattern[:cut] + "x")


def list_inputs(spec: SourceSpec) -> list[InputFile]:
    """Every input file of a source, sorted by relative path."""
    found: dict[str, InputFile] = {}
    for k, pattern in enumerate(spec.paths):
        fs, root = fsspec.core.url_to_fs(pattern)
        base = _static_base(root)
        matches = fs.glob(root) if any(c in root for c in _GLOB_CHARS) else [root]
        for path in matches:
            try:
                info = fs.info(path)
            except FileNotFoundError:  # a plain path (no wildcard) that names nothing
                raise RecipeError(
                    f"source {spec.name!r}: paths[{k}] {pattern!r} does not exist; fix the path "
                    "(relative paths are taken from the recipe's folder) or use a wildcard"
                ) from None
            if info.get("type") == "directory":
                continue
            rel = posixpath.relpath(path, base) if base else path
            if any(fnmatch.fnmatch(rel, ex) for ex in spec.exclude):
                continue
            if not rel.isprintable() or _undecodable(rel):
                raise RecipeError(
                    f"source {spec.name!r}: input file name {rel!r} is not printable UTF-8 "
                    "(lineage records names as text); rename it or add it to the source's exclude"
                )
            if len(spec.paths) > 1:
                rel = f"{k}/{rel}"
            protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
            local = "file" in protocols or "local" in protocols
            url = path if local else fs.unstrip_protocol(path)
            found[rel] = InputFile(spec.name, url, rel, int(info.get("size") or 0))
    if not found:
        raise RecipeError(
            f"source {spec.name!r}: no files match {spec.paths}; check the paths (relative paths "
            "are taken from the recipe's folder) or the --set variables"
        )
    return [found[k] for k in sorted(found)]


def _undecodable(name: str) -> bool:
    """True for a name holding surrogate escapes (bytes that were not UTF-8)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def read_bytes(url: str) -> bytes:
    with fsspec.open(url, "rb") as fh:
        return fh.read()


class SourceReader(Protocol):
    """Parses one input file's bytes into items."""

    name: str

    def items(self, spec: SourceSpec, data: bytes, relative: str) -> Iterator[Item]: ...


def _decode(data: bytes) -> tuple[str | None, str]:
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        return None, f"byte {exc.start}: {exc.reason}"


class TextReader:
    """text-v1: a file is one document (or what `extract` makes of it)."""

    name = "text-v1"

    def items(self, spec: SourceSpec, data: bytes, relative: str) -> Iterator[Item]:
        text, detail = _decode(data)
        if text is None:
            yield Item(0, reason="undecodable-bytes", detail=detail)
            return
        if spec.extract is None:
            yield Item(0, text=text)
            return
        for k, piece in enumerate(resolve_function(spec.extract)(relative, text)):
            if not isinstance(piece, str):
                yield Item(k, reason="schema-mismatch", detail="extract gave a non-string")
                continue
            yield Item(k, text=piece)


class JsonlReader:
    """jsonl-v1: one JSON object per line; the text is under `text_field`."""

    name = "jsonl-v1"

    def items(self, spec: SourceSpec, data: bytes, relative: str) -> Iterator[Item]:
        for k, line in enumerate(data.split(b"\n")):
            if not line.strip():
                continue
            text, detail = _decode(line)
            if text is None:
                yield Item(k, reason="undecodable-bytes", detail=detail)
                continue
            try:
                obj = json.loads(text)
            except (json.JSONDecodeError, RecursionError) as exc:
                yield Item(k, reason="invalid-json", detail=str(exc)[:200] or "nested too deep")
                continue
            value = obj.get(spec.text_field) if isinstance(obj, dict) else None
            if not isinstance(value, str):
                yield Item(
                    k, reason="schema-mismatch", detail=f"no string field {spec.text_field!r}"
                )
                continue
            yield Item(k, text=value)


class ParquetReader:
    """parquet-v1: the string column `text_field` of a Parquet file, row by row."""

    name = "parquet-v1"

    def items(self, spec: SourceSpec, data: bytes, relative: str) -> Iterator[Item]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowInvalid, OSError) as exc:
            yield Item(0, reason="invalid-parquet", detail=str(exc)[:200])
            return
        if spec.text_field not in table.column_names:
            yield Item(
                0,
                reason="schema-mismatch",
                detail=f"no column {spec.text_field!r}; columns: {table.column_names}",
            )
            return
        for k, value in enumerate(table.column(spec.text_field).to_pylist()):
            if isinstance(value, str):
                yield Item(k, text=value)
            else:
                yield Item(k, reason="schema-mismatch", detail="value is not a string")


def python_prose(source: str) -> str | None:
    """Docstrings (module, class, function) and comments of Python source, in file order.

    Returns None when the file cannot be tokenized at all. A file that tokenizes but does not
    parse (e.g. Python 2 syntax) still gives its comments.
    """
    pieces: list[tuple[int, str]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                text = tok.string.lstrip("#").strip()
                if text and not text.startswith("!"):
                    pieces.append((tok.start[0], text))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    line = node.body[0].lineno if node.body else 0
                    pieces.append((line, doc))
    pieces.sort(key=lambda p: p[0])
    return "\n\n".join(text for _, text in pieces)


class PythonDocsReader:
    """python-docs-v1: the docstrings and comments of a .py file as one prose document."""

    name = "python-docs-v1"

    def items(self, spec: SourceSpec, data: bytes, relative: str) -> Iterator[Item]:
        text, detail = _decode(data)
        if text is None:
            yield Item(0, reason="undecodable-bytes", detail=detail)
            return
        prose = python_prose(text)
        if prose is None:
            yield Item(0, reason="unparseable-python", detail="tokenize failed")
            return
        yield Item(0, text=prose)


READERS: Registry[SourceReader] = Registry("source reader")
for _reader in (TextReader(), JsonlReader(), ParquetReader(), PythonDocsReader()):
    READERS.register(_reader.name, _reader)
