"""`runwright gc`: release what ended runs left behind under a root (docs/control.md)."""

import json
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import RootOption, StoreOption, open_store
from runwright.cli.render import console, guarded

app = typer.Typer()


@app.command()
@guarded
def gc(
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List what would be released; release nothing."
    ),
    data_cache: Path | None = typer.Option(
        None,
        "--data-cache",
        help="This host's dataset cache to sweep (default $RUNWRIGHT_DATA_CACHE, else "
        "~/.cache/runwright/datasets).",
    ),
    retention_days: float | None = typer.Option(
        None,
        "--retention-days",
        min=0,
        help="Days a cached dataset is kept after its last use (default "
        "$RUNWRIGHT_DATA_CACHE_RETENTION_DAYS, else 7).",
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = typer.Option(False, "--json", help="Print the sweep as JSON."),
) -> None:
    """Release what ended runs left behind under a root: processes, temporary folders,
    checkpoint staging, leases, credentials, and this host's cached datasets past their
    retention (--dry-run lists them).

    For every ended run (SUCCEEDED, FAILED, CANCELLED) release what its records
    say it still holds: processes started with its launch tags, its nodes' temporary folders,
    checkpoint staging and residue, torch shared memory of its ranks, a lease of a controller
    that is gone, object-store keys never revoked. Then remove this host's cached datasets that
    no live run reads and that are withdrawn, deleted or unused for longer than the retention.
    Live runs are left alone; running it twice releases nothing the second time.
    Exits 1 when something could not be released."""
    from runwright.control.data_cache import sweep_data_cache
    from runwright.control.sweep import sweep_root
    from runwright.data.format.dataset import default_cache_dir

    resolved, st = open_store(root, store)
    sweep = sweep_root(st, resolved, dry_run=dry_run)
    cache = sweep_data_cache(
        st, data_cache or default_cache_dir(), retention=retention_days, dry_run=dry_run
    )
    if json_out:
        data = sweep.model_dump(mode="json")
        data.update(released=sweep.released, left=sweep.left, data_cache=cache.model_dump())
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        verb = "would release" if dry_run else "released"
        table = Table(title=f"runwright gc {resolved}" + (" (dry run)" if dry_run else ""))
        for column in ("run", "state", "kind", "what", "owned because", "outcome"):
            table.add_column(column)
        for cleanup in sweep.cleanups:
            released = {(x.kind, x.what) for x in cleanup.released}
            for x in cleanup.found:
                key = f"{x.kind} {x.what}"
                outcome = (
                    verb
                    if dry_run or (x.kind, x.what) in released
                    else f"[red]left[/]: {cleanup.failed.get(key, '')}"
                )
                table.add_row(
                    cleanup.run_id, cleanup.state, x.kind, x.what, x.owned_because, outcome
                )
        console.print(table)
        console.print(
            f"{sweep.runs_checked} ended run(s) checked, {len(sweep.live_runs)} live left alone; "
            f"{sum(len(c.found) for c in sweep.cleanups)} leftover(s) found",
            highlight=False,
        )
        if cache.entries:
            cached = Table(title=f"dataset cache {cache.cache_dir}")
            for column in ("dataset", "bytes", "verdict", "because"):
                cached.add_column(column)
            for e in cache.entries:
                failed = cache.failed.get(e.path)
                verdict = f"[red]left[/]: {failed}" if failed else e.verdict
                cached.add_row(e.dataset_id[:16], f"{e.bytes:,}", verdict, e.because)
            console.print(cached)
    if any(c.failed for c in sweep.cleanups) or cache.failed:
        raise typer.Exit(code=1)
