"""`runwright experiment ...`: group runs under an owner and a hypothesis, see which can be
compared and why not, and mark a run's contaminated steps (access/experiments.py,
govern/experiments.py, control/contamination.py, docs/governance.md "Experiments"). On the store
itself or through a server (`--server`), like every command on runs (cli/backend.py)."""

import json
import re
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.backend import open_backend
from runwright.cli.options import JsonOption, RootOption, StoreOption
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
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Create an experiment in your project: an owner and a hypothesis, runs added later."""
    made = open_backend(root, store).experiment_create(name, owner, hypothesis)
    if json_out:
        print_json(made)
        return
    console.print(
        f"experiment {made['name']} created in project {made['project']} (owner {made['owner']})",
        highlight=False,
    )


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
    updated = open_backend(root, store).experiment_add(name, runs)
    if json_out:
        print_json(updated)
        return
    console.print(f"experiment {name}: {len(updated['runs'])} runs", highlight=False)


@app.command("list")
@guarded
def list_(
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Your project's experiments."""
    found = open_backend(root, store).experiment_list()
    if json_out:
        print_json(found)
        return
    table = Table(title="experiments")
    for column in ("project", "name", "owner", "runs", "hypothesis"):
        table.add_column(column)
    for e in found:
        table.add_row(e["project"], e["name"], e["owner"], str(len(e["runs"])), e["hypothesis"])
    console.print(table)


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
    view = open_backend(root, store).experiment_show(name, reference)
    if json_out:
        print(json.dumps(view, indent=2, sort_keys=True))
        return
    e = view["experiment"]
    console.print(
        f"experiment {e['name']} ({e['project']}): owner {e['owner']}; "
        f"hypothesis: {e['hypothesis']}",
        highlight=False,
    )
    table = Table(title=f"against reference {view['reference']}")
    for column in ("run", "comparable", "mean loss", "last loss", "steps", "contaminated"):
        table.add_column(column)
    for row in view["runs"]:
        marks = row["contaminated"]
        table.add_row(
            row["run_id"],
            "yes" if row["comparable"] else "[red]no[/]: " + "; ".join(row["reasons"]),
            "-" if row["mean_loss"] is None else f"{row['mean_loss']:.4f}",
            "-" if row["last_loss"] is None else f"{row['last_loss']:.4f}",
            str(row["steps_compared"]),
            ", ".join(f"{r['first_step']}-{r['last_step']} ({r['reason']})" for r in marks) or "-",
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
    event in the run's log, audited; nothing is deleted). Its submitter, or an operator."""
    found = STEPS.match(steps.strip())
    if not found:
        raise RunwrightError(f"--steps {steps!r}: give FIRST-LAST, e.g. --steps 120-180")
    mark = open_backend(root, store).run_contaminate(run, int(found[1]), int(found[2]), reason)
    if json_out:
        print_json(mark)
        return
    console.print(
        f"steps {mark['first_step']}-{mark['last_step']} of {mark['run_id']} marked "
        f"contaminated: {reason}",
        highlight=False,
    )
