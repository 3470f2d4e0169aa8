"""Reading files that may come from elsewhere: size caps, nesting depth, finite numbers, and
names that stay inside their folder (docs/trust.md, "What data can never do").

A recipe, a manifest or a tokenizer file is data: whoever wrote it may be an attacker. So every
read is bounded before it starts (the file's size is checked before its bytes are read), every
parsed document is bounded in depth and node count (a YAML alias can make a small file a huge
tree), and every name a manifest gives a file is a plain name inside the dataset folder.
"""

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_MANIFEST_BYTES = 64 << 20
"""64 MiB: a manifest lists shards and input files; a million inputs take ~200 MB of JSON, so a
dataset that large should be split, and nothing reads a bigger file."""
MAX_RECIPE_BYTES = 1 << 20
"""1 MiB: recipes are a few hundred bytes; globs, not file lists, name the inputs."""
MAX_TOKENIZER_BYTES = 256 << 20
"""256 MiB: a 256k-token tokenizer.json is ~20 MB (e.g. Gemma's 33 MB)."""
MAX_NESTING = 64
"""Deepest list/mapping nesting accepted in a recipe or manifest (they need fewer than 10)."""
MAX_NODES = 1_000_000
"""Most values a parsed recipe may hold, counting every path through a YAML alias."""
MAX_COUNT = (1 << 63) - 1
"""Largest count (documents, tokens, bytes) a manifest may state: numpy's int64 maximum."""
MAX_NAME_CHARS = 255
"""Longest file name component (POSIX NAME_MAX)."""


def check_name(value: str, what: str, *, folders: bool = False) -> str:
    """`value` if it is a relative name that stays inside its folder, else ValueError.

    A plain name (`folders=False`) is one path component; with `folders=True` it may hold
    `/`-separated components. Never absolute, never `.` or `..`, no backslash, NUL or drive.
    """
    parts = value.split("/") if folders else [value]
    bad = (
        not value
        or "\\" in value
        or "\x00" in value
        or (len(value) > 1 and value[1] == ":")
        or any(p in ("", ".", "..") or len(p) > MAX_NAME_CHARS for p in parts)
        or (not folders and "/" in value)
    )
    if bad:
        kind = "relative path" if folders else "plain file name (no '/')"
        raise ValueError(
            f"{what} {value!r} must be a {kind} inside the dataset folder, without '..', '.', "
            "empty parts, backslashes or a drive; rebuild the dataset or fix the manifest"
        )
    return value


def member(folder: Path, name: str) -> Path:
    """`folder / name`, refusing a name (or a symlink) that resolves outside `folder`."""
    path = Path(folder) / name
    root = Path(folder).resolve()
    resolved = path.resolve()
    if resolved != root and root not in resolved.parents:
        raise ValueError(f"{name!r} resolves to {resolved}, outside {root}")
    return path


def read_capped(path: Path, limit_bytes: int, what: str, error: type[Exception]) -> bytes:
    """The bytes of a regular file no larger than `limit_bytes`, else `error` naming it."""
    path = Path(path)
    if not path.exists():
        raise error(f"{what} {path} does not exist")
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file"
        raise error(f"{what} {path} is {kind}; pass the {what} file itself")
    size = path.stat().st_size
    if size > limit_bytes:
        raise error(
            f"{what} {path} is {size:,} bytes, over the {limit_bytes:,}-byte limit; "
            "it is not one runwright wrote"
        )
    try:
        with open(path, "rb") as fh:
            return fh.read(limit_bytes + 1)[:limit_bytes]
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range (not finite)")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str | bytes) -> Any:
    """json.loads refusing NaN, Infinity and overflowing floats; deep nesting is ValueError."""
    return guarded_parse(lambda: json.loads(text, parse_float=_finite, parse_constant=_no_constant))


def check_shape(value: Any, max_depth: int = MAX_NESTING, max_nodes: int = MAX_NODES) -> None:
    """ValueError when `value` nests deeper than `max_depth` or holds over `max_nodes` values.

    Iterative, and it counts every path, so a YAML alias bomb (a small file whose aliases make a
    tree of billions of nodes) stops after `max_nodes` steps.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise ValueError(f"holds more than {max_nodes:,} values (YAML aliases expanded)")
        if depth > max_depth:
            raise ValueError(f"nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            stack.extend((k, depth + 1) for k in item)
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)


def guarded_parse(parse: Callable[[], Any]) -> Any:
    """Run a parser, turning RecursionError (nesting deeper than Python's stack) into ValueError."""
    try:
        return parse()
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_NESTING} levels") from None


def is_local(path: str) -> bool:
    """True for a local path (not an fsspec URL other than file://)."""
    return "://" not in path or path.startswith("file://")
