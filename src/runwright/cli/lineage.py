"""`runwright lineage dataset|checkpoint`: which runs used a dataset, what a checkpoint was
trained on (govern/lineage.py)."""

from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import JsonOption, RootOption, StoreOption, open_store
from runwright.cli.render import console, guarded, print_json

app = typer.Typer(
    help="Which runs and checkpoints used a dataset, and what a checkpoint was trained on.",
    no_args_is_help=True,
)


@app.command()
@guarded
def dataset(
    given: str = typer.Argument(..., help="Dataset id (or a unique prefix), folder or name."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Every run that trained on a dataset, with the checkpoints each wrote (deleted ones too):
    what a data deletion or a licence withdrawal has to reach."""
    from runwright.govern.lineage import dataset_lineage

    _, st = open_store(root, store)
    try:
        found = dataset_lineage(st, given)
    finally:
        st.close()
    if json_out:
        print_json(found.model_dump())
        return
    label = f" ({found.name})" if found.name else ""
    table = Table(title=f"runs that trained on dataset {found.dataset_id[:16]}{label}")
    for column in ("run", "project", "state", "tokenizer", "checkpoints", "releases"):
        table.add_column(column, overflow="fold")
    for run in found.runs:
        kept = [c for c in run.checkpoints if c.status != "DELETED"]
        table.add_row(
            f"{run.run_id} ({run.name})",
            run.project,
            run.state,
            (run.tokenizer_hash or "-")[:16],
            f"{len(run.checkpoints)} ({len(kept)} kept): "
            + ", ".join(f"{c.checkpoint_id[:12]}@{c.step}" for c in run.checkpoints),
            ", ".join(f"{r.name} v{r.version} ({r.status})" for r in run.releases) or "-",
        )
    console.print(table)
    if not found.runs:
        console.print("no run of this store trained on it")


@app.command()
@guarded
def checkpoint(
    given: str = typer.Argument(..., help="Checkpoint id or a unique prefix of it."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """What a checkpoint was trained on: its run, spec hash, code, datasets and tokenizer, and
    its chain of parent checkpoints."""
    from runwright.govern.lineage import checkpoint_trace

    _, st = open_store(root, store)
    try:
        trace = checkpoint_trace(st, given)
    finally:
        st.close()
    if json_out:
        print_json(trace.model_dump())
        return
    console.print(
        f"checkpoint {trace.checkpoint_id} ({trace.status}), step {trace.step}, generation "
        f"{trace.generation}, at {trace.path}"
    )
    console.print(f"run: {trace.run_id} ({trace.run_name}), spec {trace.spec_hash[:16]}")
    code = trace.code.ref or f"unknown ({trace.code.reason})"
    console.print(f"code: {code} [{trace.code.source}]")
    for used in trace.datasets:
        console.print(f"dataset: {used.dataset_id} (tokenizer {(used.tokenizer_hash or '-')[:16]})")
    if not trace.datasets:
        console.print("dataset: none reported (synthetic data, or a run before lineage)")
    chain = " <- ".join(p[:12] for p in trace.parents) or "none (the run's first checkpoint)"
    console.print(f"parents: {chain}")
    for release in trace.releases:
        console.print(
            f"release: {release.name} v{release.version} ({release.status}) "
            f"{release.release_id} at {release.export_path}"
        )
