"""Options shared by the commands: where the root and the store are, and machine output.

Every command's `--root` is `RootOption`, resolved by `runwright.layout.resolve_root`."""

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from runwright.layout import ROOT_HELP, resolve_root, validate_run_id

if TYPE_CHECKING:
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
SetOption = typer.Option(
    [],
    "--set",
    metavar="KEY=VALUE",
    help="Set one spec field before validation, e.g. --set training.steps=200 (repeatable; the "
    "value is read as YAML; the hash is of the resulting spec).",
)


def open_store(
    root: Path | None, store: str | None, *, ride_out_outage: bool = False
) -> "tuple[Path, Store]":
    """The root and the store. A command fails at once on a store that is unavailable; the
    controller (`ride_out_outage`) waits for it, since a detached one has nobody to retry it."""
    from runwright.control.outage import OutageRider
    from runwright.store import Store

    resolved = resolve_root(root)
    if ride_out_outage:
        return resolved, OutageRider().call(lambda: Store.open(resolved, store))
    return resolved, Store.open(resolved, store)


def _run_id(value: str | None) -> str | None:
    """typer callback: a run id given on the command line is a plain name (layout's rule)."""
    if value is None:
        return None
    try:
        return validate_run_id(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def run_id_argument(help: str, default: Any = ...) -> Any:
    """A positional run id (or unique prefix), refused before any store lookup or path is built
    from it unless it is a plain name (`layout.validate_run_id`)."""
    return typer.Argument(default, help=help, callback=_run_id)


def bounded_text(what: str, max_chars: int) -> Callable[[str | None], str | None]:
    """typer callback for a free-text option stored with a run: non-empty, at most `max_chars`,
    no NUL (which PostgreSQL text refuses)."""

    def check(value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise typer.BadParameter(f"{what} cannot be empty")
        if len(value) > max_chars:
            raise typer.BadParameter(
                f"{what} is at most {max_chars:,} characters, got {len(value):,}"
            )
        if "\x00" in value:
            raise typer.BadParameter(f"{what} cannot contain a NUL character")
        return value

    return check
