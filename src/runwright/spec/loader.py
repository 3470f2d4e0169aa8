"""Load a JobSpec from YAML, TOML or JSON, turning every problem into a SpecError that names the
field and says what would be valid.

A spec file is untrusted input, so every step is bounded before it can recurse or expand
(limits.py): the file's size before it is read, YAML's nesting, value count and duplicate keys on
its event stream before a node is composed, and for every format the parsed value's depth, its
size with aliases expanded, its keys and its NUL characters before pydantic or canonical JSON see
it.
"""

import difflib
import json
import os
import stat
import tomllib
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runwright.errors import SpecError
from runwright.spec import limits
from runwright.spec.job import JobSpec

SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}

# libyaml when PyYAML was built with it: ~10x faster than the pure-Python parser, which matters
# for a file near MAX_SPEC_BYTES. Both are safe loaders: no Python object tags.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_COLLECTION_START = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_NODE_EVENTS = (yaml.ScalarEvent, yaml.AliasEvent, *_COLLECTION_START)
_TOO_DEEP = f"nested more than {limits.MAX_DEPTH} levels deep"


def parse_text(text: str, fmt: str, source: str = "<spec>") -> dict[str, Any]:
    try:
        if fmt == "yaml":
            _check_yaml_events(text, source)
            data = yaml.load(text, Loader=_YAML_LOADER)  # a safe loader: no Python tags
        elif fmt == "toml":
            data = tomllib.loads(text)
        else:
            data = json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, source))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at {_position(mark, text)}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "nesting depth" in problem:  # libyaml's own bound (1,000 levels) came first
            problem = _TOO_DEEP
        context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and start:  # libyaml marks where it gave up: say where the construct began
            problem += f" ({context} at {_position(start, text)})"
        raise SpecError(f"{source}: not valid YAML{where}: {problem}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{source}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:
        # The JSON and TOML parsers recurse per level (YAML's depth was checked on its events):
        # the interpreter's limit (~1000) is reached long after MAX_DEPTH, so say that one.
        raise SpecError(f"{source}: {_TOO_DEEP}; a job spec is a few levels deep") from None
    except ValueError as exc:
        # What all three parsers let through as a bare ValueError: an integer literal of more
        # than 4,300 digits (sys.get_int_max_str_digits).
        raise SpecError(f"{source}: not a valid {fmt.upper()} value: {exc}") from None
    if data is None:
        raise SpecError(f"{source}: the spec is empty; it needs at least name, code and training")
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a job spec is a mapping of sections (name, code, training, ...), "
            f"got {type(data).__name__}"
        )
    check_shape(data, source)
    return data


def _position(mark: Any, text: str) -> str:
    """`line L, column C` of a YAML mark, 1-based. libyaml places the end of a text without a
    final newline on a line after the last one; that is the end of the last line."""
    if mark.index >= len(text) and not text.endswith("\n"):
        last = text.rfind("\n") + 1
        return f"line {text.count(chr(10)) + 1}, column {len(text) - last + 1}"
    return f"line {mark.line + 1}, column {mark.column + 1}"


def check_shape(data: Any, source: str = "<spec>") -> None:
    """Refuse a parsed value deeper than MAX_DEPTH, larger than MAX_VALUES once shared references
    (YAML aliases) are counted each time they appear, with a key that is not a string, or with a
    NUL character (no name, path, argument or environment variable can hold one).

    Iterative and stopped at the first bound, so it takes at most MAX_VALUES steps on any input,
    a self-referencing YAML alias included."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    seen = 0
    while stack:
        value, path = stack.pop()
        seen += 1
        if seen > limits.MAX_VALUES:
            raise SpecError(
                f"{source}: more than {limits.MAX_VALUES:,} values (counting each use of a YAML "
                "alias); a job spec holds a few hundred"
            )
        if len(path) > limits.MAX_DEPTH:
            raise SpecError(f"{source}: {_where(path)}: {_TOO_DEEP}; a spec is a few levels deep")
        if isinstance(value, str):
            if "\x00" in value:
                raise SpecError(f"{source}: {_where(path)}: contains a NUL character; remove it")
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise SpecError(
                        f"{source}: {_where((*path, key))}: key {key!r} is not a string "
                        f"({type(key).__name__}); quote it (YAML reads yes/no/on/off, numbers "
                        "and dates unquoted as other types)"
                    )
                if "\x00" in key:
                    raise SpecError(f"{source}: {_where(path)}: a key contains a NUL character")
                stack.append((item, (*path, key)))
        elif isinstance(value, list | tuple | set):
            stack.extend((item, (*path, i)) for i, item in enumerate(value))


def _where(path: tuple[Any, ...]) -> str:
    shown = ".".join(str(part) for part in path[:8]) or "(spec)"
    return shown + (f" ... ({len(path)} levels)" if len(path) > 8 else "")


def _check_yaml_events(text: str, source: str) -> None:
    """Walk YAML's event stream (the parser is a state machine: no recursion) and refuse, before
    any node is composed (the composer recurses per level) or an alias expanded: more than
    MAX_DEPTH levels, more than MAX_VALUES nodes, and a key given twice in one mapping, which
    PyYAML would resolve silently to its last value."""
    # One frame per open collection: [is_mapping, next node is a key, keys seen so far].
    frames: list[list[Any]] = []
    nodes = 0
    for event in yaml.parse(text, Loader=_YAML_LOADER):
        if isinstance(event, _NODE_EVENTS):
            nodes += 1
            if nodes > limits.MAX_VALUES:
                raise SpecError(
                    f"{source}: more than {limits.MAX_VALUES:,} YAML nodes; a job spec holds a "
                    "few hundred"
                )
            if frames and frames[-1][0]:
                frame = frames[-1]
                if frame[1] and isinstance(event, yaml.ScalarEvent):
                    merge = event.value == "<<" and event.implicit[0]
                    if event.value in frame[2] and not merge:
                        line = event.start_mark.line + 1 if event.start_mark else "?"
                        raise SpecError(
                            f"{source}: key {event.value!r} appears twice in one mapping "
                            f"(again at line {line}); YAML would keep only the last, give it once"
                        )
                    frame[2].add(event.value)
                frame[1] = not frame[1]
            if isinstance(event, _COLLECTION_START):
                frames.append([isinstance(event, yaml.MappingStartEvent), True, set()])
                if len(frames) > limits.MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise SpecError(f"{source}: {_TOO_DEEP} (at line {line})")
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            frames.pop()


def _unique_keys(pairs: list[tuple[str, Any]], source: str) -> dict[str, Any]:
    """JSON's object hook: a key given twice is refused, not resolved silently to the last."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise SpecError(
                f"{source}: key {key!r} appears twice in one object; JSON would keep only the "
                "last, give it once"
            )
        out[key] = value
    return out


