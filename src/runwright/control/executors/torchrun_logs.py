"""What torchrun agents leave behind, read as failure evidence keyed by GLOBAL rank.

Each node's agent writes its own output (its failure summary names every failed rank as
`rank : 3 (local_rank: 1)`) and a `--log-dir` keyed by LOCAL rank:
`<rdzv id>_<random>/attempt_<n>/<local rank>/` holding stdout.log, stderr.log and the error file
`torch.distributed.elastic.multiprocessing.errors.record` writes (error.json). On one node a local
rank is the global rank; on several, which global ranks a node ran is decided at rendezvous (c10d
assigns node ranks, pytorch/pytorch#182223), so the executor learns it afterwards, strongest
source first (`global_rank_map`):
1. the ranks' own word: each rank's first channel message, WORKER_STARTED, carries its global
   rank, local rank and node (`reported_placements`);
2. the agent's failure summary, for ranks that failed before they could report;
3. arithmetic: with the same number of ranks on every node, global = node rank x ranks per node +
   local rank, so one known rank of a node gives all of them; a single node that nothing placed
   gets the one node rank left over, and only when nothing at all is known does launch order
   stand in for the rendezvous.
"""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runwright.control.error_kinds import exception_line
from runwright.control.executors.protocol import (
    ErrorRecord,
    FailureEvidence,
    LostSupervisor,
    NodeExit,
)
from runwright.control.supervise import GroupExit
from runwright.events import EventType
from runwright.layout import RunPaths
from runwright.protocol import decode_message

LAUNCHER_LOG_CHARS = 20_000
"""How much of the agents' logs the classifier sees: their failure summaries are at the end."""
LAUNCHER_LOG_MIN_CHARS = 4_000
"""The least of each agent's log kept when many nodes share LAUNCHER_LOG_CHARS."""
LOG_TAIL_BYTES = 4000
"""How much of each log the diagnostics bundle keeps."""

SUMMARY_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)")
"""One failed rank in torchrun's failure summary: global rank, then local rank."""


def tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


def _global(local: int, ranks: Mapping[int, int] | None) -> int:
    return local if ranks is None else ranks.get(local, local)


