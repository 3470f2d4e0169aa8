"""`runwright gc`: the cleaner (cleaner.py) over every ended run of a root.

Only runs in a terminal state are swept (a live run's processes, staging and lease are in use);
only runs recorded under this root (a shared store holds other roots' runs too); and each run's
leftovers are found from its own records, so a folder the store does not know is never touched.
A dry run lists what a real sweep would release. Sweeping twice releases nothing the second time.
"""

from pathlib import Path

from pydantic import Field

from runwright.control.cleaner import Cleanup, clean_run
from runwright.control.states import TERMINAL
from runwright.records import Record
from runwright.store import Store

ALL_RUNS = 10**9
"""list_runs' limit when every run is wanted."""


class Sweep(Record):
    """What `runwright gc` found and did under one root."""

    root: str
    dry_run: bool
    runs_checked: int
    """Ended runs of this root that were looked at."""
    cleanups: list[Cleanup] = Field(default_factory=list)
    """The ended runs that still held something (found) or could not be looked at (failed)."""
    live_runs: list[str] = Field(default_factory=list)
    """Runs not yet ended: left alone."""

    @property
    def released(self) -> int:
        return sum(len(c.released) for c in self.cleanups)

    @property
    def left(self) -> int:
        return sum(len(c.left) for c in self.cleanups)


def sweep_root(store: Store, root: Path, *, dry_run: bool = False) -> Sweep:
    """Release what every ended run under `root` still holds (nothing, with `dry_run`)."""
    runs = [r for r in store.list_runs(limit=ALL_RUNS) if Path(r.root) == root]
    ended = sorted((r for r in runs if r.state in TERMINAL), key=lambda r: r.run_id)
    sweep = Sweep(
        root=str(root),
        dry_run=dry_run,
        runs_checked=len(ended),
        live_runs=sorted(r.run_id for r in runs if r.state not in TERMINAL),
    )
    for run in ended:
        cleanup = clean_run(store, root, run, dry_run=dry_run)
        if cleanup.found or cleanup.failed:
            sweep.cleanups.append(cleanup)
    return sweep
