"""Nothing left behind: after a run ends, list what it still holds and expect nothing.

`assert_nothing_left(store, root, run_id)` asks every releaser of control/cleaner.py (processes
with the run's launch tags, its nodes' temporary folders, checkpoint staging and residue, torch
shared memory of its ranks, a lease held past the end, an allocation not given back) for the
run's leftovers without releasing any, and fails naming each. Tests that already end a run in a
state (SUCCEEDED, FAILED, CANCELLED, each drill fault) call it, so the check costs no run of its
own. Loaded by tests/conftest.py as `runwright_tests_leftovers` (the tests are not a package)."""

from pathlib import Path

from runwright.control.cleaner import clean_run
from runwright.control.states import TERMINAL
from runwright.store import Store


def leftovers(store: Store, root: Path, run_id: str) -> list[str]:
    """`<kind> <what> (<why it is the run's>)` for everything the ended run still holds."""
    run = store.get_run(run_id)
    assert run.state in TERMINAL, f"run {run_id} has not ended ({run.state})"
    found = clean_run(store, Path(root), run, dry_run=True)
    return [f"{x.kind} {x.what} ({x.owned_because})" for x in found.found] + [
        f"{key}: {why}" for key, why in found.failed.items()
    ]


def assert_nothing_left(store: Store, root: Path, *run_ids: str) -> None:
    left = {run_id: leftovers(store, root, run_id) for run_id in run_ids}
    assert not any(left.values()), f"ended runs left resources behind: {left}"