def spec_from_mapping(data: dict[str, Any], source: str = "<spec>") -> JobSpec:
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a job spec is a mapping of sections (name, code, training, ...), "
            f"got {type(data).__name__}"
        )
    check_shape(data, source)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        count = exc.error_count()
        lines = [_describe(err) for err in exc.errors()[: limits.MAX_PROBLEMS_SHOWN]]
        if count > limits.MAX_PROBLEMS_SHOWN:
            lines.append(f"... and {count - limits.MAX_PROBLEMS_SHOWN} more")
        raise SpecError(
            f"{source}: invalid job spec ({count} problem{'s' if count != 1 else ''})", lines
        ) from None


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> JobSpec:
    """Read and validate a spec file, with `--set KEY=VALUE` assignments applied first
    (overrides.py); raises SpecError for any problem."""
    from runwright.spec.overrides import apply_overrides

    p = Path(path)
    fmt = SUFFIXES.get(p.suffix.lower())
    if fmt is None:
        raise SpecError(f"{p}: unknown spec format {p.suffix!r}; use one of {sorted(SUFFIXES)}")
    data = parse_text(read_spec_text(p), fmt, str(p))
    if not overrides:
        return spec_from_mapping(data, str(p))
    source = f"{p} with --set {' '.join(overrides)}"
    return spec_from_mapping(apply_overrides(data, overrides), source)


def check_yaml_value(text: str, source: str) -> Any:
    """One YAML value from the command line, bounded like a spec file."""
    try:
        _check_yaml_events(text, source)
        value = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{source}: not a valid YAML value: {problem}") from None
    check_shape({"value": value}, source)
    return value


def read_spec_text(p: Path) -> str:
    """The text of the spec file `p`: a regular file of at most MAX_SPEC_BYTES of UTF-8 (a BOM is
    allowed). The size and kind are checked before reading, so a FIFO or device never blocks."""
    try:
        info = p.stat()
        if stat.S_ISDIR(info.st_mode):
            raise SpecError(f"{p}: is a folder, not a spec file")
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"{p}: not a regular file (a pipe, socket or device); give a file")
        if info.st_size > limits.MAX_SPEC_BYTES:
            raise SpecError(
                f"{p}: {info.st_size:,} bytes is larger than a spec may be "
                f"({limits.MAX_SPEC_BYTES:,} bytes)"
            )
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(limits.MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise SpecError(f"{p}: cannot read spec: {exc}") from None
    if len(raw) > limits.MAX_SPEC_BYTES:  # grew between stat and read
        raise SpecError(f"{p}: larger than a spec may be ({limits.MAX_SPEC_BYTES:,} bytes)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{p}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save the "
            "spec as UTF-8"
        ) from None


def _describe(err: Any) -> str:
    loc = tuple(err.get("loc", ()))
    field = ".".join(str(part) for part in loc) or "(spec)"
    kind = err.get("type", "")
    message = str(err.get("msg", "")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        valid = _fields_at(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        return f"{field}: unknown key{hint} valid keys here: {', '.join(valid)}"
    if kind == "missing":
        return f"{field}: required field is missing"
    given = err.get("input")
    if kind not in ("value_error", "assertion_error") and not isinstance(given, dict | list):
        shown = repr(given)
        if len(shown) > limits.MAX_REPR_CHARS:
            shown = f"{shown[: limits.MAX_REPR_CHARS]}... ({len(shown):,} characters)"
        message = f"{message} (got {shown})"
    return message if not loc else f"{field}: {message}"


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The valid keys of the spec section at `loc`, for 'did you mean' hints."""
    model: Any = JobSpec
    mapping_key = False  # the next part of `loc` is a key of a dict field, not a field name
    for part in loc:
        if mapping_key or isinstance(part, int):
            mapping_key = False
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        field = model.model_fields.get(str(part))
        if field is None:
            return []
        mapping_key = typing.get_origin(field.annotation) is dict
        model = _section_type(field.annotation)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return sorted(model.model_fields)
    return []


def _section_type(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_type(arg)
        if found is not None:
            return found
    return None
