"""Every recovery in the suite proves itself (issue 16: "every recovery in the test suite ends
RECOVERY_VERIFIED").

After each test, every SQLite store the test wrote (a `state.db` in pytest's temporary folders,
modified since the test began) is read, and the test fails when
- a run recorded RECOVERY_DIVERGED, unless the test is marked `replay_diverges` (it makes a
  replayed step differ on purpose);
- a run at `reproducibility.level: bitwise` SUCCEEDED after more than one attempt, an earlier
  generation reported steps, and its last generation carries no verdict (the check did not run
  on the recovery that finished it).
RECOVERY_UNVERIFIED passes: it says why nothing could be compared (a reshard, a rollback that
skipped the steps on purpose, a script that reports no loss), which the controller decides.

Stores elsewhere (a PostgreSQL server, a folder made with `tempfile`) are not read.
"""

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path

VERDICTS = ("RECOVERY_VERIFIED", "RECOVERY_DIVERGED", "RECOVERY_UNVERIFIED")
DEPTH = 3
"""How deep under a test's folder a store is looked for: `<test>/state.db` up to
`<test>/<root>/<sub>/state.db`."""


class StoreWatch:
    """The stores written under one pytest base folder since the last look: the new folders in
    it (a test's tmp_path, a module's mktemp) are searched, the stores already found are
    re-read when they changed; each problem is reported once."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.since = 0.0
        self.known: dict[Path, float] = {}
        self.reported: set[str] = set()

    def new_problems(self, diverging_allowed: bool) -> list[str]:
        now = time.time()
        since, self.since = self.since, now - 1.0  # a second of slack for coarse mtimes
        for folder in self._new_folders(since):
            for depth in range(DEPTH):
                for path in folder.glob("*/" * depth + "state.db"):
                    self.known.setdefault(path, 0.0)
        found = []
        for path, seen in list(self.known.items()):
            changed = _changed(path)
            if changed is None or changed <= seen:
                continue
            self.known[path] = changed
            for problem, divergence in problems(path):
                if problem in self.reported:
                    continue
                # Reported once, allowed or not: a marked test's divergence stays its own when
                # a later test of the same module touches the same store.
                self.reported.add(problem)
                if not (divergence and diverging_allowed):
                    found.append(problem)
        return found

    def _new_folders(self, since: float) -> list[Path]:
        try:
            entries = list(os.scandir(self.base))
        except FileNotFoundError:
            return []
        return [
            Path(e.path)
            for e in entries
            if e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_mtime >= since
        ]


def _changed(path: Path) -> float | None:
    """The newest modification of the store or its write-ahead log; None when it is gone."""
    try:
        changed = path.stat().st_mtime
    except FileNotFoundError:
        return None
    with contextlib.suppress(FileNotFoundError):
        changed = max(changed, path.with_name(path.name + "-wal").stat().st_mtime)
    return changed


def problems(store: Path) -> list[tuple[str, bool]]:
    """What is wrong with the recoveries recorded in `store` (see the module docstring), each
    with whether it is a divergence (which a `replay_diverges` test makes on purpose)."""
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return []
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if not {"runs", "events", "attempts"} <= tables:
            return []  # not a runwright store, or one a test left half made
        marks = ",".join("?" * len(VERDICTS))
        verdicts: dict[str, dict[int, tuple[str, dict]]] = {}
        for run_id, kind, attributes in db.execute(
            f"SELECT run_id, type, attributes FROM events WHERE type IN ({marks})", VERDICTS
        ):
            attrs = json.loads(attributes)
            verdicts.setdefault(run_id, {})[attrs.get("verified_generation", -1)] = (kind, attrs)
        found = []
        for run_id, by_gen in verdicts.items():
            for gen, (kind, attrs) in sorted(by_gen.items()):
                if kind == "RECOVERY_DIVERGED":
                    found.append(
                        (
                            f"{store}: run {run_id} generation {gen} RECOVERY_DIVERGED at step "
                            f"{attrs.get('step')} (rank {attrs.get('rank')}: loss "
                            f"{attrs.get('loss')} vs {attrs.get('earlier_loss')})",
                            True,
                        )
                    )
        for run_id, generation, spec in db.execute(
            "SELECT run_id, generation, spec FROM runs WHERE state = 'SUCCEEDED'"
        ):
            level = (json.loads(spec).get("reproducibility") or {}).get("level", "bitwise")
            (attempts,) = db.execute(
                "SELECT count(*) FROM attempts WHERE run_id = ?", (run_id,)
            ).fetchone()
            (trained_before,) = db.execute(
                "SELECT count(*) FROM events WHERE run_id = ? AND type = 'STEP_HEALTHY' "
                "AND generation < ?",
                (run_id, generation),
            ).fetchone()
            # A restart after generations that never trained (a launch lost before the first
            # step) replays nothing anyone reported: no verdict is due.
            due = level == "bitwise" and attempts > 1 and trained_before > 0
            if due and generation not in verdicts.get(run_id, {}):
                found.append(
                    (
                        f"{store}: run {run_id} SUCCEEDED after {attempts} attempts with no replay "
                        f"verdict for its last generation {generation}",
                        False,
                    )
                )
        return found
    except sqlite3.Error:
        return []  # a store still being written by a process the test left: not judged
    finally:
        db.close()
