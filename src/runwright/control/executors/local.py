"""The local executor: launches a run's worker group under torchrun on this machine.

One generation = one supervisor (control/supervise.py) running one torchrun agent per node, in a
session of its own so the group outlives a controller restart. A one-node generation runs one
agent with `--standalone`; an N-node one runs N agents on this host, each in a process group of
its own with its own log folder (`attempts/gen<G>/nodes/node<N>/`), meeting through c10d
rendezvous on a free port hosted by node 0's agent (executors/torchrun.py), exactly as agents on N
machines would. Each rank gets the run id, generation, run folder, the spec and the rank manifest
through environment variables (runtime/startup.py), and its node's index (ENV_NODE); those
variables are also the generation's and the node's tags: every process of it (supervisor, agents,
ranks and anything they start) carries the run folder and generation in its launch environment,
so the executor finds all of them through /proc even once their parents are gone, and one node's
processes by its tag (executors/local_group.py: the tags, a launched group, adopting one).

Process lifetimes: every agent dies with its supervisor and every rank with its agent
(parent-death signals, runwright/lifetime.py); stopping a generation kills its process tree and
its tagged processes and nothing else; and `kill_generations_below` makes sure no process of an
older generation is alive before a new one starts.

Failure evidence (`LocalExecutor.evidence`, read by executors/torchrun_logs.py): each agent's
per-rank error files (written by `torch.distributed.elastic.multiprocessing.errors.record`) and
stderr tracebacks mapped to global ranks, the tail of each agent's own log (its root-cause
summary), each node's exit status as the supervisor recorded it, and the lost-supervisor record.

Hosts: `hosts(nodes)` is this host once per node. A user's hosts list would start each non-local
node's agent behind a remote command prefix (`agent_argv`); nothing else changes, since the
rendezvous, the tags, the per-node logs and the evidence already work per node.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runwright.control.credentials import scoped_environment
from runwright.control.executors import standby
from runwright.control.executors.local_group import (
    KILLED_EXIT_SECONDS,
    NodeAgent,
    WorkerGroup,
    adopt_group,
    generation_processes,
    generation_tags,
    launched_generations,
)
from runwright.control.executors.protocol import (
    Allocation,
    AllocationState,
    FailureEvidence,
    GroupHandle,
    LostSupervisor,
)
from runwright.control.executors.torchrun import Rendezvous, torchrun_argv
from runwright.control.executors.torchrun_logs import (
    AgentLogs,
    group_evidence,
    reported_placements,
    tail,
)
from runwright.control.processes import (
    signal_all,
    wait_gone,
)
from runwright.control.supervise import Agent, AgentsPlan, read_group_exit
from runwright.errors import LaunchError
from runwright.layout import AttemptPaths, run_paths
from runwright.protocol import (
    ENV_GENERATION,
    ENV_NODE,
    ENV_PROTOCOL_VERSION,
    ENV_RANK_MANIFEST,
    ENV_RUN_DIR,
    ENV_RUN_ID,
    ENV_SPEC_FILE,
    ENV_STANDBY,
    PROTOCOL_VERSION,
    RankEntry,
    decode_rank_manifest,
    encode_rank_manifest,
)
from runwright.spec import JobSpec

CUDA_DEVICES = "CUDA_VISIBLE_DEVICES"

RENDEZVOUS_HOST = "127.0.0.1"
"""Where this host's agents meet: node 0's agent hosts the c10d store, and every agent is here."""


def free_port() -> int:
    """A TCP port nothing listens on now. Node 0's agent binds it a moment later; should
    another process take it in between, that agent fails with `Address already in use`, which
    is classified `infrastructure` and retried."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def agent_argv(host: str, argv: list[str]) -> list[str]:
    """The command that runs an agent's `argv` on `host`. The local executor runs agents on this
    host only; a user's hosts list adds its remote prefix (e.g. `ssh HOST`) here."""
    here = socket.gethostname()
    if host != here:
        raise LaunchError(
            f"the rank manifest places a node on host {host!r}, but the local executor starts "
            f"agents on this host ({here!r}) only: drive the run from a controller on {host!r}"
        )
    return argv


