"""`runwright ladder`: the scale-up ladder (docs/ladder.md)."""

import json
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import RootOption, SetOption, StoreOption, open_store
from runwright.cli.render import console, err_console, guarded

app = typer.Typer()


@app.command()
@guarded
def ladder(
    spec_file: Path = typer.Argument(..., help="Job spec whose target shape the ladder climbs to."),
    overrides: list[str] = SetOption,
    loss_tolerance: float = typer.Option(
        0.02, "--loss-tolerance", help="Largest relative loss difference from the previous rung."
    ),
    min_efficiency: float = typer.Option(
        0.5, "--min-efficiency", help="Smallest scaling efficiency E(N) against one rank."
    ),
    node_devices: int | None = typer.Option(
        None,
        "--node-devices",
        help="Ranks of the one-node rung (default: the spec's devices per node, at least 2).",
        show_default=False,
    ),
    carry_steps: int = typer.Option(
        1, "--carry-steps", help="Steps the reshard run trains past the restored checkpoint."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for ladder.json and ladder.html (default: <root>/ladders/<ladder id>/).",
        show_default=False,
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = typer.Option(False, "--json", help="Print the ladder report as JSON."),
) -> None:
    """Climb the scale-up ladder: one rank, one node, two nodes, the target shape, each rung
    gated on the loss curve, E(N) and a resharded checkpoint restore (ladder.json,
    ladder.html).

    SPEC runs at each shape with the same model, data and global batch. Each rung must succeed
    and commit its last checkpoint, agree with the previous rung's loss curve on a
    coverage-equivalent ledger, keep E(N) above the minimum, and restore the previous rung's
    checkpoint resharded into its layout. Stops at the first failed gate with the reason;
    exits 1 then."""
    from runwright.ladder.gates import LadderSettings
    from runwright.ladder.runner import run_ladder
    from runwright.spec import load_spec

    for flag, value in (("--loss-tolerance", loss_tolerance), ("--min-efficiency", min_efficiency),
                        ("--carry-steps", carry_steps)):  # fmt: skip
        if not value > 0:
            raise typer.BadParameter(f"{flag} {value}: give a number above 0")
    settings = LadderSettings(
        loss_tolerance=loss_tolerance, min_efficiency=min_efficiency, carry_steps=carry_steps
    )
    resolved, st = open_store(root, store)
    spec = load_spec(spec_file, overrides)
    shown = err_console if json_out else console
    report = run_ladder(
        resolved, st, spec, workdir=spec_file.resolve().parent, settings=settings,
        node_devices=node_devices, out=out, console=shown, show=not json_out,
    )  # fmt: skip
    if json_out:
        print(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        table = Table(title=f"runwright ladder {report.ladder_id}")
        for column in ("rung", "shape", "run", "tokens/s", "E(N)", "max loss diff", "verdict"):
            table.add_column(column)
        for r in report.results:
            m = r.measure
            table.add_row(
                f"{r.rung.index} {r.rung.name}",
                f"{r.rung.nodes} x {r.rung.devices_per_node}",
                m.run_id,
                "-" if m.tokens_per_second is None else f"{m.tokens_per_second:.0f}",
                "-" if r.efficiency is None else f"{r.efficiency:.3f}",
                "-" if r.max_loss_difference is None else f"{r.max_loss_difference:.2e}",
                "passed" if r.passed else "[red]FAILED[/]",
            )
        console.print(table)
        if report.stopped:
            console.print(f"[red]stopped[/]: {report.stopped}", highlight=False)
        console.print(f"report: {report.html_path}")
    if not report.ok:
        raise typer.Exit(code=1)
