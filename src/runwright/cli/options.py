"""Options shared by the commands: where the root and the store are, and machine output.

Every command's `--root` is `RootOption`, resolved by `runwright.layout.resolve_root`."""

from pathlib import Path

import typer

from runwright.control.outage import OutageRider
from runwright.layout import ROOT_HELP, resolve_root
from runwright.store import Store

RootOption = typer.Option(None, "--root", help=ROOT_HELP, show_default=False)
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
