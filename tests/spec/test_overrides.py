"""`--set KEY=VALUE`: the result is one spec, validated and hashed as if the file said it."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.errors import SpecError
from runwright.spec import load_spec

SKELETON = Path(__file__).parents[2] / "examples" / "skeleton.yaml"
runner = CliRunner()


def test_an_override_hashes_as_the_edited_file(tmp_path):
    data = yaml.safe_load(SKELETON.read_text())
    data["training"]["steps"] = 7
    data["checkpoint"] = {**data.get("checkpoint", {}), "interval": {"every_steps": 3}}
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(data))
    overridden = load_spec(SKELETON, ["training.steps=7", "checkpoint.interval={every_steps: 3}"])
    assert overridden.spec_hash == load_spec(edited).spec_hash
    assert load_spec(SKELETON).training.steps != 7  # the file is unchanged


def test_later_assignments_win_and_sections_are_created(tmp_path):
    data = yaml.safe_load(SKELETON.read_text())
    del data["budget"]
    lean = tmp_path / "lean.yaml"
    lean.write_text(yaml.safe_dump(data))
    spec = load_spec(lean, ["training.steps=5", "training.steps=6", "budget.wall_seconds=90"])
    assert spec.training.steps == 6
    assert spec.budget.wall_seconds == 90
    with pytest.raises(SpecError, match=r"budget\.gpu_hours: unknown key; valid keys here"):
        load_spec(lean, ["budget.gpu_hours=2"])


@pytest.mark.parametrize(
    ("assignment", "says"),
    [
        ("training.steps", "give KEY=VALUE"),
        ("training.steps=", "no value after '='"),
        ("=3", "give KEY=VALUE"),
        ("a..b=1", "not a dotted field name"),
        ("name.x=1", "name is a str, not a section"),
        ("training.stepz=3", "did you mean 'steps'"),
        ("training.steps=[[[", "not a valid YAML value"),
        ("training.steps=-1", "training.steps"),
    ],
)
def test_bad_assignments_name_the_problem(assignment, says):
    with pytest.raises(SpecError) as caught:
        load_spec(SKELETON, [assignment])
    assert says in str(caught.value)


def test_cli_hash_and_validate_take_set():
    plain = runner.invoke(app, ["spec", "hash", str(SKELETON)])
    changed = runner.invoke(app, ["spec", "hash", str(SKELETON), "--set", "training.steps=7"])
    assert plain.exit_code == changed.exit_code == 0
    assert plain.output.strip() != changed.output.strip()
    bad = runner.invoke(app, ["spec", "validate", str(SKELETON), "--set", "training.stepz=1"])
    assert bad.exit_code == 2 and "training.stepz" in bad.output
