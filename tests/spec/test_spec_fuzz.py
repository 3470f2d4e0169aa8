"""Mutated example specs (huge, negative, non-finite, wrong-typed, deeply nested values; keys
dropped and added): loading one gives a valid JobSpec or a SpecError, never another exception,
and always within a few seconds (issue 21)."""

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.errors import SpecError
from runwright.spec import JobSpec, spec_from_mapping

EXAMPLES = Path(__file__).parents[2] / "examples"
BASES = [
    yaml.safe_load((EXAMPLES / name).read_text()) for name in ("skeleton.yaml", "tiny_gpt.yaml")
]
EXAMPLE_SECONDS = 10
runner = CliRunner()


def nested(levels: int, leaf: Any, as_dict: bool) -> Any:
    for _ in range(levels):
        leaf = {"k": leaf} if as_dict else [leaf]
    return leaf


scalars = st.one_of(
    st.sampled_from([2**70, 2**63, 2**31, 10**30, -1, 0, 1, -(2**70)]),
    st.integers(),
    st.floats(),  # nan and infinities included
    st.sampled_from([1e300, -1e300, 5e-324, -0.0]),
    st.text(max_size=12),
    st.sampled_from(["", "\x00", "a" * 5000, "auto", "elastic", "../../etc", "1e9"]),
    st.booleans(),
    st.none(),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=5),
    st.dictionaries(st.text(max_size=6), scalars, max_size=4),
    st.builds(nested, st.integers(1, 200), scalars, st.booleans()),
)
keys = st.one_of(st.text(max_size=10), st.integers(-5, 5), st.sampled_from(["steps", "tp", "<<"]))


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in the spec, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += paths_of(item, (*prefix, i))
    return found


def container_at(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "drop", "add", "deepen"]), st.integers(0, 10**6), keys, values
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: dict, steps: list[tuple]) -> dict:
    for op, index, key, value in steps:
        paths = paths_of(data)
        path = paths[index % len(paths)]
        if not path:  # the root: only keys can be added or dropped there
            if op in ("add", "set"):
                data[key] = value
            elif data:
                data.pop(sorted(data, key=str)[index % len(data)])
            continue
        parent, last = container_at(data, path[:-1]), path[-1]
        if op == "set":
            parent[last] = value
        elif op == "drop":
            del parent[last]
        elif op == "add" and isinstance(parent, dict):
            parent[key] = value
        elif op == "deepen":
            parent[last] = nested(100, parent[last], isinstance(key, str))
    return data


def load(data: Any) -> JobSpec | None:
    """The spec, or None for a SpecError; any other exception fails the example."""
    try:
        spec = spec_from_mapping(data)
    except SpecError as exc:
        assert str(exc)
        return None
    # What every command does next with a valid spec must not fail either.
    assert len(spec.spec_hash) == 64
    assert all(v is None or math.isfinite(v) for v in spec.plan.values().values())
    return spec


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(BASES))), mutations, st.booleans())
def test_mutated_specs_load_or_raise_a_spec_error(time_bound, base, steps, through_cli):
    data = mutate(json.loads(json.dumps(BASES[base])), steps)
    with time_bound(EXAMPLE_SECONDS):
        spec = load(data)
        if not through_cli:
            return
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "spec.json"
            path.write_text(json.dumps(data, default=str))
            result = runner.invoke(app, ["spec", "validate", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 2), result.output
    if spec is not None:
        # JSON keeps everything a valid spec holds, so the file is valid too.
        assert result.exit_code == 0, result.output


def test_unmutated_examples_are_valid():
    for data in BASES:
        assert load(json.loads(json.dumps(data))) is not None
