"""`--set KEY=VALUE`: change one field of a spec file on the command line, torchtitan-style.

`training.steps=200` sets `training.steps`; the value is read as a YAML value (so `200` is a
number, `false` a boolean, `[1, 2]` a list, `{name: adamw}` a mapping, `"200"` a string), bounded
like a spec file (limits.py). Assignments apply in order to the parsed file before validation, so
the result is validated, hashed and stored as one spec: a spec never changes, a different
assignment is a different spec with its own hash. Missing sections on the way are created;
naming a key inside a value that is not a mapping is refused.
"""

import copy
from collections.abc import Sequence
from typing import Any

from runwright.errors import SpecError
from runwright.spec import limits

_KEY_PART = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value read as YAML)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set {text!r}: give KEY=VALUE, e.g. --set training.steps=200")
    parts = key.strip().split(".")
    if any(not part or set(part) - set(_KEY_PART) for part in parts):
        raise SpecError(
            f"--set {text!r}: {key.strip()!r} is not a dotted field name (letters, digits, _ "
            "and - separated by dots, e.g. checkpoint.interval.steps)"
        )
    if len(parts) > limits.MAX_DEPTH:
        raise SpecError(f"--set {text!r}: more than {limits.MAX_DEPTH} levels")
    if not raw.strip():
        raise SpecError(f"--set {text!r}: no value after '='; give one, e.g. --set {key.strip()}=1")
    from runwright.spec.loader import check_yaml_value

    return parts, check_yaml_value(raw, f"--set {key.strip()}")


def apply_overrides(data: dict[str, Any], assignments: Sequence[str]) -> dict[str, Any]:
    """A copy of the parsed spec `data` with every `KEY=VALUE` of `assignments` applied in order
    (the file is left as it was)."""
    out = copy.deepcopy(data)
    for text in assignments:
        parts, value = parse_assignment(text)
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise SpecError(
                    f"--set {text!r}: {where} is a {type(child).__name__}, not a section; "
                    f"set {where} itself"
                )
            node = child
        node[parts[-1]] = value
    return out
