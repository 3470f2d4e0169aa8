"""Experiments through a real `runwright server` (issue 25): an experiment belongs to the token's
project and groups only that project's runs; viewers read it, submitters create and add to it,
a run's steps are marked contaminated by its submitter or an operator; every change and every
refusal is in the audit log; the CLI's --server path reaches the same actions."""

import json

from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.store.audit import AuditLog

from .conftest import RUN_A, RUN_B, RUN_S

runner = CliRunner()


def test_experiments_through_the_server_follow_projects_and_roles(world, monkeypatch):
    server, tokens, _ = world
    with (
        server.client(tokens["submitter"]) as submitter,
        server.client(tokens["viewer"]) as viewer,
        server.client(tokens["operator"]) as operator,
        server.client(tokens["other proj"]) as stranger,
    ):
        body = {"name": "api-sweep", "owner": "submitter_a", "hypothesis": "warmup helps"}
        assert viewer.post("/v1/experiments", json=body).status_code == 403
        made = submitter.post("/v1/experiments", json=body)
        assert made.status_code == 200, made.text
        assert made.json()["project"] == "alpha"
        again = submitter.post("/v1/experiments", json=body)
        assert again.status_code == 400 and "exists in project alpha" in again.json()["error"]
        # Another project's run is "no run"; the experiment is not another project's to see.
        foreign = submitter.post("/v1/experiments/api-sweep/runs", json={"runs": [RUN_B]})
        assert foreign.status_code == 404, foreign.text
        added = submitter.post("/v1/experiments/api-sweep/runs", json={"runs": [RUN_A, RUN_S]})
        assert added.status_code == 200 and added.json()["runs"] == [RUN_A, RUN_S]
        shown = viewer.get("/v1/experiments/api-sweep")
        assert shown.status_code == 200, shown.text
        assert [r["run_id"] for r in shown.json()["runs"]] == [RUN_A, RUN_S]
        assert shown.json()["reference"] == RUN_A
        assert stranger.get("/v1/experiments/api-sweep").status_code == 404
        assert stranger.get("/v1/experiments").json() == []
        assert [e["name"] for e in viewer.get("/v1/experiments").json()] == ["api-sweep"]

        mark = {"first_step": 2, "last_step": 3, "reason": "a bad shard"}
        assert viewer.post(f"/v1/runs/{RUN_A}/contaminated", json=mark).status_code == 403
        marked = submitter.post(f"/v1/runs/{RUN_A}/contaminated", json=mark)  # its submitter
        assert marked.status_code == 200, marked.text
        bad = operator.post(f"/v1/runs/{RUN_S}/contaminated", json={**mark, "first_step": 5})
        assert bad.status_code == 400 and "FIRST-LAST" in bad.json()["error"]
        assert stranger.post(f"/v1/runs/{RUN_A}/contaminated", json=mark).status_code == 404
        rows = {r["run_id"]: r for r in viewer.get("/v1/experiments/api-sweep").json()["runs"]}
        assert [m["by"] for m in rows[RUN_A]["contaminated"]] == ["submitter_a"]

    audit = [
        (e.actor, e.action, e.target, e.outcome)
        for e in AuditLog(server.store().engine).query()
        if e.action.startswith(("experiment.", "run.contaminate"))
    ]
    assert audit == [
        ("viewer_a", "experiment.create", "experiment:api-sweep", "denied"),
        ("submitter_a", "experiment.create", "experiment:api-sweep", "ok"),
        ("submitter_a", "experiment.create", "experiment:api-sweep", "denied"),
        ("submitter_a", "experiment.add", RUN_B, "denied"),
        ("submitter_a", "experiment.add", "experiment:api-sweep", "ok"),
        ("viewer_a", "run.contaminate", RUN_A, "denied"),
        ("submitter_a", "run.contaminate", RUN_A, "ok"),
        ("operator_a", "run.contaminate", RUN_S, "denied"),
        ("admin_b", "run.contaminate", RUN_A, "denied"),
    ]

    monkeypatch.setenv("RUNWRIGHT_SERVER", server.url)
    monkeypatch.setenv("RUNWRIGHT_TOKEN", tokens["submitter"])
    made = runner.invoke(app, ["experiment", "create", "cli-sweep", "--owner", "submitter_a",
                               "--hypothesis", "through the server"])  # fmt: skip
    assert made.exit_code == 0 and "in project alpha" in made.output, made.output
    assert runner.invoke(app, ["experiment", "add", "cli-sweep", RUN_A]).exit_code == 0
    shown = runner.invoke(app, ["experiment", "show", "cli-sweep", "--json"])
    assert shown.exit_code == 0, shown.output
    assert [r["run_id"] for r in json.loads(shown.output)["runs"]] == [RUN_A]
