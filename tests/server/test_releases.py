"""The model registry through a real server (issue 17): an operator requests a release of a real
run's checkpoint (the reference trainer under torchrun, evaluated at its last step) and the
server runs the gates; the operator cannot approve it, nor can an admin who requested one
themselves (four eyes); another admin can, and the CLI through --server shows the registry. Every
request and decision is in the audit log."""

import json
import os
from pathlib import Path

import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt
from typer.testing import CliRunner

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.spec import spec_from_mapping
from runwright.store import Store

from .conftest import running_server

pytestmark = pytest.mark.integration


def _trained_run(root: Path, store: Store) -> str:
    dataset = build_dataset(TINY_DATA, root / "data")
    data = tiny_gpt(dataset, steps=2, devices=1, every_steps=2, eval_every_steps=2,
                    eval_sequences=4)  # fmt: skip
    controller = Controller(store, root, poll_seconds=0.1)
    run, _ = controller.submit(spec_from_mapping(data), root)
    ended = controller.drive(run.run_id)
    assert ended.state == "SUCCEEDED", ended.state_detail
    return run.run_id


def test_release_request_and_four_eyes_approval_through_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root, url = tmp_path / "root", f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    run_id = _trained_run(root, store)
    local = Access(store, root, local_actor())
    for name, role in (("olga", "operator"), ("ada", "admin"), ("ann", "admin")):
        local.set_role("default", name, role)
    tokens = {n: local.create_token(n, "default", days=1)["token"] for n in ("olga", "ada", "ann")}
    store.close()
    with running_server(url, root, controller=False) as server:
        with server.client(tokens["olga"]) as olga:
            made = olga.post(f"/v1/runs/{run_id}/releases", json={"name": "served"}, timeout=600)
            assert made.status_code == 201, made.text
            release = made.json()
            assert release["status"] == "AWAITING_APPROVAL", release["gates"]
            assert release["requested_by"] == "olga" and release["project"] == "default"
            assert Path(release["export_path"]).is_relative_to(root / "releases" / "default")
            refused = olga.post(f"/v1/releases/{release['release_id']}/approve")
            assert refused.status_code == 403 and "needs admin" in refused.json()["error"]
            bad = olga.post(f"/v1/runs/{run_id}/releases", json={"eval_tolerance": -1})
            assert bad.status_code == 422 and "eval_tolerance" in bad.text
        with server.client(tokens["ann"]) as ann:
            own = ann.post(f"/v1/runs/{run_id}/releases", json={"name": "served"}, timeout=600)
            assert own.status_code == 201 and own.json()["version"] == 2
            self_approval = ann.post(f"/v1/releases/{own.json()['release_id']}/approve")
            assert self_approval.status_code == 403
            assert "four eyes" in self_approval.json()["error"]
        with server.client(tokens["ada"]) as ada:
            done = ada.post(
                f"/v1/releases/{release['release_id']}/approve", json={"note": "gates read"}
            )
            assert done.status_code == 200, done.text
            assert (done.json()["status"], done.json()["decided_by"]) == ("RELEASED", "ada")
        # The CLI through the server reads the same registry.
        env = {"RUNWRIGHT_SERVER": server.url, "RUNWRIGHT_TOKEN": tokens["ada"]}
        listed = CliRunner().invoke(app, ["release", "list", "--json"], env=env)
        assert listed.exit_code == 0, listed.output
        statuses = {(r["name"], r["version"]): r["status"] for r in json.loads(listed.output)}
        assert statuses == {("served", 1): "RELEASED", ("served", 2): "AWAITING_APPROVAL"}
        shown = CliRunner().invoke(app, ["release", "show", release["release_id"]], env=env)
        assert shown.exit_code == 0 and "decided RELEASED by ada" in shown.output
        check = server.store()
        with check.engine.connect() as conn:
            audited = conn.exec_driver_sql(
                "SELECT actor, action, outcome FROM audit_log WHERE action LIKE 'release.%' "
                "ORDER BY seq"
            ).all()
        check.close()
    assert [tuple(r) for r in audited] == [
        ("olga", "release.request", "ok"),
        ("olga", "release.approve", "denied"),
        ("ann", "release.request", "ok"),
        ("ann", "release.approve", "denied"),
        ("ada", "release.approve", "ok"),
    ]
    assert os.environ.get("RUNWRIGHT_SERVER") is None  # the CLI's env stayed in the runner
