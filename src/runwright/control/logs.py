"""Where each rank's output of a generation is, by GLOBAL rank: what `runwright logs` reads.

Each node's torchrun agent keeps its ranks' stdout and stderr under its `--log-dir`, keyed by
LOCAL rank (layout.NodePaths.rank_logs); the global rank of each is what the ranks reported in
their WORKER_STARTED (their node and local rank), else arithmetic over the nodes
(executors/torchrun_logs.global_rank_map, as the failure evidence maps them).
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runwright.control.executors.torchrun_logs import global_rank_map, reported_placements
from runwright.events import EventType
from runwright.layout import parse_generation, run_paths
from runwright.protocol import decode_rank_manifest
from runwright.records import Record

STREAMS = ("stderr", "stdout")


class RankLog(Record):
    """One output file of one rank of one generation."""

    generation: int
    node: int
    rank: int
    """Global rank."""
    local_rank: int
    stream: str
    """`stdout` or `stderr`."""
    path: Path


class AgentLog(Record):
    """One node's torchrun agent output of one generation."""

    generation: int
    node: int
    path: Path


def generations(root: Path, run_id: str) -> list[int]:
    """Generations of the run that left an attempt folder, oldest first."""
    attempts = run_paths(root, run_id).attempts
    if not attempts.is_dir():
        return []
    found = (parse_generation(p.name) for p in attempts.iterdir())
    return sorted(g for g in found if g is not None)


def agent_logs(root: Path, run_id: str, generation: int) -> list[AgentLog]:
    attempt = run_paths(root, run_id).attempt(generation)
    return [
        AgentLog(generation=generation, node=n.node, path=n.torchrun_log)
        for n in attempt.node_paths()
        if n.torchrun_log.exists()
    ]


def rank_logs(root: Path, run_id: str, generation: int) -> list[RankLog]:
    """Every rank output file generation `generation` left, ordered by rank then stream."""
    paths = run_paths(root, run_id)
    attempt = paths.attempt(generation)
    nodes = attempt.node_paths()
    try:
        world = len(decode_rank_manifest(attempt.rank_manifest_file.read_text()))
    except (OSError, ValueError):
        world = 0
    local_files: dict[int, dict[int, dict[str, Path]]] = {}
    for node in nodes:
        for path in node.rank_logs.glob("*/attempt_*/*/std*.log"):
            if not path.parent.name.isdigit() or path.stem not in STREAMS:
                continue
            files = local_files.setdefault(node.node, {}).setdefault(int(path.parent.name), {})
            files[path.stem] = path
    per_node = max([len(v) for v in local_files.values()] or [1])
    if world and nodes:
        per_node = max(1, world // len(nodes))
    known: dict[int, dict[int, int]] = {}
    for rank, (node, local) in reported_placements(paths, generation, world).items():
        known.setdefault(node, {})[local] = rank
    ranks = global_rank_map([n.node for n in nodes], per_node, known)
    found = [
        RankLog(
            generation=generation,
            node=node,
            rank=ranks.get(node, {}).get(local, local),
            local_rank=local,
            stream=stream,
            path=path,
        )
        for node, by_local in local_files.items()
        for local, streams in by_local.items()
        for stream, path in streams.items()
    ]
    return sorted(found, key=lambda log: (log.rank, STREAMS.index(log.stream)))


def last_lines(path: Path, count: int, chunk_bytes: int = 1 << 16) -> list[str]:
    """The last `count` lines of a file, read from its end (a rank's log may be large)."""
    if count <= 0:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            data = b""
            while size > 0 and data.count(b"\n") <= count:
                step = min(chunk_bytes, size)
                size -= step
                f.seek(size)
                data = f.read(step) + data
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[-count:]


def follow(path: Path, offset: int) -> Iterator[tuple[str, int]]:
    """The complete new lines of `path` after byte `offset`, with the offset past each."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        yield data[start:end].decode("utf-8", errors="replace"), offset + end + 1
        start = end + 1


def hang_note(events: list[Any], generation: int) -> str | None:
    """The hang attribution of `generation`'s failure (control/attribution.py), for the top of
    `runwright logs`: whose output to read first. None when it has none."""
    for event in events:
        said = event.attributes.get("attribution") if event.generation == generation else None
        if event.type == EventType.FAILURE_CLASSIFIED and said:
            return f"hang attribution: {said['sentence']}"
    return None
