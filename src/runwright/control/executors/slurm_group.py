"""A generation in a Slurm allocation, as the run folder records it (no Slurm call here).

The controller launches generation G by writing `attempts/gen<G>/launch.json` (which allocation
request and job, how many nodes, the ranks' environment); the allocation's agent runs it and
writes `node_exits.json` and `exit_status`; each node's agent writes `nodes/node<N>/node.json` (N
its slot in the allocation; the engine's name for it, its ranks' global ranks and pids, torchrun's
exit status) beside its torchrun log and rank logs, the layout every executor's node agents have.
So any controller on any host that sees the run folder can adopt the generation and read its
evidence, which executors/torchrun_logs.py reads as it does the local executor's.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runwright.control.executors.protocol import FailureEvidence, LostSupervisor
from runwright.control.executors.slurm_node import write_json
from runwright.control.executors.torchrun_logs import (
    AgentLogs,
    group_evidence,
    reported_placements,
    tail,
)
from runwright.control.supervise import read_group_exit
from runwright.layout import AttemptPaths, RunPaths, parse_generation, run_paths
from runwright.protocol import (
    ENV_GENERATION,
    ENV_PROTOCOL_VERSION,
    ENV_RANK_MANIFEST,
    ENV_RUN_DIR,
    ENV_RUN_ID,
    ENV_SPEC_FILE,
    PROTOCOL_VERSION,
    RankEntry,
    decode_rank_manifest,
    encode_rank_manifest,
)
from runwright.spec import JobSpec

LAUNCH_VERSION = 1


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


@dataclass
class SlurmGroup:
    """A generation launched into a Slurm allocation; found again from its launch request."""

    generation: int
    job_id: str
    request: int
    attempt: AttemptPaths
    hosts: tuple[str, ...]

    @property
    def pid(self) -> int:
        """The Slurm job id: what supervises the group (WORKER_GROUP_LAUNCHED/ADOPTED)."""
        return int(self.job_id)

    @property
    def log_ref(self) -> str:
        return str(self.attempt.launcher_log)

    def exit_status(self) -> int | None:
        """What the agent wrote when the generation's step ended; None before."""
        try:
            return int(self.attempt.exit_status_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def node_records(self) -> dict[int, dict[str, Any]]:
        """node slot -> its node agent's record (absent for a node whose agent never started)."""
        found = {}
        for node in range(len(self.hosts)):
            record = read_json(self.attempt.node(node).record)
            if record is not None:
                found[node] = record
        return found


def write_launch(
    *,
    spec: JobSpec,
    run_id: str,
    generation: int,
    root: Path,
    workdir: Path,
    rank_manifest: list[RankEntry],
    extra_env: dict[str, str] | None,
    request: int,
    job_id: str,
    hosts: tuple[str, ...],
) -> SlurmGroup:
    """Ask the allocation's agent to run generation `generation` (the file is the request)."""
    paths = run_paths(root, run_id)
    attempt = paths.attempt(generation)
    attempt.folder.mkdir(parents=True, exist_ok=True)
    if not paths.spec_file.exists():
        paths.spec_file.write_text(spec.canonical_json())
    attempt.rank_manifest_file.write_text(encode_rank_manifest(rank_manifest))
    env = {
        **spec.environment.env,
        ENV_RUN_ID: run_id,
        ENV_GENERATION: str(generation),
        ENV_RUN_DIR: str(paths.folder),
        ENV_SPEC_FILE: str(paths.spec_file),
        ENV_RANK_MANIFEST: str(attempt.rank_manifest_file),
        ENV_PROTOCOL_VERSION: str(PROTOCOL_VERSION),
        "PYTHONUNBUFFERED": "1",
        **(
            {"OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}
            if "OMP_NUM_THREADS" in os.environ
            else {}
        ),
        **(extra_env or {}),
    }
    write_json(
        attempt.launch_file,
        {
            "v": LAUNCH_VERSION,
            "run_id": run_id,
            "generation": generation,
            "request": request,
            "job_id": job_id,
            "nodes": spec.resources.nodes,
            "hosts": list(hosts),
            "workdir": str(workdir),
            "env": env,
            "launched_unix_s": time.time(),
        },
    )
    return SlurmGroup(generation, job_id, request, attempt, hosts)


def adopt(root: Path, run_id: str, generation: int) -> SlurmGroup | None:
    """The group of `generation` from its launch request, wherever this controller runs."""
    attempt = run_paths(root, run_id).attempt(generation)
    launch = read_json(attempt.launch_file)
    if launch is None:
        return None
    return SlurmGroup(
        generation,
        str(launch["job_id"]),
        int(launch["request"]),
        attempt,
        tuple(launch.get("hosts") or ()),
    )


def launched_generations(root: Path, run_id: str) -> list[int]:
    """Generations with a launch request, oldest first."""
    paths = run_paths(root, run_id)
    if not paths.attempts.is_dir():
        return []
    found = (parse_generation(p.name) for p in paths.attempts.iterdir())
    return sorted(g for g in found if g is not None and paths.attempt(g).launch_file.exists())


def silent_nodes(group: SlurmGroup) -> list[str]:
    """Nodes that left no exit status of their own (their agent never ran, or was killed)."""
    records = group.node_records()
    return [
        host
        for node, host in enumerate(group.hosts)
        if records.get(node, {}).get("exit_status") is None
    ]


def evidence(
    group: SlurmGroup, lost: LostSupervisor | None, lost_hosts: tuple[str, ...]
) -> FailureEvidence:
    """Every node's torchrun evidence by global rank (torchrun_logs.group_evidence): the ranks'
    own WORKER_STARTED first, then the node agents' records of which global rank each local rank
    was, then torchrun's failure summaries; plus `lost_hosts`, the nodes Slurm reports lost."""
    try:
        world = len(decode_rank_manifest(group.attempt.rank_manifest_file.read_text()))
    except (OSError, ValueError):
        world = 0
    run = RunPaths(group.attempt.folder.parents[1])  # <run>/attempts/gen<G>
    started = reported_placements(run, group.generation, world)
    for node, record in group.node_records().items():
        for local, seen in (record.get("ranks") or {}).items():
            started.setdefault(int(seen["rank"]), (node, int(local)))
    found = group_evidence(
        [
            AgentLogs(
                node,
                host,
                group.attempt.node(node).torchrun_log,
                group.attempt.node(node).rank_logs,
            )
            for node, host in enumerate(group.hosts)
        ],
        ranks_per_node=max(1, world // max(1, len(group.hosts))),
        started=started,
        ended=read_group_exit(group.attempt.node_exits_file),
        lost=lost,
    )
    return found.model_copy(
        update={
            "log_tails": {**found.log_tails, "srun": tail(group.attempt.launcher_log)},
            "lost_hosts": lost_hosts,
        }
    )
