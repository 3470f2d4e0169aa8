"""`runwright release ...`: request a release of a run's checkpoint (export + gates), approve or
reject it, and read the model registry (govern/release.py, docs/governance.md)."""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from runwright.cli.backend import open_backend
from runwright.cli.options import JsonOption, RootOption, StoreOption
from runwright.cli.render import console, guarded, print_json

app = typer.Typer(
    help="Release a checkpoint through gates into the model registry, and approve it.",
    no_args_is_help=True,
)

VERDICT_STYLE = {"pass": "green", "fail": "bold red", "pending": "yellow"}
STATUS_STYLE = {
    "RELEASED": "bold green",
    "AWAITING_APPROVAL": "yellow",
    "BLOCKED": "bold red",
    "REJECTED": "red",
    "CHECKING": "cyan",
}


@app.command()
@guarded
def create(
    run: str = typer.Argument(..., help="Run id (or a unique prefix)."),
    checkpoint: str = typer.Argument("latest", help="Checkpoint folder, id, step or `latest`."),
    name: str | None = typer.Option(None, help="Model name in the registry (default: the run's)."),
    format: str = typer.Option(
        "auto", "--format", help="Export layout: auto, hf-gpt2 or runwright (`ckpt export`)."
    ),
    output_tolerance: float = typer.Option(
        1e-4, help="Largest |logit difference| from the training model allowed for hf-gpt2."
    ),
    eval_tolerance: float = typer.Option(
        1e-3, help="Largest relative difference of the eval loss from the run's own."
    ),
    max_load_seconds: float | None = typer.Option(None, help="Fail past this load time."),
    max_load_memory_mib: float | None = typer.Option(
        None, help="Fail past this peak memory while loading, in MiB."
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Export a run's checkpoint as a model's next version and run the release gates.

    The gates: files, standalone load, tokenizer, outputs against the training model, eval loss
    against the run's, load time and memory. The outcome goes into the model registry: BLOCKED
    with the failed gate as the reason (exit 1), or AWAITING_APPROVAL by a person with the role
    to approve."""
    limits: dict[str, Any] = {
        "output_tolerance": output_tolerance,
        "eval_tolerance": eval_tolerance,
        "max_load_seconds": max_load_seconds,
        "max_load_memory_bytes": (
            int(max_load_memory_mib * 2**20) if max_load_memory_mib is not None else None
        ),
    }
    with console.status("exporting and running the release gates"):
        row = open_backend(root, store).release_request(run, checkpoint, name, format, limits)
    if json_out:
        print_json(row)
    else:
        _show(row)
    if row["status"] == "BLOCKED":
        raise typer.Exit(1)


@app.command()
@guarded
def approve(
    release_id: str = typer.Argument(..., help="Release id (or a unique prefix)."),
    note: str | None = typer.Option(None, help="Why, for the record."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Approve a release whose gates passed.

    The export is hashed again first: one that changed since its gates is BLOCKED instead.
    Needs the admin role; through the server, someone other than who requested it."""
    _decide(release_id, True, note, root, store, json_out)


@app.command()
@guarded
def reject(
    release_id: str = typer.Argument(..., help="Release id (or a unique prefix)."),
    note: str | None = typer.Option(None, help="Why, for the record."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Reject a release awaiting approval (final). Needs the admin role."""
    _decide(release_id, False, note, root, store, json_out)


def _decide(
    release_id: str,
    approve: bool,
    note: str | None,
    root: Path | None,
    store: str | None,
    json_out: bool,
) -> None:
    row = open_backend(root, store).release_decide(release_id, approve, note)
    print_json(row) if json_out else _show(row)


@app.command("list")
@guarded
def list_(
    name: str | None = typer.Option(None, help="Only this model."),
    run: str | None = typer.Option(None, help="Only releases of this run."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """The model registry: every release, newest first, with its status and source."""
    rows = open_backend(root, store).release_list(name, run)
    if json_out:
        print_json(rows)
        return
    table = Table(title="model registry")
    for column in ("release", "model", "status", "run @ step", "requested", "decided by"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row["release_id"],
            f"{row['name']} v{row['version']}",
            _status(row["status"]),
            f"{row['run_id']} @ {row['step']}",
            f"{_when(row['requested_unix_s'])} by {row['requested_by']}",
            row.get("decided_by") or "-",
        )
    console.print(table)
    if not rows:
        console.print("no releases yet: `runwright release create RUN`")


@app.command()
@guarded
def show(
    release_id: str = typer.Argument(..., help="Release id (or a unique prefix)."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """One release: its gates with their evidence, its lineage and the decision."""
    row = open_backend(root, store).release_show(release_id)
    print_json(row) if json_out else _show(row)


def _status(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, '')}]{status}[/]"


def _when(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _show(row: dict[str, Any]) -> None:
    console.print(
        f"{row['release_id']}: {escape(row['name'])} v{row['version']} "
        f"{_status(row['status'])}, checkpoint {row['checkpoint_id'][:12]} (step {row['step']}) "
        f"of run {row['run_id']}, {row['format']} at {escape(row['export_path'])}",
        highlight=False,
    )
    table = Table(show_header=True)
    for column in ("gate", "verdict", "evidence", "fix"):
        table.add_column(column, overflow="fold")
    for gate in row["gates"]:
        verdict = gate["verdict"]
        table.add_row(
            gate["name"],
            f"[{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]",
            escape(gate["evidence"]),
            escape(gate.get("fix") or ""),
        )
    console.print(table)
    lineage = row.get("lineage") or {}
    if lineage.get("datasets") or lineage.get("spec_hash"):
        datasets = ", ".join(d.get("dataset_id", "")[:16] for d in lineage.get("datasets", []))
        console.print(
            f"lineage: spec {str(lineage.get('spec_hash'))[:16]}, datasets {datasets or '-'}, "
            f"code {escape(str((lineage.get('code') or {}).get('ref') or '-'))}",
            highlight=False,
        )
    if row.get("decided_by"):
        note = f": {escape(row['decision_note'])}" if row.get("decision_note") else ""
        console.print(
            f"decided {row['status']} by {escape(row['decided_by'])} at "
            f"{_when(row['decided_unix_s'])}{note}",
            highlight=False,
        )
