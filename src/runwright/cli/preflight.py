"""`runwright preflight SPEC`: the checks a run gets before it is queued, run on demand."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from runwright.cli.options import JsonOption, RootOption, SetOption, StoreOption
from runwright.cli.render import console, guarded, print_json
from runwright.spec import load_spec

if TYPE_CHECKING:
    from runwright.store import Store

app = typer.Typer()
STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


@app.command()
@guarded
def preflight(
    file: Path = typer.Argument(..., help="Job spec file (.yaml, .yml, .toml or .json)."),
    overrides: list[str] = SetOption,
    against: str | None = typer.Option(
        None,
        "--against",
        help="An earlier run (id or unique prefix): show how this spec's effective "
        "configuration (spec, plan, environment) differs from that run's, reproducibility-"
        "breaking fields first.",
        show_default=False,
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Check a spec before it runs: named checks with a verdict, the evidence and the fix.

    The checks the controller runs when it accepts a run (docs/governance.md): spec and plan,
    the dataset against the spec and a sample of its shards re-hashed, the memory ledger
    against the devices, the checkpoint location written and measured with room for
    retention, a checkpoint to resume from against the run, the pinned lock file. Exit 1 when
    a check fails (the run would not be queued), 0 otherwise; warnings are shown."""
    from runwright.govern.preflight_checks import run_preflight
    from runwright.layout import resolve_root, runs_dir

    spec = load_spec(file, overrides)
    checkpoints = runs_dir(resolve_root(root))
    if spec.checkpoint.location is not None and "://" not in spec.checkpoint.location:
        checkpoints = Path(spec.checkpoint.location).expanduser()
    report = run_preflight(
        spec, file.resolve().parent, checkpoints, resolve_root(root), _policy_store(root, store)
    )
    diff = _against(against, report.effective, root, store) if against else None
    if json_out:
        print_json(
            {
                "ok": report.ok,
                "checks": [c.model_dump() for c in report.checks],
                **({"against": diff} if diff is not None else {}),
            }
        )
    else:
        table = Table(title=f"preflight of {file} ({spec.name})")
        for column in ("check", "verdict", "evidence", "fix"):
            table.add_column(column, overflow="fold")
        for check in report.checks:
            verdict = f"[{STYLE[check.verdict]}]{check.verdict}[/]"
            table.add_row(check.name, verdict, check.evidence, check.fix)
        console.print(table)
        if diff is not None:
            _print_diff(diff)
    if not report.ok:
        raise typer.Exit(1)


def _against(
    run_id: str, effective: dict[str, Any], root: Path | None, store: str | None
) -> dict[str, Any]:
    from runwright.cli.options import open_store
    from runwright.events import EventType
    from runwright.govern.effective import differences, recorded_config

    _, st = open_store(root, store)
    try:
        run = st.get_run(run_id)
        events = st.events(
            run.run_id, types=[EventType.PREFLIGHT_CHECKED, EventType.WORKER_STARTED]
        )
    finally:
        st.close()
    found = differences(recorded_config(run, events), effective)
    return {"run_id": run.run_id, "differences": [d.model_dump(mode="json") for d in found]}


def _print_diff(diff: dict[str, Any]) -> None:
    rows = diff["differences"]
    breaking = sum(1 for d in rows if d["breaks_reproducibility"])
    if not rows:
        console.print(f"same effective configuration as run {diff['run_id']}")
        return
    table = Table(
        title=f"differs from run {diff['run_id']}: {breaking} of {len(rows)} field(s) can change "
        "what is computed"
    )
    for column in ("field", diff["run_id"][:24], "this spec", "breaks reproducibility"):
        table.add_column(column, overflow="fold")
    for d in rows:
        mark = "[bold red]yes[/]" if d["breaks_reproducibility"] else "no"
        table.add_row(d["field"], str(d["earlier"]), str(d["now"]), mark)
    console.print(table)


def _policy_store(root: Path | None, store: str | None) -> "Store | None":
    """The store whose dataset policies the check reads: --store, or the root's own store if
    one exists (a preflight never creates one; without it the build's tags are the policy)."""
    from runwright.cli.options import open_store
    from runwright.layout import resolve_root, store_file

    if store is None and not store_file(resolve_root(root)).exists():
        return None
    return open_store(root, store)[1]
