"""Job spec validation, canonical hashing and the resolved plan."""

import json
import random

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runwright.errors import SpecError
from runwright.spec import JobSpec, canonical_json, load_spec, parse_text, spec_from_mapping

BASE = {
    "name": "t",
    "code": {"entrypoint": "train.py"},
    "training": {"global_batch_samples": 16, "steps": 10},
    "resources": {"devices_per_node": 2},
}


def with_(**sections):
    data = json.loads(json.dumps(BASE))
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return data


def problems(data):
    with pytest.raises(SpecError) as err:
        spec_from_mapping(data)
    return str(err.value)


def test_defaults_fill_every_section():
    spec = spec_from_mapping(BASE)
    assert spec.recovery.heartbeat_timeout_seconds == 30
    assert spec.checkpoint.keep_last == 3
    assert spec.data.shuffle == "permute-v1"
    assert set(JobSpec.model_fields) >= {
        "code",
        "environment",
        "model",
        "tokenizer",
        "data",
        "training",
        "parallelism",
        "resources",
        "checkpoint",
        "recovery",
        "budget",
        "reproducibility",
        "governance",
    }


def test_unknown_key_names_field_and_suggests():
    text = problems(with_(training={"stepz": 5}))
    assert "training.stepz: unknown key; did you mean 'steps'?" in text


def test_unknown_key_inside_a_per_class_policy_lists_the_valid_keys():
    text = problems(with_(recovery={"policies": {"infrastructure": {"max_restarts": 9}}}))
    assert "recovery.policies.infrastructure.max_restarts: unknown key; did you mean" in text
    assert "'max_retries'?" in text and "backoff_seconds" in text


def test_wrong_type_names_field_and_value():
    text = problems(with_(training={"steps": "many"}))
    assert "training.steps" in text and "'many'" in text


def test_batch_not_divisible_lists_nearest_valid_values():
    text = problems(with_(training={"global_batch_samples": 15, "micro_batch_size": 2}))
    assert "global_batch_samples=15" in text
    assert "nearest valid global batches: [8, 12, 16, 20]" in text


def test_dp_contradicting_world_size():
    text = problems(with_(parallelism={"dp": 4}))
    assert "parallelism.dp=4 contradicts the world size" in text and "dp: 2" in text


def test_tp_not_dividing_world():
    text = problems(with_(parallelism={"tp": 3}))
    assert "tp x pp x ep" in text and "nearest valid world sizes" in text


def test_timeouts_must_be_ordered():
    text = problems(
        with_(recovery={"heartbeat_timeout_seconds": 1, "heartbeat_interval_seconds": 2})
    )
    assert "heartbeat_interval_seconds < heartbeat_timeout_seconds" in text


def test_exactly_one_batch_and_length():
    text = problems(
        with_(training={"global_batch_samples": 16, "global_batch_tokens": 2048, "steps": 10})
    )
    assert "exactly one of global_batch_samples or global_batch_tokens" in text


def test_heads_divide_width():
    assert "nearest valid n_heads" in problems(with_(model={"d_model": 64, "n_heads": 5}))


def test_missing_required_section():
    data = dict(BASE)
    data.pop("code")
    assert "code: required field is missing" in problems(data)


def test_resolved_plan_has_reasons():
    spec = spec_from_mapping(
        with_(
            training={"global_batch_tokens": 4096, "steps": 10, "global_batch_samples": None},
            data={"sequence_length": 128},
        )
    )
    plan = spec.plan
    assert plan.global_batch_samples.value == 32
    assert plan.dp.value == 2
    assert plan.micro_batch_size.value == 8
    assert plan.grad_accumulation_steps.value == 2
    assert plan.tokens_per_step.value == 4096
    assert "4096 tokens / sequence length 128 = 32" in plan.global_batch_samples.reason


def test_token_budget_becomes_steps():
    spec = spec_from_mapping(with_(training={"steps": None, "token_budget": 10_000}))
    assert spec.plan.total_steps.value == 5  # ceil(10000 / (16 * 128))


def test_yaml_toml_json_give_the_same_hash(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "a.json").write_text(json.dumps(BASE))
    (tmp_path / "a.toml").write_text(
        'name = "t"\n[code]\nentrypoint = "train.py"\n'
        "[training]\nglobal_batch_samples = 16\nsteps = 10\n[resources]\ndevices_per_node = 2\n"
    )
    hashes = {load_spec(tmp_path / f).spec_hash for f in ("a.yaml", "a.json", "a.toml")}
    assert len(hashes) == 1


def test_equivalent_numbers_and_defaults_hash_equal():
    a = spec_from_mapping(with_(training={"optimizer": {"lr": 0.001}}))
    b = spec_from_mapping(with_(training={"optimizer": {"lr": 1e-3}}))
    c = spec_from_mapping(with_(recovery={"heartbeat_timeout_seconds": 30}))
    assert a.spec_hash == b.spec_hash
    assert c.spec_hash == spec_from_mapping(BASE).spec_hash
    assert spec_from_mapping(with_(training={"steps": 11})).spec_hash != c.spec_hash


def test_bad_syntax_is_a_spec_error():
    with pytest.raises(SpecError, match="line 1"):
        parse_text("name: [unclosed", "yaml")
    with pytest.raises(SpecError, match="mapping of sections"):
        parse_text("- a\n- b\n", "yaml")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def _shuffled(value, rng):
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@settings(max_examples=200)
@given(json_values, st.integers(0, 2**32))
def test_canonical_json_ignores_key_order_and_whitespace(value, seed):
    rng = random.Random(seed)
    shuffled = _shuffled(value, rng)
    assert canonical_json(value) == canonical_json(shuffled)
    reparsed = json.loads(json.dumps(shuffled, indent=rng.randint(0, 4)))
    assert canonical_json(reparsed) == canonical_json(value)


@settings(max_examples=200)
@given(st.integers(-(10**12), 10**12))
def test_integral_floats_canonicalise_as_integers(n):
    assert canonical_json({"x": float(n)}) == canonical_json({"x": n})


@settings(max_examples=50, deadline=None)
@given(st.permutations(list(BASE)), st.integers(1, 64), st.sampled_from([1, 2, 4]))
def test_spec_hash_stable_across_key_order(order, steps, devices):
    data = with_(
        training={"steps": steps, "global_batch_samples": 16},
        resources={"devices_per_node": devices},
    )
    reordered = {k: data[k] for k in order}
    assert spec_from_mapping(reordered).spec_hash == spec_from_mapping(data).spec_hash


def test_json_schema_exports():
    schema = JobSpec.model_json_schema()
    assert "training" in schema["properties"]
    assert schema["additionalProperties"] is False
