"""The suite-wide replay-verdict check (tests/replay_verdicts.py) finds what it is there for: a
check that found no store, or read none of its rows, would pass every test while checking
nothing. Its stores are made in a `tempfile` folder, which the check itself never reads."""

import json
import sqlite3
import tempfile
from pathlib import Path

from runwright_tests_verdicts import StoreWatch

from runwright.store import Store

SPEC = json.dumps({"reproducibility": {"level": "bitwise"}})


def runwright_store(folder: Path, runs: list[tuple[str, str, int]], events, attempts) -> Path:
    """A real store (its schema from `Store.open`) holding `runs` (id, state, generation),
    `events` (run, generation, type, attributes) and `attempts` (run, generation)."""
    folder.mkdir(parents=True)
    Store.open(folder).close()
    db = sqlite3.connect(folder / "state.db")
    with db:
        for run_id, state, generation in runs:
            db.execute(
                "INSERT INTO runs (run_id, name, spec_hash, spec, plan, generation, state, "
                "workdir, root, created_unix_s, updated_unix_s, project) "
                "VALUES (?, ?, 'h', ?, '{}', ?, ?, '.', '.', 0, 0, 'default')",
                (run_id, run_id, SPEC, generation, state),
            )
        for n, (run_id, generation, type_, attributes) in enumerate(events):
            db.execute(
                "INSERT INTO events (event_id, run_id, generation, type, time_unix_s, attributes)"
                " VALUES (?, ?, ?, ?, 0, ?)",
                (f"e{n}", run_id, generation, type_, json.dumps(attributes)),
            )
        for run_id, generation in attempts:
            db.execute(
                "INSERT INTO attempts (run_id, generation, started_unix_s, world_size) "
                "VALUES (?, ?, 0, 2)",
                (run_id, generation),
            )
    db.close()
    return folder / "state.db"


def test_a_divergence_and_a_missing_verdict_are_found_and_a_proven_recovery_passes():
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        watch = StoreWatch(base)
        assert watch.new_problems(diverging_allowed=False) == []  # nothing written yet
        runwright_store(
            base / "test_one" / "root",
            runs=[("diverged", "SUCCEEDED", 2), ("unproven", "SUCCEEDED", 2),
                  ("proven", "SUCCEEDED", 2), ("lost_launch", "SUCCEEDED", 2)],
            events=[
                ("diverged", 1, "STEP_HEALTHY", {}),
                ("diverged", 2, "RECOVERY_DIVERGED", {"verified_generation": 2, "step": 5}),
                ("unproven", 1, "STEP_HEALTHY", {}),
                ("proven", 1, "STEP_HEALTHY", {}),
                ("proven", 2, "RECOVERY_VERIFIED", {"verified_generation": 2}),
                ("lost_launch", 2, "STEP_HEALTHY", {}),  # generation 1 never trained
            ],
            attempts=[(r, g) for r in ("diverged", "unproven", "proven", "lost_launch")
                      for g in (1, 2)],
        )  # fmt: skip
        found = watch.new_problems(diverging_allowed=False)
        assert len(found) == 2, found
        assert any("run diverged generation 2 RECOVERY_DIVERGED at step 5" in p for p in found)
        assert any("run unproven SUCCEEDED after 2 attempts" in p for p in found)
        assert watch.new_problems(diverging_allowed=False) == []  # each reported once


def test_a_divergence_a_test_makes_on_purpose_is_allowed_and_stays_allowed():
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        watch = StoreWatch(base)
        store = runwright_store(
            base / "test_two",
            runs=[("diverged", "RUNNING", 2)],
            events=[("diverged", 2, "RECOVERY_DIVERGED", {"verified_generation": 2, "step": 3})],
            attempts=[("diverged", 1), ("diverged", 2)],
        )
        assert watch.new_problems(diverging_allowed=True) == []
        store.touch()  # a later test of the module writes to the same store
        assert watch.new_problems(diverging_allowed=False) == []
