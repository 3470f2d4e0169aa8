"""The CLI on the store itself: its mutating commands are audited as `local:<user>`, the run
report names who cancelled, tokens and roles are managed there (the first admin's path), the
credentials file must be private, and the server refuses an unsafe bind before it starts."""

import getpass
import json
import os

from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.server.serve import check_bind
from runwright.store import Store

runner = CliRunner()


def _cli(root, *argv):
    return runner.invoke(app, ["--root", str(root), *argv], env={"RUNWRIGHT_SERVER": ""})


def test_local_cancel_is_audited_and_the_report_names_the_actor(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    store.create_run(
        run_id="run-1", name="r", spec={"name": "r"}, spec_hash="0" * 64, plan={},
        workdir=str(tmp_path), root=str(tmp_path), state="QUEUED",
    )  # fmt: skip
    store.close()
    me = f"local:{getpass.getuser()}"
    result = _cli(tmp_path, "cancel", "run-1", "--reason", "wrong data", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["outcome"] == "APPLIED"
    audit = json.loads(_cli(tmp_path, "audit", "--json").output)
    assert [(a["actor"], a["via"], a["action"], a["target"], a["outcome"]) for a in audit] == [
        (me, "cli", "run.cancel", "run-1", "ok")
    ]
    report = _cli(tmp_path, "report", "run-1", "--json")
    assert report.exit_code == 0, report.output
    written = json.loads((tmp_path / "runs" / "run-1" / "report" / "report.json").read_text())
    [cancel] = [i for i in written["interventions"] if i["kind"] == "cancel"]
    assert cancel["actor"] == me and "wrong data" in cancel["detail"]
    assert me in (tmp_path / "runs" / "run-1" / "report" / "report.html").read_text()


def test_tokens_and_roles_on_the_store_itself(tmp_path):
    made = _cli(tmp_path, "token", "create", "--admin", "--principal", "ada", "--json")
    assert made.exit_code == 0, made.output
    first = json.loads(made.output)
    assert first["token"].startswith("rwt_") and first["project"] == "default"
    assert _cli(tmp_path, "project", "create", "vision").exit_code == 0
    granted = _cli(tmp_path, "project", "grant", "vision", "bot", "submitter", "--service-account")
    assert granted.exit_code == 0, granted.output
    bot = json.loads(
        _cli(tmp_path, "token", "create", "--principal", "bot", "--project", "vision",
             "--role", "viewer", "--json").output
    )  # fmt: skip
    assert bot["role_cap"] == "viewer"
    revoked = _cli(tmp_path, "token", "revoke", bot["token_id"], "--json")
    assert json.loads(revoked.output)["revoked_by"].startswith("local:")
    listed = json.loads(_cli(tmp_path, "token", "list", "--json").output)
    assert {t["token_id"]: t["usable"] for t in listed} == {
        first["token_id"]: True,
        bot["token_id"]: False,
    }
    # The secret is nowhere in the store: only its digest.
    with open(tmp_path / "state.db", "rb") as db:
        assert bot["token"].encode() not in db.read()
    actions = [a["action"] for a in json.loads(_cli(tmp_path, "audit", "--json").output)]
    assert actions == ["token.create", "project.create", "role.grant", "token.create",
                       "token.revoke"]  # fmt: skip
    bad = _cli(tmp_path, "project", "grant", "vision", "bot", "superuser")
    assert bad.exit_code == 2 and "not a role" in bad.output


def test_the_credentials_file_must_be_private(tmp_path, monkeypatch):
    from runwright.cli.api_token import read_token, save_token

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("RUNWRIGHT_TOKEN", raising=False)
    path = save_token("http://127.0.0.1:9/", "rwt_" + "a" * 60)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert read_token("http://127.0.0.1:9") == "rwt_" + "a" * 60
    os.chmod(path, 0o644)
    result = runner.invoke(
        app, ["--server", "http://127.0.0.1:9", "list"], env={"XDG_CONFIG_HOME": str(tmp_path)}
    )
    assert result.exit_code == 2 and "chmod 600" in result.output


def test_the_server_refuses_an_unsafe_bind_before_it_starts(tmp_path):
    result = runner.invoke(app, ["server", "--host", "0.0.0.0", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert "--tls-cert" in result.output and "--behind-tls-proxy" in result.output
    assert not (tmp_path / "state.db").exists()  # refused before anything was opened
    check_bind("127.0.0.1", None, None, False)
    check_bind("::1", None, None, False)
    check_bind("0.0.0.0", None, None, True)
    half = runner.invoke(app, ["server", "--tls-cert", str(tmp_path / "c.pem")])
    assert half.exit_code == 2 and "go together" in half.output


def test_local_commands_do_not_import_the_http_client(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom runwright.cli.main import main\n"
        f"try:\n    main(['--root', {str(tmp_path)!r}, 'list'])\nexcept SystemExit:\n    pass\n"
        "print('httpx' in sys.modules, 'fastapi' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False False"