def node_devices(visible: str | None, node: int, per_node: int) -> str:
    """CUDA_VISIBLE_DEVICES for node `node`'s agent when several nodes share this host: its own
    `per_node` of the host's visible devices (`visible`, else devices 0, 1, ... by index), so
    local rank i of each node is a different device, as on separate machines (NCCL refuses two
    ranks on one device)."""
    devices = [d.strip() for d in (visible or "").split(",") if d.strip()]
    if not visible:
        devices = [str(i) for i in range((node + 1) * per_node)]
    mine = devices[node * per_node : (node + 1) * per_node]
    if len(mine) < per_node:
        raise LaunchError(
            f"node {node} needs devices {node * per_node}-{(node + 1) * per_node - 1} of this "
            f"host, but CUDA_VISIBLE_DEVICES={visible!r} shows {len(devices)}: make "
            "resources.nodes x devices_per_node fit the host's devices"
        )
    return ",".join(mine)


def _local(group: GroupHandle) -> WorkerGroup:
    if not isinstance(group, WorkerGroup):
        raise TypeError(f"the local executor cannot act on {type(group).__name__}")
    return group


def node_hosts(rank_manifest: list[RankEntry], nodes: int) -> list[str]:
    """Each node's host, as the rank manifest places it (this host where it says nothing)."""
    placed = {entry.node: entry.host for entry in rank_manifest}
    here = socket.gethostname()
    return [placed.get(node, here) for node in range(nodes)]


