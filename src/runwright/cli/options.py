"""Options shared by the commands that touch runs: where the root and the store are."""

from pathlib import Path

import typer

from runwright.control.outage import OutageRider
from runwright.store import Store, resolve_root

RootOption = typer.Option(
    None,
    "--root",
    help="runwright root folder (default: $RUNWRIGHT_ROOT or ./.runwright).",
    show_default=False,
)
StoreOption = typer.Option(
    None,
    "--store",
    help="Store URL: sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
    "(default: $RUNWRIGHT_STORE or <root>/state.db).",
    show_default=False,
)
JsonOption = typer.Option(False, "--json", help="Machine-readable output.")


def open_store(
    root: Path | None, store: str | None, *, ride_out_outage: bool = False
) -> tuple[Path, Store]:
    """The root and the store. A command fails at once on a store that is unavailable; the
    controller (`ride_out_outage`) waits for it, since a detached one has nobody to retry it."""
    resolved = resolve_root(root)
    if ride_out_outage:
        return resolved, OutageRider().call(lambda: Store.open(resolved, store))
    return resolved, Store.open(resolved, store)
