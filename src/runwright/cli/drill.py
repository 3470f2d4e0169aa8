"""`runwright drill`: the fault drill matrix (docs/drill.md)."""

import json
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import RootOption, SetOption, StoreOption, open_store
from runwright.cli.render import console, err_console, guarded

app = typer.Typer()

FAULT_NAMES = (
    "sigkill_rank",
    "sigstop_rank",
    "collective_block",
    "node_lost",
    "controller_killed",
    "corrupt_checkpoint_shard",
    "stale_worker",
    "nan_at_step",
    "sigterm_preemption",
    "storage_timeout",
    "storage_full",
    "storage_read_only",
    "data_shard_corrupt",
    "data_shard_removed",
)
"""drill/faults.py's FAULTS, spelled here so `--help` starts without loading the control plane
(tests/drill checks the two agree)."""


@app.command()
@guarded
def drill(
    spec_file: Path | None = typer.Option(
        None,
        "--spec",
        help="Job spec to drill (default: the reference trainer on the demo's dataset, built "
        "once per root, with 30 steps and short detection timeouts).",
        show_default=False,
    ),
    overrides: list[str] = SetOption,
    faults: str | None = typer.Option(
        None,
        "--faults",
        help=f"Comma-separated faults, run in this order (default: all): {', '.join(FAULT_NAMES)}.",
        show_default=False,
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for drill.json and drill.html (default: <root>/drills/<drill id>/).",
        show_default=False,
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = typer.Option(False, "--json", help="Print the drill report as JSON."),
) -> None:
    """Run a matrix of faults against real runs of one spec and measure each: detection, class,
    action, lost steps and seconds, time to the first step past the restore, and bitwise
    equality with one fault-free reference run. Each fault is a fresh run under its own id,
    injected from outside (signals, a trainer fault knob, a corrupted checkpoint file, a stale
    worker, a killed controller, a refused or hung checkpoint save, a damaged train shard)
    and judged against what the spec's recovery policy calls for. Writes drill.json and
    drill.html; exits 1 if any fault did not end as expected."""
    from runwright.drill.runner import default_spec, run_drill
    from runwright.spec import load_spec

    resolved, st = open_store(root, store)
    shown = err_console if json_out else console
    names = [n.strip() for n in faults.split(",") if n.strip()] if faults else list(FAULT_NAMES)
    if spec_file is not None:
        spec, workdir = load_spec(spec_file, overrides), spec_file.resolve().parent
    else:
        spec = default_spec(resolved, st, overrides, console=shown, show=not json_out)
        workdir = Path.cwd()
    report = run_drill(
        resolved, st, spec, names, workdir=workdir, out=out, console=shown, show=not json_out
    )
    if json_out:
        print(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        table = Table(title=f"runwright drill {report.drill_id}")
        for column in ("fault", "detected s", "class", "action", "restored", "lost steps/s",
                       "RTO s", "final", "bitwise", "replay", "as expected"):  # fmt: skip
            table.add_column(column)

        def s(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        for r in report.faults:
            table.add_row(
                r.fault,
                s(r.detected_seconds),
                r.failure_class or "-",
                r.action or "-",
                "-" if r.restored_step is None else str(r.restored_step),
                f"{'-' if r.lost_steps is None else r.lost_steps} / {s(r.lost_seconds)}",
                s(r.rto_seconds),
                r.final_state,
                r.bitwise,
                r.replay_check or "-",
                "yes" if r.ok else "[red]NO[/]",
            )
        console.print(table)
        for r in report.faults:
            if r.data_lost:
                console.print(f"{r.fault}: data lost: {r.data_lost}", highlight=False)
            if not r.ok:
                console.print(f"[red]{r.fault}[/]: " + "; ".join(r.mismatches), highlight=False)
        console.print(f"reference run {report.reference_run_id}; {report.wall_seconds:.0f} s")
        console.print(f"report: {report.html_path}")
    if not report.ok:
        raise typer.Exit(code=1)