class LocalExecutor:
    """Runs worker groups as local processes (gloo on CPU, NCCL on GPU)."""

    name = "local"

    def adopt(self, root: Path, run_id: str, generation: int) -> WorkerGroup | None:
        return adopt_group(root, run_id, generation)

    def launched_generations(self, root: Path, run_id: str) -> list[int]:
        return launched_generations(root, run_id)

    def poll(self, group: GroupHandle) -> int | None:
        return _local(group).poll()

    def stop(
        self, group: GroupHandle, grace_seconds: float, worker_pids: list[int] | None = None
    ) -> int | None:
        return _local(group).stop(grace_seconds, worker_pids)

    def repair_lost(self, group: GroupHandle) -> LostSupervisor:
        return _local(group).repair_lost()

    def evidence(self, group: GroupHandle, lost: LostSupervisor | None = None) -> FailureEvidence:
        local = _local(group)
        attempt = local.attempt
        try:
            world = len(decode_rank_manifest(attempt.rank_manifest_file.read_text()))
        except (OSError, ValueError):
            world = 0
        found = group_evidence(
            [
                AgentLogs(n.node, n.host, n.paths.torchrun_log, n.paths.rank_logs)
                for n in local.nodes
            ],
            ranks_per_node=max(1, world // max(1, len(local.nodes))),
            started=reported_placements(local.run, local.generation, world),
            ended=read_group_exit(attempt.node_exits_file),
            lost=lost,
        )
        supervisor = tail(attempt.supervisor_log)
        if not supervisor:
            return found
        return found.model_copy(update={"log_tails": {**found.log_tails, "supervisor": supervisor}})

    def hosts(self, nodes: int) -> list[str]:
        """This host, once per node: N nodes are N torchrun agents here, meeting through c10d
        rendezvous as agents on N machines would."""
        if nodes < 1:
            raise LaunchError(f"resources.nodes={nodes}: a run needs at least one node")
        return [socket.gethostname()] * nodes

    def kill_generations_below(
        self, root: Path, run_id: str, generation: int
    ) -> dict[int, list[int]]:
        """SIGKILL every live process of run `run_id` on this machine whose generation is below
        `generation`, found by tag (so ranks whose supervisor and agents are gone are found
        too), and return once they are gone: generation -> the pids killed. Raises LaunchError
        naming the processes that outlived KILLED_EXIT_SECONDS, since starting `generation`
        beside them would run two generations at once."""
        older = {
            g: pids for g, pids in generation_processes(root, run_id).items() if g < generation
        }
        doomed = [pid for pids in older.values() for pid in pids]
        signal_all(doomed, signal.SIGKILL)
        survivors = wait_gone(doomed, KILLED_EXIT_SECONDS)
        if survivors:
            raise LaunchError(
                f"processes {survivors} of run {run_id}'s generations {sorted(older)} survived "
                f"SIGKILL for {KILLED_EXIT_SECONDS:g} s (blocked in uninterruptible I/O? see "
                f"/proc/<pid>/stack); generation {generation} starts only once they are gone: "
                "fix what they are blocked on, or reboot the node"
            )
        return older

    def plan_agents(
        self,
        spec: JobSpec,
        workdir: Path,
        run_id: str,
        attempt: AttemptPaths,
        hosts: list[str],
        pinned: str | None = None,
    ) -> tuple[list[Agent], Rendezvous | None]:
        """One torchrun agent per node; several meet through c10d hosted by node 0's agent.
        `pinned`: the devices the scheduler placed the gang on (CUDA_VISIBLE_DEVICES form, node
        0's first), which win over the environment's."""
        rendezvous = (
            Rendezvous(
                endpoint=f"{RENDEZVOUS_HOST}:{free_port()}",
                run_id=run_id,
                generation=attempt.generation,
                nodes=len(hosts),
            )
            if len(hosts) > 1
            else None
        )
        visible = pinned or spec.environment.env.get(CUDA_DEVICES, os.environ.get(CUDA_DEVICES))
        agents = []
        for node, host in enumerate(hosts):
            paths = attempt.node(node)
            paths.folder.mkdir(parents=True, exist_ok=True)
            paths.tmp.mkdir(exist_ok=True)
            # The run's own TMPDIR: what torchrun and the ranks put in temporary files is the
            # run's, and the cleaner removes it when the run ends (control/cleaner.py).
            env = {ENV_NODE: str(node), "TMPDIR": str(paths.tmp)}
            if spec.resources.device_type == "cuda" and len(hosts) > 1:
                per_node = spec.resources.devices_per_node
                env[CUDA_DEVICES] = node_devices(visible, node, per_node)
            argv = torchrun_argv(
                spec,
                workdir,
                log_dir=paths.rank_logs,
                rendezvous=rendezvous,
                hosts_rendezvous=node == 0,
            )
            agents.append(
                Agent(
                    node=node,
                    host=host,
                    argv=agent_argv(host, argv),
                    env=env,
                    log=str(paths.torchrun_log),
                )
            )
        return agents, rendezvous

    def launch(
        self,
        *,
        spec: JobSpec,
        run_id: str,
        generation: int,
        root: Path,
        workdir: Path,
        rank_manifest: list[RankEntry],
        extra_env: dict[str, str] | None = None,
    ) -> WorkerGroup:
        return self.start_group(spec=spec, run_id=run_id, generation=generation, root=root,
                                workdir=workdir, rank_manifest=rank_manifest,
                                extra_env=extra_env)  # fmt: skip

    # -- warm standby (executors/standby.py) -----------------------------------------------------

    def prepare_standby(self, **launch: Any) -> int | None:
        """Start the next generation's group as a warm standby (the arguments are `launch`'s);
        its supervisor pid, or None when one is already there."""
        return standby.prepare(self, **launch)

    def activate_standby(
        self,
        *,
        root: Path,
        run_id: str,
        generation: int,
        rank_manifest: list[RankEntry],
        extra_env: dict[str, str],
    ) -> WorkerGroup | str | None:
        """Launch `generation` by activating its standby (`ready_ranks`: how many of its ranks
        were waiting); None when there is none, why not when it cannot be used (discarded)."""
        return standby.activate(root, run_id, generation, rank_manifest, extra_env)

    def discard_standbys(self, root: Path, run_id: str) -> list[int]:
        """Kill every standby of the run (the generations discarded)."""
        return standby.discard(root, run_id)

    def start_group(
        self,
        *,
        spec: JobSpec,
        run_id: str,
        generation: int,
        root: Path,
        workdir: Path,
        rank_manifest: list[RankEntry],
        extra_env: dict[str, str] | None = None,
        as_standby: bool = False,
    ) -> WorkerGroup:
        """Start generation `generation`'s supervisor; `as_standby` starts it as a warm standby
        (its ranks wait for an activation, and it is not launched until then)."""
        paths = run_paths(root, run_id)
        attempt = paths.attempt(generation)
        attempt.folder.mkdir(parents=True, exist_ok=True)
        if not paths.spec_file.exists():
            paths.spec_file.write_text(spec.canonical_json())
        attempt.rank_manifest_file.write_text(encode_rank_manifest(rank_manifest))
        hosts = node_hosts(rank_manifest, spec.resources.nodes)
        pinned = (extra_env or {}).get(CUDA_DEVICES)
        agents, rendezvous = self.plan_agents(spec, workdir, run_id, attempt, hosts, pinned)
        tags = generation_tags(root, run_id, generation)
        plan = AgentsPlan(
            agents=agents,
            tags=tags,
            exit_file=str(attempt.exit_status_file),
            node_exits_file=str(attempt.node_exits_file),
            rendezvous_endpoint=rendezvous.endpoint if rendezvous else None,
        )
        attempt.agents_file.write_text(plan.model_dump_json(indent=1))
        env = {
            **os.environ,
            **spec.environment.env,
            ENV_RUN_ID: run_id,
            ENV_GENERATION: str(generation),
            ENV_RUN_DIR: str(paths.folder),
            ENV_SPEC_FILE: str(paths.spec_file),
            ENV_RANK_MANIFEST: str(attempt.rank_manifest_file),
            ENV_PROTOCOL_VERSION: str(PROTOCOL_VERSION),
            # Ranks are processes on few cores; one intra-op thread each avoids oversubscription.
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
            **(extra_env or {}),
            **({ENV_STANDBY: "1"} if as_standby else {}),
        }
        # Scoped worker credentials replace every credential source of the controller's own.
        env = scoped_environment(env)
        argv = [sys.executable, "-m", "runwright.control.supervise", str(attempt.agents_file)]
        # The supervisor alone gets no parent-death signal: the group must outlive a controller
        # restart, and the next controller adopts it by its pid file.
        with open(attempt.supervisor_log, "ab") as log:
            try:
                process = subprocess.Popen(
                    argv,
                    cwd=workdir,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"cannot start the worker group's supervisor: {exc}") from None
        launched = time.time()
        if as_standby:
            standby.record(attempt, process, launched, extra_env or {})
        else:
            attempt.pid_file.write_text(f"{process.pid} {launched}\n")
        return WorkerGroup(
            generation=generation,
            pid=process.pid,
            run=paths,
            nodes=tuple(NodeAgent(a.node, a.host, attempt.node(a.node)) for a in agents),
            tags=tags,
            launched_unix_s=launched,
            process=process,
        )

    # -- the allocation step: this machine is the whole pool, so there is nothing to wait for --

    def refusal(self, spec: JobSpec) -> str | None:
        """CUDA ranks on a machine with fewer NVIDIA GPUs than a node's ranks. CPU ranks are
        never refused: more ranks than cores is slow, not impossible (tests run that way)."""
        res = spec.resources
        if res.device_type != "cuda":
            return None
        # Every node's agent runs here, each on devices of its own (node_devices).
        needed = res.devices_per_node * res.nodes
        gpus = nvidia_gpu_count()
        if needed <= gpus:
            return None
        return (
            f"resources.device_type=cuda with nodes={res.nodes} x devices_per_node="
            f"{res.devices_per_node} = {needed} GPUs on this machine ({socket.gethostname()}), "
            f"which has {gpus} NVIDIA GPU(s): set device_type: cpu, lower nodes or "
            "devices_per_node, or submit to a pool whose executor has GPUs (--pools)"
        )

    def nodes_available(self, spec: JobSpec) -> int | None:
        """Nodes of the spec's shape it could start now (control/membership.py): every node is
        an agent on this machine, so all of them unless the machine cannot run the shape."""
        return spec.resources.nodes if self.refusal(spec) is None else 0

    def request_allocation(
        self,
        *,
        spec: JobSpec,
        run_id: str,
        root: Path,
        request: int,
        exclude_hosts: tuple[str, ...] = (),
        placed_hosts: tuple[str, ...] = (),
    ) -> Allocation:
        """Granted at once with this machine's hosts; a node count it cannot run fails for good
        with `hosts`'s reason (never a run waiting for nothing). Every node is this machine, so
        a placement only pins devices (CUDA_VISIBLE_DEVICES, at launch)."""
        try:
            hosts = self.hosts(spec.resources.nodes)
        except LaunchError as exc:
            return Allocation(
                executor=self.name,
                request=request,
                state=AllocationState.FAILED,
                reason=str(exc),
                code="unplaceable",
                permanent=True,
            )
        return Allocation(
            executor=self.name,
            request=request,
            state=AllocationState.GRANTED,
            hosts=tuple(hosts),
            reason=f"this machine: {', '.join(dict.fromkeys(hosts))}",
        )

    def allocation_status(self, root: Path, run_id: str, request: int) -> Allocation:
        """Nothing is queued locally: a request is granted from the moment it is made."""
        return Allocation(
            executor=self.name,
            request=request,
            state=AllocationState.GRANTED,
            reason="this machine",
        )

    def release_allocation(self, root: Path, run_id: str, request: int) -> Allocation:
        return Allocation(executor=self.name, request=request, state=AllocationState.RELEASED)


def nvidia_gpu_count() -> int:
    """NVIDIA GPUs the driver lists (/proc/driver/nvidia/gpus/), without importing torch."""
    folder = Path("/proc/driver/nvidia/gpus")
    return len(list(folder.iterdir())) if folder.is_dir() else 0
