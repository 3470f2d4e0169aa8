"""Release gates and the model registry (issue 17), on a real run: the reference trainer under
torchrun (two ranks, gloo), driven by the controller into a real SQLite store, checkpoints at
steps 2 and 4, the eval split evaluated at step 4 only.

A good checkpoint passes every gate as hf-gpt2 (transformers loads it in a fresh process) and as
the runwright layout (bitwise the training model's logits), waits for approval and is released;
an export tampered with after its gates is BLOCKED when someone approves it; one re-sealed by the
tamperer (release.json rewritten to match) is still caught by its outputs and eval; a checkpoint
the run never evaluated is blocked by the eval gate; approving needs the admin role, and through
the server another principal than the requester; the lineage query reaches every release."""

import json
from pathlib import Path

import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from runwright.access.roles import AccessDenied, Actor, Role
from runwright.access.service import Access
from runwright.ckpt.export import RELEASE_FILE, ReleaseManifest
from runwright.ckpt.export_source import file_sha256
from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.lineage import checkpoint_trace, dataset_lineage
from runwright.govern.page import render_page
from runwright.govern.release import decide_release, request_release, training_side
from runwright.govern.release_gates import GateLimits, check_files, run_gates
from runwright.govern.report import collect_report
from runwright.spec import spec_from_mapping
from runwright.store import Store
from runwright.store.releases import ReleaseStatus

