"""`runwright demo`: the README's main command."""

import json
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import RootOption, StoreOption, open_store
from runwright.cli.render import console, err_console, guarded

app = typer.Typer()


@app.command()
@guarded
def demo(
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    seed: int | None = typer.Option(None, help="Seed of the fault step (random by default)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON summary object."),
) -> None:
    """Build a dataset, run the reference trainer on 2 ranks, kill one rank, recover, run a
    fault-free reference, prove the two are bitwise the same run, and write the report."""
    from runwright.demo.run import run_demo

    resolved, st = open_store(root, store)
    out = err_console if json_out else console
    result = run_demo(resolved, st, console=out, show=not json_out, seed=seed)
    if json_out:
        print(json.dumps(result.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        table = Table(title="runwright demo", show_header=False)
        table.add_column("what")
        table.add_column("value")

        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:.1f} %"

        rows = [
            ("run", result.run_id),
            ("state history", " -> ".join(result.state_history)),
            ("fault", f"SIGKILL rank 1 after rank 0 reported step {result.fault_step}"),
            ("recovered", str(result.recovered)),
            ("lost steps", str(result.lost_steps)),
            ("recovery time", f"{result.recovery_seconds} s"),
            ("replay check", result.replay_check or "-"),
            ("ETTR", pct(result.ettr)),
            ("loss tokens/s", f"{result.loss_tokens_per_second or 0:,.0f}"),
            ("input-wait share", pct(result.input_wait_share)),
            ("checkpoint exposure", pct(result.checkpoint_exposure)),
            ("final loss", f"{result.final_loss:.4f}" if result.final_loss else "-"),
            ("reference run", result.reference_run_id),
            (
                "equivalence",
                result.equivalence
                + (
                    f" (first difference: {result.first_difference})"
                    if result.first_difference
                    else ""
                ),
            ),
            ("dataset", result.dataset_path),
            ("report", result.report_html_path),
        ]
        for name, value in rows:
            table.add_row(name, value)
        console.print(table)
    if not result.recovered or result.equivalence != "bitwise-equal":
        raise typer.Exit(code=1)
