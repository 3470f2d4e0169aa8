"""`runwright report RUN --json` writes both files where --out says."""

import json

from typer.testing import CliRunner

from runwright.cli.report import app

from .conftest import RUN_ID


def test_report_command_json(store, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [RUN_ID[:10], "--store", store.url, "--root", str(tmp_path), "--out", str(out), "--json"],
    )
    assert result.exit_code == 0, result.output
    written = json.loads(result.output)
    assert written["run_id"] == RUN_ID
    assert json.loads((out / "report.json").read_text())["run"]["run_id"] == RUN_ID


def test_unknown_run_is_a_user_error(store, tmp_path):
    result = CliRunner().invoke(app, ["nope", "--store", store.url, "--root", str(tmp_path)])
    assert result.exit_code == 2
