"""Preflight: a spec that names a dataset is checked against it before anything starts."""

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.data import build_dataset, load_recipe
from runwright.govern.preflight import against_manifest, check_spec
from runwright.spec import load_spec

REPO = Path(__file__).parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The examples' tiny dataset (300-id tokenizer; training sources notes and records)."""
    root = tmp_path_factory.mktemp("preflight")
    result = build_dataset(load_recipe(REPO / "examples" / "data" / "tiny.yaml"), root)
    return result.folder


def _spec_file(tmp_path: Path, dataset: Path | str, **changes) -> Path:
    data = yaml.safe_load((REPO / "examples" / "tiny_gpt.yaml").read_text())
    data["data"]["dataset"] = str(dataset)
    data["data"]["mixture"]["sources"] = [
        {"name": "notes", "weight": 0.5, "exhaustion": "repeat"},
        {"name": "records", "weight": 0.5, "exhaustion": "repeat"},
    ]
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data.setdefault(section, {})[key] = value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_spec_that_fits_its_dataset_passes(tiny, tmp_path):
    spec_file = _spec_file(tmp_path, tiny)
    assert check_spec(load_spec(spec_file), tmp_path).ok
    result = runner.invoke(app, ["spec", "validate", str(spec_file)])
    assert result.exit_code == 0, result.output


def test_every_broken_promise_is_named_with_its_fix(tiny, tmp_path):
    spec_file = _spec_file(
        tmp_path,
        tiny,
        model__vocab_size=256,
        data__manifest_id="0" * 64,
        tokenizer__hash="1" * 64,
    )
    spec = load_spec(spec_file)
    from runwright.data.format.manifest import read_manifest

    problems = against_manifest(spec, read_manifest(tiny))
    text = "\n".join(problems)
    assert len(problems) == 3, text
    assert "model.vocab_size=256" in text and "--set model.vocab_size=300" in text
    assert "data.manifest_id=" in text and "tokenizer.hash=" in text
    result = runner.invoke(app, ["spec", "validate", str(spec_file)])
    assert result.exit_code == 2
    assert "does not fit what it names (3 problems)" in result.output


def test_a_mixture_source_the_dataset_lacks(tiny, tmp_path):
    spec_file = _spec_file(tmp_path, tiny)
    data = yaml.safe_load(spec_file.read_text())
    data["data"]["mixture"]["sources"][0]["name"] = "code"
    spec_file.write_text(yaml.safe_dump(data))
    problems = check_spec(load_spec(spec_file), tmp_path).problems
    assert problems and "['code']" in problems[0] and "['notes', 'records']" in problems[0]


def test_submit_refuses_and_creates_no_run(tiny, tmp_path):
    spec_file = _spec_file(tmp_path, tiny, model__vocab_size=256)
    root = tmp_path / "root"
    result = runner.invoke(app, ["submit", str(spec_file), "--root", str(root)])
    assert result.exit_code == 2 and "model.vocab_size=256" in result.output
    assert not (root / "runs").exists()


def test_a_relative_dataset_is_read_from_the_specs_folder(tiny, tmp_path):
    (tmp_path / "data").symlink_to(tiny)
    spec_file = _spec_file(tmp_path, "data", model__vocab_size=256)
    assert not check_spec(load_spec(spec_file), tmp_path).ok


def test_a_missing_dataset_and_a_url(tmp_path):
    missing = check_spec(load_spec(_spec_file(tmp_path, tmp_path / "nope")), tmp_path)
    assert missing.problems and "no manifest.json" in missing.problems[0]
    remote = check_spec(load_spec(_spec_file(tmp_path, "s3://bucket/ds")), tmp_path)
    assert remote.ok and remote.not_checked


def test_a_url_whose_driver_is_missing_is_refused(tmp_path, monkeypatch):
    import runwright.remote

    spec_file = _spec_file(tmp_path, "s3://bucket/ds")
    real = runwright.remote.importlib.util.find_spec
    monkeypatch.setattr(
        runwright.remote.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "s3fs" else real(name, *a),
    )
    preflight = check_spec(load_spec(spec_file), tmp_path)
    assert preflight.problems == (
        "data.dataset: s3://bucket/ds needs s3fs, which is not installed: "
        "pip install 'runwright[s3]' (or pip install s3fs)",
    )
