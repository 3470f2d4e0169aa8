"""`runwright report RUN`: write a run's evidence chain as report.json and report.html."""

import json
from pathlib import Path

import typer

from runwright.cli.backend import open_backend
from runwright.cli.options import JsonOption, RootOption, StoreOption, run_id_argument
from runwright.cli.render import console, guarded, print_json
from runwright.errors import RunwrightError
from runwright.govern.report import ReportPaths
from runwright.layout import run_paths

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
    files attached to its MLflow run (by a CLI on the store; not through a server yet)."""
    be = open_backend(root, store)
    content, html = be.report(run_id)
    full_id = content["run"]["run_id"]
    # Through a server the report is written here, in ./report-RUN/ unless --out says where.
    folder = out or (Path(f"report-{full_id}") if be.remote else run_paths(be.root, full_id).report)
    paths = ReportPaths(json_path=folder / "report.json", html_path=folder / "report.html")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        paths.json_path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
        paths.html_path.write_text(html, encoding="utf-8")
    except OSError as exc:  # --out is a file, unwritable, or on a full volume
        raise RunwrightError(f"cannot write the report to {folder}: {exc}") from None
    trackers: list[str] = []
    if not be.remote:
        from runwright.observe.trackers import attach_report

        trackers = attach_report(
            run_paths(be.root, full_id).folder, [paths.json_path, paths.html_path]
        )
    if json_out:
        print_json({"run_id": full_id, **paths.model_dump(mode="json"), "trackers": trackers})
        return
    console.print(f"report of run {full_id}:\n  {paths.json_path}\n  {paths.html_path}")
    for line in trackers:
        console.print(f"  {line}", highlight=False)
