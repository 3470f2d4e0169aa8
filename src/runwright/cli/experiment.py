"""`runwright experiment ...`: group runs under an owner and a hypothesis, see which can be
compared and why not, and mark a run's contaminated steps (govern/experiments.py,
control/contamination.py, docs/governance.md "Experiments")."""

import getpass
import json
import re
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import JsonOption, RootOption, StoreOption, open_store
from runwright.cli.render import console, guarded, print_json
from runwright.errors import RunwrightError

app = typer.Typer(
    help="Group runs into experiments, compute their comparability, mark contaminated steps.",
    no_args_is_help=True,
)

STEPS = re.compile(r"^(\d+)-(\d+)$")


@app.command()
@guarded
def create(
    name: str = typer.Argument(..., help="The experiment's name."),
    owner: str = typer.Option(..., "--owner", help="Who owns it."),
    hypothesis: str = typer.Option(..., "--hypothesis", help="What it sets out to show."),
    root: Path | None = RootOption,
    json_out: bool = JsonOption,
) -> None:
    """Create an experiment: an owner and a hypothesis, runs added later."""
    from runwright.govern.experiments import create_experiment
    from runwright.layout import resolve_root

    made = create_experiment(resolve_root(root), name, owner, hypothesis, getpass.getuser())
    if json_out:
        print_json(made.model_dump(mode="json"))
        return
    console.print(f"experiment {made.name} created (owner {made.owner})", highlight=False)


@app.command()
@guarded
def add(
    name: str = typer.Argument(..., help="The experiment."),
    runs: list[str] = typer.Argument(..., help="Run ids (or unique prefixes)."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Add runs to an experiment."""
    from runwright.govern.experiments import add_runs

    resolved, st = open_store(root, store)
    updated = add_runs(resolved, st, name, runs)
    if json_out:
        print_json(updated.model_dump(mode="json"))
        return
    console.print(f"experiment {name}: {len(updated.runs)} runs", highlight=False)


@app.command()
@guarded
def show(
    name: str = typer.Argument(..., help="The experiment."),
    reference: str | None = typer.Option(
        None, "--reference", help="The run the others are compared with (default: the first)."
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """The experiment's runs, each comparable with the reference or not, with the reasons;
    contaminated steps left out of the losses shown."""
    from runwright.govern.experiments import show_experiment

    resolved, st = open_store(root, store)
    view = show_experiment(resolved, st, name, reference)
    if json_out:
        print(json.dumps(view.model_dump(mode="json"), indent=2, sort_keys=True))
        return
    e = view.experiment
    console.print(f"experiment {e.name}: owner {e.owner}; hypothesis: {e.hypothesis}")
    table = Table(title=f"against reference {view.reference}")
    for column in ("run", "comparable", "mean loss", "last loss", "steps", "contaminated"):
        table.add_column(column)
    for row in view.runs:
        table.add_row(
            row.run_id,
            "yes" if row.comparable else "[red]no[/]: " + "; ".join(row.reasons),
            "-" if row.mean_loss is None else f"{row.mean_loss:.4f}",
            "-" if row.last_loss is None else f"{row.last_loss:.4f}",
            str(row.steps_compared),
            ", ".join(f"{r.first_step}-{r.last_step} ({r.reason})" for r in row.contaminated)
            or "-",
        )
    console.print(table)


@app.command()
@guarded
def contaminate(
    run: str = typer.Argument(..., help="Run id (or a unique prefix)."),
    steps: str = typer.Option(..., "--steps", help="FIRST-LAST, both included (e.g. 120-180)."),
    reason: str = typer.Option(..., "--reason", help="Why these steps cannot be used."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Mark a step range of a run contaminated: left out of comparisons and stop criteria (an
    event in the run's log; nothing is deleted)."""
    from runwright.control.contamination import mark_contaminated

    found = STEPS.match(steps.strip())
    if not found:
        raise RunwrightError(f"--steps {steps!r}: give FIRST-LAST, e.g. --steps 120-180")
    _, st = open_store(root, store)
    mark = mark_contaminated(st, run, int(found[1]), int(found[2]), reason, getpass.getuser())
    if json_out:
        print_json(mark.model_dump(mode="json"))
        return
    console.print(
        f"steps {mark.first_step}-{mark.last_step} of {run} marked contaminated: {reason}",
        highlight=False,
    )
