"""`runwright postmortem RUN`: a failed or recovered run's incident, assembled from the store."""

from pathlib import Path

import typer

from runwright.cli.options import JsonOption, RootOption, StoreOption, open_store, run_id_argument
from runwright.cli.render import console, guarded, print_json

app = typer.Typer()


@app.command()
@guarded
def postmortem(
    run_id: str = run_id_argument("Run id (or a unique prefix of it)."),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Folder for postmortem.json and postmortem.html (default: "
        "<root>/runs/RUN/postmortem/).",
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Assemble a failed or recovered run's postmortem: the incidents with their evidence, the
    timeline, what the platform did, the diagnostics bundles, what the incidents cost, and a
    template for the cause and the follow-ups (postmortem.json and postmortem.html)."""
    from runwright.govern.postmortem import postmortem as assemble
    from runwright.govern.postmortem import render_postmortem
    from runwright.layout import run_paths

    resolved, st = open_store(root, store)
    try:
        pm = assemble(st, run_id)
    finally:
        st.close()
    folder = out or run_paths(resolved, pm.run["run_id"]).folder / "postmortem"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "postmortem.json").write_text(pm.model_dump_json(indent=1))
    (folder / "postmortem.html").write_text(render_postmortem(pm))
    if json_out:
        print_json({"folder": str(folder), **pm.model_dump(mode="json")})
        return
    console.print(pm.verdict)
    for incident in pm.incidents:
        console.print(
            f"  gen {incident.generation}: {incident.failure_class} "
            f"(rank {incident.rank}): {incident.message}"
        )
    console.print(f"wrote {folder / 'postmortem.json'} and {folder / 'postmortem.html'}")
