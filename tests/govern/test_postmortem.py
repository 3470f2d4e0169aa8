"""`runwright postmortem` on the report's fixture run (tests/govern/conftest.py: rank 1 killed
after step 4, node_lost detected at 1013, restored from ck-2 at step 2, recovered), every figure
from the fixture's hand arithmetic (tests/govern/test_report.py); and a run with nothing to
report refused."""

import json

import pytest
from tests.govern.conftest import RUN_ID
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.govern.postmortem import PostmortemError, postmortem, render_postmortem

runner = CliRunner()


def test_the_incident_its_timeline_actions_and_cost(store):
    pm = postmortem(store, RUN_ID)
    assert pm.verdict.endswith("; 1 incident(s), 1 recovered, 2 step(s) lost")
    (incident,) = pm.incidents
    assert (incident.failure_class, incident.rank, incident.restored_step) == ("node_lost", 1, 2)
    kinds = [m.kind for m in pm.timeline]
    assert kinds.index("FAILURE_CLASSIFIED") < kinds.index("RECOVERY_STARTED")
    assert kinds.index("RECOVERY_STARTED") < kinds.index("RESTORED")
    (failed,) = [m for m in pm.timeline if m.kind == "FAILURE_CLASSIFIED"]
    assert failed.offset_seconds == 0.0  # the clock starts at the first detection
    assert failed.words == "node_lost on rank 1: rank 1 exited with SIGKILL"
    (restored,) = [m for m in pm.timeline if m.kind == "RESTORED"]
    assert restored.offset_seconds == pytest.approx(3.0)
    assert [(a.generation, a.failure_class) for a in pm.actions] == [(1, None)]
    assert pm.stale_writes_refused == 1
    # Replay 8, recovery 4 and idle 12 device-seconds at 0.001 each (the report's split).
    assert (pm.cost.replay_device_seconds, pm.cost.recovery_device_seconds) == (8.0, 4.0)
    assert pm.cost.idle_device_seconds == pytest.approx(12.0)
    assert pm.cost.cost == pytest.approx(0.024)
    assert pm.cost.share_of_device_time == pytest.approx(24 / 48)
    assert pm.template.cause == "" and pm.template.follow_ups == [
        {"action": "", "owner": "", "due": ""}
    ]
    page = render_postmortem(pm)
    assert "node_lost" in page and "For the review" in page and "<script" not in page


def test_the_command_writes_both_files_and_refuses_a_run_without_incidents(store, tmp_path):
    out = tmp_path / "pm"
    root = ["--store", store.url]
    done = runner.invoke(app, ["postmortem", RUN_ID, "--out", str(out), *root, "--json"])
    assert done.exit_code == 0, done.output
    assert "1 incident(s)" in json.loads((out / "postmortem.json").read_text())["verdict"]
    assert (out / "postmortem.html").read_text().startswith("<!doctype html>")
    store.create_run(
        run_id="calm", name="calm", spec={"name": "calm"}, spec_hash="h" * 64, plan={},
        workdir=str(tmp_path), root=str(tmp_path), state="SUCCEEDED",
    )  # fmt: skip
    with pytest.raises(PostmortemError, match="no failure and no recovery"):
        postmortem(store, "calm")
    refused = runner.invoke(app, ["postmortem", "calm", *root])
    assert refused.exit_code == 2 and "nothing for a postmortem" in refused.output
