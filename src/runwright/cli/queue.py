"""`runwright queue`: the unfinished runs and what each is waiting for."""

import time
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.backend import open_backend
from runwright.cli.options import JsonOption, RootOption, StoreOption
from runwright.cli.render import guarded, print_json, print_unclipped

app = typer.Typer()


@app.command()
@guarded
def queue(
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """List the unfinished runs, oldest first, with what each is waiting for.

    Each row also says what the run asked for: project, pool, priority (* when preemptible) and
    shape (nodes x devices per node).

    Through --server: the runs of your token's project."""
    rows = open_backend(root, store).queue()
    if json_out:
        print_json(rows)
        return
    table = Table(title="queue")
    columns = ("run id", "state", "project", "pool", "prio", "shape", "gen", "step")
    for col in (*columns, "submitted by", "since", "waiting for"):
        table.add_column(col, no_wrap=col != "waiting for")
    for r in rows:
        table.add_row(
            r["run_id"],
            r["state"],
            r["project"],
            r["pool"],
            f"{r['priority']}{'*' if r['preemptible'] else ''}",
            f"{r['nodes']}x{r['devices_per_node']}",
            str(r["generation"]),
            "" if r["last_step"] is None else str(r["last_step"]),
            r["submitted_by"] or "",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_unix_s"])),
            r["waiting_for"] or "",
        )
    print_unclipped(table)
