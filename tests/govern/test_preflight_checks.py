"""`runwright preflight` and the controller's preflight (issue 17): each check passes on a good
spec, and each failing check keeps a run from being queued, with that check as the reason. Real
files (a built dataset, an fsynced probe, a lock file) and the real controller pass; no workers
start, since a run that fails preflight never reaches them."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.data import build_dataset, load_recipe
from runwright.events import EventType
from runwright.govern.preflight_checks import run_preflight
from runwright.spec import load_spec
from runwright.store import Store

REPO = Path(__file__).parents[2]
runner = CliRunner()
BIG_MODEL = {"n_layers": 48, "d_model": 8192, "n_heads": 64, "vocab_size": 512}
"""About 39 billion parameters: 16 bytes each of model states is far beyond any host here."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("preflight-checks")
    return build_dataset(load_recipe(REPO / "examples" / "data" / "tiny.yaml"), root).folder


def spec_file(folder: Path, dataset: Path | None, **sections) -> Path:
    data = yaml.safe_load((REPO / "examples" / "tiny_gpt.yaml").read_text())
    if dataset is not None:
        data["data"]["dataset"] = str(dataset)
        data["data"]["mixture"]["sources"] = [
            {"name": "notes", "weight": 0.5, "exhaustion": "repeat"},
            {"name": "records", "weight": 0.5, "exhaustion": "repeat"},
        ]
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def verdicts(path: Path, checkpoints: Path) -> dict[str, str]:
    report = run_preflight(load_spec(path), path.parent, checkpoints)
    return {check.name: check.verdict for check in report.checks}


def test_a_good_spec_passes_every_check_with_its_evidence(tiny, tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("torch==2.13.0\n")
    digest = __import__("hashlib").sha256(lock.read_bytes()).hexdigest()
    path = spec_file(tmp_path, tiny, environment={"lock_file": lock.name, "lock_hash": digest})
    report = run_preflight(load_spec(path), tmp_path, tmp_path / "runs")
    assert report.ok
    by_name = {check.name: check for check in report.checks}
    assert list(by_name) == [
        "spec", "data", "data.verify", "data.read", "memory", "data.policy", "checkpoint.storage",
        "trainer", "environment",
    ]  # fmt: skip
    assert all(check.verdict == "pass" for check in report.checks), report.checks
    assert by_name["trainer"].evidence == "dp 2, dp_shard 1, tp 1, pp 1, fp32"
    assert "MB/s (fsynced probe)" in by_name["checkpoint.storage"].evidence
    assert (
        "of 2 shards" in by_name["data.verify"].evidence
        or "shards" in by_name["data.verify"].evidence
    )
    assert "matches" in by_name["environment"].evidence


def test_the_reference_trainer_refuses_pipeline_stages(tmp_path):
    """pp > 1 resolves (the planner models it), but the reference trainer builds no stages: its
    preflight fails with the fix, so the run never starts (issue 18)."""
    path = spec_file(tmp_path, None, parallelism={"pp": 2}, training={"micro_batch_size": 4})
    report = run_preflight(load_spec(path), tmp_path, tmp_path / "runs")
    (trainer,) = [c for c in report.checks if c.name == "trainer"]
    assert trainer.verdict == "fail" and "builds no pipeline stages" in trainer.evidence
    assert trainer.fix.startswith("set parallelism.pp: 1")


@pytest.mark.parametrize(
    "check", ["data", "data.verify", "memory", "checkpoint.storage", "environment"]
)
def test_each_failing_check_keeps_the_run_from_being_queued_with_that_reason(tiny, tmp_path, check):
    dataset = tiny
    sections: dict = {}
    if check == "data":
        sections["model"] = {"vocab_size": 16}  # fewer ids than the dataset's tokenizer has
    elif check == "data.verify":
        dataset = tmp_path / "dataset"
        __import__("shutil").copytree(tiny, dataset)
        shard = sorted(dataset.glob("**/*.bin"))[0]
        raw = bytearray(shard.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        shard.write_bytes(bytes(raw))
    elif check == "memory":
        sections["model"] = BIG_MODEL
    elif check == "checkpoint.storage":
        sections["checkpoint"] = {"location": "/dev/null/checkpoints"}
    else:
        (tmp_path / "requirements.lock").write_text("torch==2.13.0\n")
        sections["environment"] = {"lock_file": "requirements.lock", "lock_hash": "0" * 64}
    path = spec_file(tmp_path, dataset, **sections)
    store = Store.open(tmp_path / "root")
    controller = Controller(store, tmp_path / "root")
    run, _ = controller.submit(load_spec(path), tmp_path)
    controller.reconcile(run.run_id)
    ended = store.get_run(run.run_id)
    assert (ended.state, ended.terminal_reason) == ("FAILED", "FAILED_PERMANENT")
    assert ended.state_detail.startswith(f"preflight check {check} failed: ")
    (checked,) = store.events(run.run_id, types=[EventType.PREFLIGHT_CHECKED])
    assert checked.attributes["ok"] is False
    failed = [c["name"] for c in checked.attributes["checks"] if c["verdict"] == "fail"]
    assert failed[0] == check
    assert store.events(run.run_id, types=[EventType.WORKER_GROUP_LAUNCHED]) == []
    store.close()


def test_a_passing_run_is_queued_with_its_checks_and_warnings_recorded(tmp_path):
    path = spec_file(tmp_path, None)
    store = Store.open(tmp_path / "root")
    controller = Controller(store, tmp_path / "root")
    run, _ = controller.submit(load_spec(path), tmp_path)
    controller.reconcile(run.run_id)
    assert store.get_run(run.run_id).state == "QUEUED"
    (checked,) = store.events(run.run_id, types=[EventType.PREFLIGHT_CHECKED])
    assert checked.attributes["ok"] is True
    warned = {c["name"] for c in checked.attributes["checks"] if c["verdict"] == "warn"}
    assert warned == {"environment"}  # no lock file pinned: recorded, not a stop
    store.close()


def test_the_command_prints_each_check_and_exits_1_on_a_failure(tiny, tmp_path):
    good = spec_file(tmp_path, tiny)
    shown = runner.invoke(app, ["preflight", str(good), "--root", str(tmp_path / "root")])
    assert shown.exit_code == 0, shown.output
    assert "checkpoint.storage" in shown.output and "data.verify" in shown.output
    as_json = runner.invoke(
        app, ["preflight", str(good), "--json", "--root", str(tmp_path / "root")]
    )
    assert json.loads(as_json.output)["ok"] is True
    too_big = runner.invoke(
        app,
        ["preflight", str(good), "--set", "model.n_layers=48", "--set", "model.d_model=8192",
         "--set", "model.n_heads=64", "--json", "--root", str(tmp_path / "root")],
    )  # fmt: skip
    assert too_big.exit_code == 1
    memory = next(c for c in json.loads(too_big.output)["checks"] if c["name"] == "memory")
    assert memory["verdict"] == "fail" and "host memory" in memory["evidence"] and memory["fix"]
