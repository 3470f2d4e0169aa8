"""A generation in a Slurm allocation, as the run folder records it (no Slurm call here).

The controller launches generation G by writing `attempts/gen<G>/launch.json` (which allocation
request and job, how many nodes, the ranks' environment); the allocation's agent runs it and
writes `exit_status`; each node's agent writes `nodes/<node>/node.json` (its node rank, its ranks'
global ranks and pids, torchrun's exit status) beside its torchrun log and rank logs. So any
controller on any host that sees the run folder can adopt the generation and read its evidence.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runwright.control.executors.local import LAUNCHER_LOG_CHARS, evidence_from, tail
from runwright.control.executors.protocol import FailureEvidence, LostSupervisor
from runwright.control.executors.slurm_node import write_json
from runwright.layout import AttemptPaths, parse_generation, run_paths
from runwright.protocol import (
    ENV_GENERATION,
    ENV_PROTOCOL_VERSION,
    ENV_RANK_MANIFEST,
    ENV_RUN_DIR,
    ENV_RUN_ID,
    ENV_SPEC_FILE,
    PROTOCOL_VERSION,
    RankEntry,
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

    def node_records(self) -> dict[str, dict[str, Any]]:
        """node -> its node agent's record (absent for a node whose agent never started)."""
        found = {}
        for host in self.hosts:
            record = read_json(self.attempt.node(host).record)
            if record is not None:
                found[host] = record
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
    return [h for h in group.hosts if records.get(h, {}).get("exit_status") is None]


def evidence(
    group: SlurmGroup, lost: LostSupervisor | None, lost_hosts: tuple[str, ...]
) -> FailureEvidence:
    """Every node's torchrun evidence, with its ranks named by global rank (torchrun's log
    folders are by local rank; the node agent recorded which global rank each one was)."""
    records = group.node_records()
    errors, tracebacks, tails, launchers = [], {}, {}, []
    share = LAUNCHER_LOG_CHARS // max(1, len(group.hosts))
    for host in group.hosts:
        node = group.attempt.node(host)
        ranks = (records.get(host) or {}).get("ranks") or {}
        to_global = {int(local): int(v["rank"]) for local, v in ranks.items()}
        found = evidence_from(node.rank_logs, tail(node.torchrun_log, share))
        launchers.append(f"== node {host} ==\n{found.launcher_log}")
        errors += [
            e.model_copy(update={"rank": to_global.get(e.rank, e.rank)})
            for e in found.error_records
        ]
        tracebacks.update({to_global.get(r, r): t for r, t in found.rank_tracebacks.items()})
        tails[f"{host}/torchrun"] = tail(node.torchrun_log)
        tails.update({f"{host}/{name}": text for name, text in found.log_tails.items()})
    tails["srun"] = tail(group.attempt.launcher_log)
    return FailureEvidence(
        launcher_log="\n".join(launchers),
        error_records=tuple(sorted(errors, key=lambda e: (e.timestamp_s, e.rank))),
        rank_tracebacks=tracebacks,
        lost=lost,
        log_tails=tails,
        lost_hosts=lost_hosts,
    )