runner = CliRunner()

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(root, store, run, dataset): a finished run with checkpoints at steps 2 and 4."""
    root = tmp_path_factory.mktemp("release")
    dataset = build_dataset(TINY_DATA, root / "data")
    data = tiny_gpt(dataset, steps=4, name="tiny-release", every_steps=2, eval_every_steps=4,
                    eval_sequences=8)  # fmt: skip
    data["checkpoint"]["keep_every_steps"] = 2
    spec = spec_from_mapping(data)
    store = Store.open(root)
    controller = Controller(store, root, poll_seconds=0.1)
    run, _ = controller.submit(spec, root)
    ended = controller.drive(run.run_id)
    assert ended.state == "SUCCEEDED", ended.state_detail
    yield root, store, ended, dataset
    store.close()


def gate(row, name):
    (found,) = [g for g in row.gates if g["name"] == name]
    return found


def test_a_good_checkpoint_passes_every_gate_and_is_released_once_approved(trained):
    root, store, run, dataset = trained
    code = runner.invoke(
        app, ["release", "create", run.run_id, "--root", str(root), "--name", "tiny", "--json"]
    )
    assert code.exit_code == 0, code.output
    row = store.releases.get(json.loads(code.output)["release_id"])
    assert (row.name, row.version, row.step, row.format) == ("tiny", 1, 4, "hf-gpt2")
    assert row.status is ReleaseStatus.AWAITING_APPROVAL, row.gates
    verdicts = {g["name"]: g["verdict"] for g in row.gates}
    assert verdicts == {
        "export.files": "pass",
        "export.load": "pass",
        "tokenizer": "pass",
        "outputs": "pass",
        "eval": "pass",
        "resources": "pass",
        "data.policy": "pass",
        "approval": "pending",
    }
    assert "transformers" in gate(row, "export.load")["evidence"]
    outputs = gate(row, "outputs")["figures"]
    assert outputs["max_abs_diff"] <= outputs["tolerance"] == 1e-4
    evaluated = store.events(run.run_id, types=[EventType.EVALUATED])
    assert (
        gate(row, "eval")["figures"]["training_eval_loss"] == evaluated[-1].attributes["eval_loss"]
    )
    assert gate(row, "resources")["figures"]["load_seconds"] > 0
    assert Path(row.export_path) == root / "releases" / "default" / "tiny" / "v1"
    assert row.release_sha256 == file_sha256(Path(row.export_path) / RELEASE_FILE)
    assert row.lineage["run_id"] == run.run_id
    assert [d["dataset_id"] for d in row.lineage["datasets"]] == [dataset.manifest.dataset_id]

    approved = runner.invoke(
        app, ["release", "approve", row.release_id[:10], "--root", str(root), "--note", "ok"]
    )
    assert approved.exit_code == 0, approved.output
    row = store.releases.get(row.release_id)
    assert row.status is ReleaseStatus.RELEASED and row.decided_by.startswith("local:")
    assert gate(row, "approval")["verdict"] == "pass"
    assert (
        "(the requester, as the one local user of the store)" in gate(row, "approval")["evidence"]
    )
    decided = store.events(run.run_id, types=[EventType.RELEASE_DECIDED])
    assert decided[-1].attributes["status"] == "RELEASED"
    again = runner.invoke(app, ["release", "reject", row.release_id, "--root", str(root)])
    assert again.exit_code == 2 and "RELEASED" in again.output  # decided once, for good

    # The registry and the lineage queries reach it.
    listed = runner.invoke(app, ["release", "list", "--root", str(root), "--json"])
    assert row.release_id in {r["release_id"] for r in json.loads(listed.output)}
    (used,) = dataset_lineage(store, dataset.manifest.dataset_id).runs
    assert row.release_id in {r.release_id for r in used.releases}
    trace = checkpoint_trace(store, row.checkpoint_id)
    assert [r.release_id for r in trace.releases if r.release_id == row.release_id]
    # So does the run's report.
    report, timeline = collect_report(store, run.run_id)
    shown = {r.release_id: r for r in report.governance.releases}
    assert (shown[row.release_id].status, shown[row.release_id].name) == ("RELEASED", "tiny")
    assert row.release_id in render_page(report, timeline)
    # The trainer's collective preflight passed before its first step, and the report says so.
    (collective,) = [c for c in report.governance.preflight if c["name"].startswith("collective")]
    assert collective["verdict"] == "pass" and "2 ranks over gloo" in collective["evidence"]


def test_the_runwright_layout_is_bitwise_the_training_model(trained):
    _root, store, run, _ = trained
    row = request_release(store, run, name="tiny-rw", format="runwright", requested_by="alice")
    assert row.status is ReleaseStatus.AWAITING_APPROVAL, row.gates
    assert row.format == "runwright"
    assert gate(row, "outputs")["figures"]["max_abs_diff"] == 0.0
    assert "bitwise equal" in gate(row, "outputs")["evidence"]
    assert "runwright.train.model.GPT" in gate(row, "export.load")["evidence"]


def test_an_export_changed_after_its_gates_is_blocked_instead_of_approved(trained):
    _root, store, run, _ = trained
    row = request_release(store, run, name="tamper", format="runwright", requested_by="alice")
    assert row.status is ReleaseStatus.AWAITING_APPROVAL
    weights = Path(row.export_path) / "model.safetensors"
    tensors = load_file(weights)
    tensors["wte.weight"][0, 0] += 1.0  # same shape, same size on disk
    save_file(tensors, weights, metadata={"checkpoint_id": "x"})
    with pytest.raises(RunwrightError, match="BLOCKED, not approved"):
        decide_release(store, row.release_id, approve=True, by="bob", authenticated=True)
    row = store.releases.get(row.release_id)
    assert row.status is ReleaseStatus.BLOCKED
    assert "model.safetensors" in gate(row, "export.files")["evidence"]


def test_a_resealed_tampered_export_is_caught_by_its_outputs_and_eval(trained):
    """A tamperer who also rewrites release.json's hashes passes the file check, not the model
    checks: the gates compare what the export computes with the training model."""
    _, store, run, _ = trained
    row = request_release(store, run, name="reseal", format="runwright", requested_by="alice")
    export = Path(row.export_path)
    weights = export / "model.safetensors"
    tensors = load_file(weights)
    tensors["wte.weight"] = tensors["wte.weight"] * 3  # other weights: another model
    save_file(tensors, weights)
    release = ReleaseManifest.model_validate_json((export / RELEASE_FILE).read_bytes())
    files = [
        f.model_copy(update={"sha256": file_sha256(export / f.name),
                             "size_bytes": (export / f.name).stat().st_size})
        for f in release.files
    ]  # fmt: skip
    release = release.model_copy(update={"files": files})
    (export / RELEASE_FILE).write_text(release.model_dump_json())
    assert check_files(export, row.checkpoint_id).verdict == "pass"
    emptied = release.model_copy(update={"files": []})
    (export / RELEASE_FILE).write_text(emptied.model_dump_json())
    nothing = check_files(export, row.checkpoint_id)  # an empty listing checks nothing: a fail
    assert nothing.verdict == "fail" and "lists no files" in nothing.evidence
    (export / RELEASE_FILE).write_text(release.model_dump_json())

    side = training_side(store, run, row.checkpoint_id)
    gates = {g.name: g for g in run_gates(export, release, side, GateLimits())}
    assert gates["outputs"].verdict == "fail", gates["outputs"]
    assert gates["eval"].verdict == "fail", gates["eval"]
    assert gates["tokenizer"].verdict == "pass"


def test_a_checkpoint_the_run_never_evaluated_is_blocked_by_the_eval_gate(trained):
    root, store, run, _ = trained
    result = runner.invoke(
        app, ["release", "create", run.run_id, "2", "--root", str(root), "--name", "step2"]
    )
    assert result.exit_code == 1, result.output
    (row,) = store.releases.find(name="step2")
    assert row.status is ReleaseStatus.BLOCKED and row.step == 2
    assert gate(row, "eval")["verdict"] == "fail"
    assert "recorded no evaluation of checkpoint" in gate(row, "eval")["evidence"]
    assert gate(row, "outputs")["verdict"] == "pass"
    assert gate(row, "approval")["evidence"] == "not asked: eval failed"
    with pytest.raises(RunwrightError, match="BLOCKED"):
        decide_release(store, row.release_id, approve=True, by="bob", authenticated=True)
    checked = store.events(run.run_id, types=[EventType.RELEASE_CHECKED])
    assert {e.attributes["release_id"]: e.attributes["failed"] for e in checked}[
        row.release_id
    ] == ["eval"]


def test_approval_needs_the_admin_role_and_another_principal(trained):
    root, store, run, _ = trained

    def access(name, role):
        actor = Actor(name=name, via="api", project="default", role=role)
        return Access(store, root, actor)

    row = access("olga", Role.OPERATOR).release_request(
        run.run_id, "latest", "four-eyes", "runwright"
    )
    assert row["status"] == "AWAITING_APPROVAL" and row["requested_by"] == "olga"
    with pytest.raises(AccessDenied, match="needs admin"):
        access("olga", Role.OPERATOR).release_decide(row["release_id"], True)
    with pytest.raises(AccessDenied, match="four eyes"):
        access("olga", Role.ADMIN).release_decide(row["release_id"], True)
    with pytest.raises(AccessDenied, match="needs operator"):
        access("vic", Role.VIEWER).release_request(run.run_id, "latest", "nope")
    done = access("ada", Role.ADMIN).release_decide(row["release_id"], True, "checked")
    assert done["status"] == "RELEASED" and done["decided_by"] == "ada"
    approval = next(g for g in done["gates"] if g["name"] == "approval")
    assert approval["evidence"] == "approved by ada: checked"
    assert access("vic", Role.VIEWER).release_show(row["release_id"])["status"] == "RELEASED"
    other = Actor(name="eve", via="api", project="elsewhere", role=Role.ADMIN)
    with pytest.raises(RunwrightError, match="no release"):
        Access(store, root, other).release_show(row["release_id"])


def test_bad_input_is_named(trained):
    root, _store, run, _ = trained
    bad_name = runner.invoke(
        app, ["release", "create", run.run_id, "--root", str(root), "--name", "../x"]
    )
    assert bad_name.exit_code == 2 and "is not a model name" in bad_name.output
    assert "Traceback" not in bad_name.output
    bad_format = runner.invoke(
        app, ["release", "create", run.run_id, "--root", str(root), "--format", "onnx"]
    )
    assert bad_format.exit_code == 2 and "not an export layout" in bad_format.output
    missing = runner.invoke(app, ["release", "show", "rel-nope", "--root", str(root)])
    assert missing.exit_code == 2 and "no release rel-nope" in missing.output