def read_error_files(log_dir: Path, ranks: Mapping[int, int] | None = None) -> list[ErrorRecord]:
    """torchrun's `<log_dir>/<rdzv id>/attempt_<n>/<local rank>/error.json`, earliest first;
    `ranks` maps the folder's local ranks to global ones (None: the same, one node)."""
    records = []
    for path in log_dir.glob("*/attempt_*/*/error.json"):
        try:
            body = json.loads(path.read_text())["message"]
            info = body.get("extraInfo", {}) if isinstance(body, dict) else {}
            message = body["message"] if isinstance(body, dict) else str(body)
            records.append(
                ErrorRecord(
                    rank=_global(int(path.parent.name), ranks),
                    message=str(message),
                    timestamp_s=float(info.get("timestamp", 0) or 0),
                    traceback=str(info.get("py_callstack", ""))[-4000:],
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(records, key=lambda r: (r.timestamp_s, r.rank))


def rank_tracebacks(log_dir: Path, ranks: Mapping[int, int] | None = None) -> dict[int, str]:
    """The last traceback of each rank whose stderr shows one (a rank that failed without
    `@record`, e.g. before the runtime was set up), by global rank; `exception_line` gives its
    message."""
    found: dict[int, str] = {}
    for path in log_dir.glob("*/attempt_*/*/stderr.log"):
        try:
            text = path.read_bytes()[-20_000:].decode("utf-8", errors="replace")
            local = int(path.parent.name)
        except (OSError, ValueError):
            continue
        marker = "Traceback (most recent call last)"
        if marker in text and exception_line(text):
            found[_global(local, ranks)] = marker + text.rsplit(marker, 1)[1]
    return found


def rank_log_tails(
    log_dir: Path, ranks: Mapping[int, int] | None = None, prefix: str = ""
) -> dict[str, str]:
    """`<prefix>rank<global>/std{out,err}.log` -> its tail, for the diagnostics bundle."""
    tails = {}
    for path in sorted(log_dir.glob("*/attempt_*/*/std*.log")):
        try:
            local = int(path.parent.name)
        except ValueError:
            continue
        tails[f"{prefix}rank{_global(local, ranks)}/{path.name}"] = tail(path)
    return tails


def evidence_from(
    log_dir: Path, launcher_log: str = "", lost: LostSupervisor | None = None
) -> FailureEvidence:
    """The evidence in one node's torchrun `--log-dir` folder (local ranks are global ones),
    beside torchrun's own log text."""
    return FailureEvidence(
        launcher_log=launcher_log,
        error_records=tuple(read_error_files(log_dir)),
        rank_tracebacks=rank_tracebacks(log_dir),
        lost=lost,
        log_tails=rank_log_tails(log_dir),
    )


def summary_ranks(agent_log: str) -> dict[int, int]:
    """local rank -> global rank of every rank an agent's failure summary names."""
    return {int(local): int(rank) for rank, local in SUMMARY_RANK.findall(agent_log)}


def reported_placements(
    run: RunPaths, generation: int, world_size: int
) -> dict[int, tuple[int, int]]:
    """global rank -> (node, local rank), as each rank of `generation` reported it in its first
    channel message (WORKER_STARTED); ranks that never reported are missing."""
    found: dict[int, tuple[int, int]] = {}
    for rank in range(world_size):
        try:
            with open(run.channel_file(generation, rank), "rb") as f:
                message = decode_message(f.readline())
        except (OSError, ValueError):
            continue
        if message is None or message.type != EventType.WORKER_STARTED:
            continue
        node, local = message.attributes.get("node"), message.attributes.get("local_rank")
        if isinstance(node, int) and isinstance(local, int):
            found[message.rank] = (node, local)
    return found


def global_rank_map(
    nodes: Sequence[int], ranks_per_node: int, known: Mapping[int, Mapping[int, int]]
) -> dict[int, dict[int, int]]:
    """node -> (local rank -> global rank) for every node of a group with `ranks_per_node` ranks
    on each, from `known` (node -> the local -> global pairs some source established): a node
    with one known pair is placed by it (global = node rank x ranks per node + local); a node
    with none takes its launch-order node rank if no other node holds it, else the first one
    left over (so a single unplaced node gets the one rank left)."""
    base = {}
    for node in nodes:
        pairs = known.get(node) or {}
        if pairs:
            local, rank = min(pairs.items())
            base[node] = rank - local
    free = [i * ranks_per_node for i in range(len(nodes))]
    free = [b for b in free if b not in base.values()]
    for index, node in enumerate(nodes):
        if node in base:
            continue
        own = index * ranks_per_node
        base[node] = own if own in free or not free else free[0]
        if base[node] in free:
            free.remove(base[node])
    mapping = {}
    for node in nodes:
        pairs = dict(known.get(node) or {})
        mapping[node] = {
            **{local: base[node] + local for local in range(ranks_per_node)},
            **pairs,
        }
    return mapping


@dataclass(frozen=True)
class AgentLogs:
    """Where one node's agent wrote its output and its ranks' logs."""

    node: int
    host: str
    log_path: Path
    log_dir: Path


def group_evidence(
    agents: Sequence[AgentLogs],
    *,
    ranks_per_node: int,
    started: Mapping[int, tuple[int, int]],
    ended: GroupExit | None,
    lost: LostSupervisor | None = None,
) -> FailureEvidence:
    """The evidence every node's agent of a group left, by global rank. `started` is
    `reported_placements`, `ended` what the supervisor recorded of the agents' exits. One node
    reads as it always did: its log is the launcher log, its tails `torchrun` and `rank<R>/...`;
    several put the agent that ended first first, and prefix their tails with `node<N>/`."""
    texts = {a.node: tail(a.log_path, LAUNCHER_LOG_CHARS) for a in agents}
    known: dict[int, dict[int, int]] = {a.node: {} for a in agents}
    for rank, (node, local) in started.items():
        known.setdefault(node, {})[local] = rank
    for agent in agents:
        for local, rank in summary_ranks(texts[agent.node]).items():
            known[agent.node].setdefault(local, rank)
    nodes = [a.node for a in agents]
    ranks = global_rank_map(nodes, ranks_per_node, known)
    exits = {e.node: e for e in ended.agents} if ended else {}
    by_node = {a.node: a for a in agents}
    node_exits = tuple(
        NodeExit(
            node=e.node,
            host=by_node[e.node].host if e.node in by_node else "",
            exit_code=e.exit_code,
            stopped=e.stopped,
            ranks=tuple(sorted(ranks.get(e.node, {}).values())),
        )
        for e in (ended.agents if ended else [])
    )
    if len(agents) == 1:
        (agent,) = agents
        mapping = ranks[agent.node]
        return FailureEvidence(
            launcher_log=texts[agent.node],
            error_records=tuple(read_error_files(agent.log_dir, mapping)),
            rank_tracebacks=rank_tracebacks(agent.log_dir, mapping),
            lost=lost,
            log_tails={"torchrun": tail(agent.log_path), **rank_log_tails(agent.log_dir, mapping)},
            node_exits=node_exits,
        )
    order = [e.node for e in node_exits] + [n for n in nodes if n not in exits]
    share = max(LAUNCHER_LOG_MIN_CHARS, LAUNCHER_LOG_CHARS // len(agents))
    launcher, errors, tracebacks, tails = "", [], {}, {}
    for node in order:
        agent = by_node[node]
        if len(launcher) < LAUNCHER_LOG_CHARS:
            code = exits[node].exit_code if node in exits else "unknown"
            launcher += f"=== node {node} ({agent.host}): agent exit status {code} ===\n"
            launcher += texts[node][-share:] + "\n"
        errors += read_error_files(agent.log_dir, ranks[node])
        tracebacks.update(rank_tracebacks(agent.log_dir, ranks[node]))
        tails[f"node{node}/torchrun"] = tail(agent.log_path)
        tails.update(rank_log_tails(agent.log_dir, ranks[node], prefix=f"node{node}/"))
    return FailureEvidence(
        launcher_log=launcher,
        error_records=tuple(sorted(errors, key=lambda r: (r.timestamp_s, r.rank))),
        rank_tracebacks=tracebacks,
        lost=lost,
        log_tails=tails,
        node_exits=node_exits,
    )
