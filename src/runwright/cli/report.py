"""`runwright report RUN`: write a run's evidence chain as report.json and report.html."""

from pathlib import Path

import typer

from runwright.cli.options import JsonOption, RootOption, StoreOption, open_store, run_id_argument
from runwright.cli.render import console, guarded, print_json
from runwright.errors import RunwrightError
from runwright.govern.report import build_report
from runwright.layout import run_paths
from runwright.observe.trackers import attach_report

app = typer.Typer()


@app.command()
@guarded
def report(
    run_id: str = run_id_argument("Run id (or a unique prefix of it)."),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for report.json and report.html (default: <root>/runs/RUN/report/).",
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Write a run's report: code, environment, spec, plan, data, checkpoint lineage, incidents,
    interventions, cost split and final metrics, with loss, throughput, system and data charts
    on one time axis. A run that reported to MLflow (spec `observability.trackers`) gets both
    files attached to its MLflow run."""
    resolved, st = open_store(root, store)
    run = st.get_run(run_id)
    folder = out or run_paths(resolved, run.run_id).report
    try:
        paths = build_report(st, run.run_id, folder)
    except OSError as exc:  # --out is a file, unwritable, or on a full volume
        raise RunwrightError(f"cannot write the report to {folder}: {exc}") from None
    trackers = attach_report(
        run_paths(resolved, run.run_id).folder, [paths.json_path, paths.html_path]
    )
    if json_out:
        print_json({"run_id": run.run_id, **paths.model_dump(mode="json"), "trackers": trackers})
        return
    console.print(f"report of run {run.run_id}:\n  {paths.json_path}\n  {paths.html_path}")
    for line in trackers:
        console.print(f"  {line}", highlight=False)
