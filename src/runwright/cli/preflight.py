"""`runwright preflight SPEC`: the checks a run gets before it is queued, run on demand."""

from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import JsonOption, RootOption, SetOption
from runwright.cli.render import console, guarded, print_json
from runwright.spec import load_spec

app = typer.Typer()
STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


@app.command()
@guarded
def preflight(
    file: Path = typer.Argument(..., help="Job spec file (.yaml, .yml, .toml or .json)."),
    overrides: list[str] = SetOption,
    root: Path | None = RootOption,
    json_out: bool = JsonOption,
) -> None:
    """Check a spec before it runs: named checks with a verdict, the evidence and the fix.

    The checks the controller runs when it accepts a run (docs/governance.md): spec and plan,
    the dataset against the spec and a sample of its shards re-hashed, the memory ledger
    against the devices, the checkpoint location written and measured with room for
    retention, the pinned lock file. Exit 1 when a check fails (the run would not be queued),
    0 otherwise; warnings are shown."""
    from runwright.govern.preflight_checks import run_preflight
    from runwright.layout import resolve_root, runs_dir

    spec = load_spec(file, overrides)
    checkpoints = runs_dir(resolve_root(root))
    if spec.checkpoint.location is not None and "://" not in spec.checkpoint.location:
        checkpoints = Path(spec.checkpoint.location).expanduser()
    report = run_preflight(spec, file.resolve().parent, checkpoints)
    if json_out:
        print_json({"ok": report.ok, "checks": [c.model_dump() for c in report.checks]})
    else:
        table = Table(title=f"preflight of {file} ({spec.name})")
        for column in ("check", "verdict", "evidence", "fix"):
            table.add_column(column, overflow="fold")
        for check in report.checks:
            verdict = f"[{STYLE[check.verdict]}]{check.verdict}[/]"
            table.add_row(check.name, verdict, check.evidence, check.fix)
        console.print(table)
    if not report.ok:
        raise typer.Exit(1)
