"""A whole run through a real server over real HTTP, driven by the remote CLI (`--server`):
submit (following the events as server-sent events), status, events --follow, a resumed event
stream, report; on SQLite and on PostgreSQL. The spec carries a secret in its environment, which
no answer may show."""

import json
import shutil
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.events import EventType

from .conftest import running_server

pytestmark = pytest.mark.integration
SKELETON = Path(__file__).resolve().parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"
SECRET = "s3cret-value-never-shown"
runner = CliRunner()


def _cli(url: str, token: str, *argv: str):
    result = runner.invoke(
        app, ["--server", url, *argv], env={"RUNWRIGHT_TOKEN": token, "RUNWRIGHT_STORE": ""}
    )
    return result


def test_a_run_through_the_server_with_the_remote_cli(any_store_url, tmp_path):
    spec = tmp_path / "skeleton.yaml"
    shutil.copy(SKELETON, spec)
    with running_server(any_store_url, tmp_path / "root") as server:
        admin = server.client(server.admin_token)
        assert admin.post("/v1/projects", json={"name": "alpha"}).status_code == 201
        grant = admin.put("/v1/projects/alpha/members/sam", json={"role": "submitter"})
        assert grant.status_code == 200, grant.text
        made = admin.post("/v1/tokens", json={"principal": "sam", "project": "alpha", "days": 1})
        assert made.status_code == 201, made.text
        sam = made.json()["token"]

        submitted = _cli(
            server.url, sam, "submit", str(spec),
            "--set", "training.steps=3",
            "--set", "resources.devices_per_node=1",
            "--set", f"environment.env.HF_TOKEN={SECRET}",
        )  # fmt: skip
        assert submitted.exit_code == 0, submitted.output
        assert "ended SUCCEEDED (COMPLETED)" in submitted.output
        assert "step 3/3" in submitted.output
        run_id = submitted.output.split("run ", 1)[1].split()[0]

        status = _cli(server.url, sam, "status", run_id[:16], "--json")
        assert status.exit_code == 0, status.output
        summary = json.loads(status.output)
        assert summary["state"] == "SUCCEEDED"
        assert (summary["project"], summary["submitted_by"]) == ("alpha", "sam")
        assert summary["state_history"][-1] == "SUCCEEDED"

        followed = _cli(server.url, sam, "events", run_id, "--follow")
        assert followed.exit_code == 0, followed.output
        assert EventType.RUN_FINISHED in followed.output.splitlines()[-1]

        listed = json.loads(_cli(server.url, sam, "list", "--json").output)
        assert [r["run_id"] for r in listed] == [run_id]

        out = tmp_path / "report"
        report = _cli(server.url, sam, "report", run_id, "--out", str(out))
        assert report.exit_code == 0, report.output
        content = json.loads((out / "report.json").read_text())
        assert content["spec"]["environment"]["env"]["HF_TOKEN"] == "***"
        assert content["run"]["submitted_by"] == "sam" and content["run"]["state"] == "SUCCEEDED"
        for text in (
            (out / "report.json").read_text(),
            (out / "report.html").read_text(),
            status.output,
            followed.output,
            submitted.output,
        ):
            assert SECRET not in text

        _resumes_after_last_event_id(server.url, sam, run_id)

        # The audit log holds the submit with its actor; the run's project sees nothing else.
        audit = admin.get("/v1/audit", params={"project": "alpha", "action": "run.submit"}).json()
        assert [(a["actor"], a["target"], a["outcome"]) for a in audit] == [("sam", run_id, "ok")]
        assert admin.get(f"/v1/runs/{run_id}").status_code == 404  # admin's token: project default


def _resumes_after_last_event_id(url: str, token: str, run_id: str) -> None:
    """A follower that reconnects with Last-Event-ID gets exactly the events after it, and the
    stream of a finished run ends with an `end` event."""
    headers = {"Authorization": f"Bearer {token}"}
    everything = httpx.get(f"{url}/v1/runs/{run_id}/events", headers=headers).json()
    resume_at = everything[2]["seq"]
    ids, ended = [], False
    with httpx.stream(
        "GET",
        f"{url}/v1/runs/{run_id}/events",
        params={"follow": "true"},
        headers={**headers, "Last-Event-ID": str(resume_at)},
        timeout=60.0,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        name = "message"
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:") and name == "message":
                ids.append(json.loads(line.removeprefix("data:"))["seq"])
            elif not line:
                ended = ended or name == "end"
                name = "message"
    assert ended
    assert ids == [e["seq"] for e in everything[3:]]
