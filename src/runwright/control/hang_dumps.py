"""Collecting the ranks' collective dumps when the watchdog declares a hang (issue 24).

The controller signals every rank process it knows on this host (DUMP_SIGNAL; the pids come
from WORKER_STARTED), waits a bounded time for each rank's dump to be rewritten, reads what is
there and attributes the hang (control/attribution.py). A rank that does not answer in time
(dead, stopped, on another host) counts as having sent no dump; one dumped earlier (at its exit)
is still read. The group is stopped only afterwards (control/recovery.py): a killed rank writes
nothing.
"""

import json
import os
import time
from pathlib import Path
from typing import Any

from runwright.control.attribution import Attribution, attribute
from runwright.control.stall import sample_rank
from runwright.control.watchdog import Verdict
from runwright.layout import RunPaths
from runwright.protocol import DUMP_SIGNAL

DUMP_WAIT_SECONDS = 20.0
"""How long the controller waits at most for a live rank's dump. A rank answers within its
dumper's poll (50 ms) plus the write, ~0.1 s here; on a machine whose cores are all busy it can
take seconds, and a rank that is gone or stopped is not waited for at all (`request_dumps`), so
only a rank that is alive but cannot run its dumper thread costs the whole wait."""
POLL_SECONDS = 0.05
RECHECK_SECONDS = 0.5
"""How often the ranks still awaited are looked at again (gone or stopped meanwhile)."""


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def request_dumps(
    paths: RunPaths,
    generation: int,
    rank_pids: dict[int, int],
    world_size: int,
    wait_seconds: float = DUMP_WAIT_SECONDS,
) -> dict[int, dict[str, Any]]:
    """Signal the ranks in `rank_pids`, wait for their fresh dumps (at most `wait_seconds`),
    and return every rank's newest dump that exists (rank -> dump)."""
    asked = time.time()
    signalled = set()
    for rank, pid in rank_pids.items():
        if not _can_answer(pid):
            continue  # gone, or stopped (SIGSTOP): it cannot answer, do not wait for it
        try:
            os.kill(pid, DUMP_SIGNAL)
            signalled.add(rank)
        except (ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + wait_seconds
    recheck = time.monotonic() + RECHECK_SECONDS
    dumps: dict[int, dict[str, Any]] = {}
    while True:
        for rank in range(world_size):
            dump = _read(paths.collective_dump(generation, rank))
            if dump is not None:
                dumps[rank] = dump
        waiting = [r for r in signalled if float(dumps.get(r, {}).get("now_wall") or 0) < asked]
        if time.monotonic() >= recheck:  # a rank that died or was stopped since: not awaited
            recheck = time.monotonic() + RECHECK_SECONDS
            signalled.difference_update(r for r in waiting if not _can_answer(rank_pids[r]))
            waiting = [r for r in waiting if r in signalled]
        if not waiting or time.monotonic() > deadline:
            return dumps
        time.sleep(POLL_SECONDS)


def _can_answer(pid: int) -> bool:
    """Whether process `pid` exists and is not stopped, so its dumper thread can run."""
    sample = sample_rank(pid)
    return sample is not None and sample.main_state not in ("T", "t")


def attribute_hang(
    paths: RunPaths,
    generation: int,
    rank_pids: dict[int, int],
    world_size: int,
    wait_seconds: float = DUMP_WAIT_SECONDS,
) -> tuple[Attribution, dict[int, dict[str, Any]], float]:
    """Collect the dumps and attribute the hang: (attribution, dumps, seconds it took)."""
    started = time.monotonic()
    dumps = request_dumps(paths, generation, rank_pids, world_size, wait_seconds)
    return attribute(dumps, world_size), dumps, time.monotonic() - started


def read_dumps(paths: RunPaths, generation: int, world_size: int) -> dict[int, dict[str, Any]]:
    """The dumps the ranks left (at their exit), without asking for new ones."""
    found = {r: _read(paths.collective_dump(generation, r)) for r in range(world_size)}
    return {r: d for r, d in found.items() if d is not None}


def explain_hang(
    paths: RunPaths,
    generation: int,
    rank_pids: dict[int, int],
    world_size: int,
    verdict: Verdict,
) -> tuple[Verdict, dict[str, Any]]:
    """The watchdog's verdict with the attribution put first in its words and its culprit as
    the rank, and what FAILURE_CLASSIFIED and the diagnostics bundle keep of it."""
    found, dumps, seconds = attribute_hang(paths, generation, rank_pids, world_size)
    named = verdict
    if found.kind != "unknown":  # else the watchdog's words stand (e.g. a rank that is gone)
        rank = found.rank if found.rank is not None else verdict.rank
        words = f"{found.sentence}; watchdog: {verdict.detail}"
        named = Verdict(verdict.failure_class, rank, words, suspect=verdict.suspect)
    record = {
        "kind": found.kind,
        "sentence": found.sentence,
        "culprits": list(found.culprits),
        "facts": found.facts,
        "collect_seconds": round(seconds, 3),
        "ranks_dumped": sorted(dumps),
    }
    return named, {**record, "dumps": {str(r): d for r, d in dumps.items()}}
