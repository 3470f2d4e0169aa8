"""What the run commands print: whole run ids, JSON errors under --json, one write per batch of
events."""

import json

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.store import NewEvent, Store

runner = CliRunner()
LONG_ID = "tiny-gpt-with-a-rather-long-name-20261202-043512-abcdef"


@pytest.fixture()
def root(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    store.create_run(
        run_id=LONG_ID,
        name="tiny-gpt-with-a-rather-long-name",
        spec={},
        spec_hash="0" * 64,
        plan={},
        workdir=str(tmp_path),
        root=str(tmp_path),
        state="RUNNING",
    )
    store.append_event(
        NewEvent(
            event_id="e1",
            run_id=LONG_ID,
            generation=0,
            type="STEP_HEALTHY",
            step=1,
            time_unix_s=1.0,
            attributes={"note": "[bold]not markup[/bold]"},
        ),
        fenced=False,
    )
    store.close()
    return tmp_path


def test_list_never_cuts_a_run_id_on_a_narrow_terminal(root):
    result = runner.invoke(app, ["list", "--root", str(root)], env={"COLUMNS": "50"})
    assert result.exit_code == 0, result.output
    assert LONG_ID in result.output


def test_errors_are_json_under_json(root):
    result = runner.invoke(app, ["status", "no-such-run", "--root", str(root), "--json"])
    assert result.exit_code == 2
    body = json.loads(result.stdout)
    assert body["exit_code"] == 2 and "no run 'no-such-run'" in body["error"]
    plain = runner.invoke(app, ["status", "no-such-run", "--root", str(root)])
    assert plain.exit_code == 2 and "error:" in plain.stderr and plain.stdout == ""


def test_events_print_attributes_as_they_are(root):
    result = runner.invoke(app, ["events", LONG_ID[:12], "--root", str(root)])
    assert result.exit_code == 0, result.output
    assert "[bold]not markup[/bold]" in result.output


def test_a_bad_inventory_is_one_line_naming_the_field(tmp_path):
    inventory = tmp_path / "nodes.yaml"
    inventory.write_text("nodes:\n  - name: a\n    device_type: H100\n    device_count: two\n")
    root = ["--root", str(tmp_path / "root")]
    result = runner.invoke(app, ["controller", "--inventory", str(inventory), *root])
    assert result.exit_code == 2, result.output
    assert "nodes[0] (a).device_count" in result.output
    assert "Traceback" not in result.output
    missing = runner.invoke(app, ["controller", "--inventory", str(tmp_path / "no.yaml"), *root])
    assert missing.exit_code == 2 and "cannot read inventory file" in missing.output
    # `slurm` reads the Slurm pools' nodes live: without one in the pools file, it says so.
    live = runner.invoke(app, ["controller", "--inventory", "slurm", *root])
    assert live.exit_code == 2 and "the pools file names no Slurm pool" in live.output
    inventory.write_text("nodes: slurm\nquotas: [{project: vision, devices: -2}]\n")
    quota = runner.invoke(app, ["controller", "--inventory", str(inventory), *root])
    assert quota.exit_code == 2 and "quotas[0] (vision).devices" in quota.output


def test_queue_shows_what_each_run_asked_for_and_why_it_waits(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    resources = {"nodes": 2, "devices_per_node": 8, "pool": "h100", "priority": 5}
    for run_id, spec, detail in (
        ("waiting-run", {"resources": {**resources, "preemptible": True}}, "#2 in the queue: x"),
        ("old-spec-run", {}, None),  # a spec stored before these fields: the spec's defaults
    ):
        store.create_run(
            run_id=run_id,
            name=run_id,
            spec=spec,
            spec_hash="0" * 64,
            plan={},
            workdir=str(tmp_path),
            root=str(tmp_path),
            state="QUEUED",
        )
        if detail:
            store.update_run(run_id, state_detail=detail)
    store.close()
    shown = runner.invoke(app, ["queue", "--root", str(tmp_path), "--json"])
    assert shown.exit_code == 0, shown.output
    rows = {r["run_id"]: r for r in json.loads(shown.stdout)}
    assert {k: rows["waiting-run"][k] for k in (*resources, "preemptible", "waiting_for")} == {
        **resources,
        "preemptible": True,
        "waiting_for": "#2 in the queue: x",
    }
    assert (rows["old-spec-run"]["pool"], rows["old-spec-run"]["nodes"]) == ("default", 1)
    table = runner.invoke(app, ["queue", "--root", str(tmp_path)], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "2x8" in table.output and "5*" in table.output and "h100" in table.output
