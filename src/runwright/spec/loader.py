"""Load a JobSpec from YAML, TOML or JSON, turning every problem into a SpecError that names the
field and says what would be valid."""

import difflib
import json
import tomllib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runwright.errors import SpecError
from runwright.spec.job import JobSpec

SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}


def parse_text(text: str, fmt: str, source: str = "<spec>") -> dict[str, Any]:
    try:
        if fmt == "yaml":
            data = yaml.safe_load(text)
        elif fmt == "toml":
            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"{source}: not valid YAML{where}: {problem}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{source}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise SpecError(
            f"{source}: a job spec is a mapping of sections (name, code, training, ...), "
            f"got {type(data).__name__}"
        )
    return data


def spec_from_mapping(data: dict[str, Any], source: str = "<spec>") -> JobSpec:
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            f"{source}: invalid job spec ({exc.error_count()} problem"
            f"{'s' if exc.error_count() != 1 else ''})",
            [_describe(err) for err in exc.errors()],
        ) from None


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a spec file; raises SpecError for any problem."""
    p = Path(path)
    fmt = SUFFIXES.get(p.suffix.lower())
    if fmt is None:
        raise SpecError(f"{p}: unknown spec format {p.suffix!r}; use one of {sorted(SUFFIXES)}")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{p}: cannot read spec: {exc}") from None
    return spec_from_mapping(parse_text(text, fmt, str(p)), str(p))


def _describe(err: Any) -> str:
    loc = tuple(err.get("loc", ()))
    field = ".".join(str(part) for part in loc) or "(spec)"
    kind = err.get("type", "")
    message = str(err.get("msg", "")).removeprefix("Value error, ")
    if kind == "extra_forbidden":
        valid = _fields_at(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{field}: unknown key{hint} valid keys here: {', '.join(valid)}"
    if kind == "missing":
        return f"{field}: required field is missing"
    given = err.get("input")
    if kind not in ("value_error", "assertion_error") and not isinstance(given, dict | list):
        message = f"{message} (got {given!r})"
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
