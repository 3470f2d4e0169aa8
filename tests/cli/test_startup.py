"""The CLI starts fast: no command module (and so no torch, no store driver) is imported before a
command runs, the root's help lists every command from its static summary, and the global
options reach every command."""

import json
import subprocess
import sys

import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from runwright import __version__
from runwright.cli.main import COMMANDS, app, load_command

runner = CliRunner()


def _modules_after(*argv: str) -> set[str]:
    code = (
        "import sys, json\n"
        "from runwright.cli.main import main\n"
        "try:\n"
        f"    main({list(argv)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_root_help_imports_no_command_module_nor_torch():
    loaded = _modules_after("--help")
    assert not {m for m in loaded if m.startswith("runwright.cli.") and m != "runwright.cli.main"}
    assert "torch" not in loaded and "sqlalchemy" not in loaded


def test_run_commands_do_not_import_torch():
    for argv in (["list", "--help"], ["status", "--help"], ["events", "--help"]):
        assert "torch" not in _modules_after(*argv), argv


def test_the_controller_does_not_import_torch():
    """`runwright submit`, `controller` and `demo` drive runs in a process that never trains:
    torch (2.5 CPU seconds to import here) is the workers' and the checkpoint commands'."""
    code = "import sys, runwright.control.controller; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_report_does_not_import_plotly():
    # report.html inlines plotly.min.js read from the installed package's folder (found with
    # importlib.util.find_spec): importing plotly, which takes seconds, is never needed.
    assert "plotly" not in _modules_after("report", "--help")


def test_every_summary_starts_its_commands_own_help():
    for name, (_module, summary) in COMMANDS.items():
        command = load_command(name)
        assert " ".join((command.help or "").split()).startswith(summary), name


def test_the_commands_listed_are_the_commands_that_run():
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    ctx = typer.Context(group)
    assert group.list_commands(ctx) == list(COMMANDS)
    assert group.get_command(ctx, "no-such-command") is None
    result = runner.invoke(app, ["no-such-command"])
    assert result.exit_code == 2 and "No such command" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"runwright {__version__}"


def test_global_root_is_every_commands_default(tmp_path, monkeypatch):
    monkeypatch.delenv("RUNWRIGHT_ROOT", raising=False)
    monkeypatch.delenv("RUNWRIGHT_STORE", raising=False)
    result = runner.invoke(app, ["--root", str(tmp_path), "list", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == []
    assert (tmp_path / "state.db").is_file()
    # the process environment is as it was once the command ended
    import os

    assert "RUNWRIGHT_ROOT" not in os.environ


def test_completion_is_offered(monkeypatch):
    # Typer detects the shell from the parent processes; CI runs under sh, which has no
    # completion script, so name the shell explicitly as a user of another shell would.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = runner.invoke(app, ["--show-completion", "bash"])
    assert result.exit_code == 0
    assert "_RUNWRIGHT_COMPLETE" in result.output or "complete" in result.output
