"""Where a kill landed in a life's saves, from outside production code: rank 0's own notes
around the public save API and its checkpoint events (workloads.note), and what the kill left in
the checkpoint root (commit.py's protocol: shards, then manifest.json in the staging folder, then
the move, COMMITTED and the pointer).

- start: before the life's first save call (fork, rendezvous, fence, GC, restore);
- snapshot: a save was called and not yet staged (the state copied at the step boundary);
- persist: the oldest save in flight is staged, its manifest not yet written (shard writes,
  their checks);
- publish: its manifest is written, its commit not yet acknowledged (the move, COMMITTED, the
  latest pointer's compare-and-set, retention);
- between: every staged save committed, and the next not called yet;
- end: after the last save was waited for (the group's barrier and teardown).
"""

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from workloads import read_lines, timeline_of

from runwright.ckpt.manifest import MANIFEST_FILE
from runwright.ckpt.storage import STAGING, folder_name

PHASES = ("start", "snapshot", "persist", "publish", "between", "end")
IN_SAVES = ("snapshot", "persist", "publish")


def landed(root: str, life: int, killed_unix_s: float) -> str:
    """The phase of `life` that its kill at `killed_unix_s` interrupted (module docstring)."""
    notes = [n for n in read_lines(timeline_of(root, life)) if n["at"] <= killed_unix_s]
    kinds = {n["kind"] for n in notes}
    if "save" not in kinds:
        return "start"
    if "closed" in kinds:
        return "end"
    staged = {n["step"]: n["id"] for n in notes if n["kind"] == "staged"}
    if {n["step"] for n in notes if n["kind"] == "save"} - set(staged):
        return "snapshot"
    committed = {n["step"] for n in notes if n["kind"] == "committed"}
    in_flight = sorted(set(staged) - committed)
    if not in_flight:
        return "between"
    step = in_flight[0]  # the backlog persists in order: the oldest is the one being written
    checkpoint_id = staged[step]
    written = os.path.exists(Path(root) / STAGING / checkpoint_id / MANIFEST_FILE)
    moved = os.path.exists(Path(root) / folder_name(step, checkpoint_id))
    return "publish" if written or moved else "persist"


def save_span_seconds(root: str, life: int) -> float:
    """From the life's first save call to its last commit: the phase a clock draws kills from."""
    notes = read_lines(timeline_of(root, life))
    first = min(n["at"] for n in notes if n["kind"] == "save")
    return max(n["at"] for n in notes if n["kind"] == "committed") - first


def counts(phases: Iterable[str]) -> dict[str, int]:
    """Kills per phase, every phase named (0 where none landed)."""
    found = Counter(phases)
    return {phase: found.get(phase, 0) for phase in PHASES}
