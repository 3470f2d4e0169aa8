"""`runwright demo`: the README's main command."""

from importlib import resources
from pathlib import Path

import typer

from runwright.cli.options import RootOption, StoreOption, open_store
from runwright.cli.render import console, guarded, print_json
from runwright.control.controller import Controller
from runwright.control.summary import event_line, run_summary
from runwright.spec import parse_text, spec_from_mapping

app = typer.Typer()


@app.command()
@guarded
def demo(
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = typer.Option(False, "--json", help="Print one JSON summary object."),
) -> None:
    """Run the walking skeleton: a 2-rank torchrun job driven to SUCCEEDED, with its events."""
    text = resources.files("runwright.demo").joinpath("skeleton.yaml").read_text()
    spec = spec_from_mapping(parse_text(text, "yaml", "skeleton.yaml"), "skeleton.yaml")
    resolved, st = open_store(root, store)
    printer = None if json_out else (lambda e: console.print(event_line(e), highlight=False))
    controller = Controller(st, resolved, on_event=printer)
    run, _ = controller.submit(spec, Path.cwd())
    if not json_out:
        console.print(f"[bold]runwright demo[/]: run {run.run_id} in {resolved}")
    final = controller.drive(run.run_id)
    summary = run_summary(st, final.run_id)
    if json_out:
        summary.pop("events")
        print_json(summary)
    else:
        console.print(f"\nrun id        {final.run_id}")
        console.print("state history " + " -> ".join(summary["state_history"]))
        console.print(
            f"final state   {final.state} ({final.terminal_reason}), last step "
            f"{final.last_step}, {summary['event_count']} events"
        )
    if final.state != "SUCCEEDED":
        raise typer.Exit(code=1)
