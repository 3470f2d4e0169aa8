"""A launched generation on this host (the local executor's, executors/local.py): the tags every
process of it carries in its launch environment, its processes found by them, its node agents,
stopping it, repairing a lost supervisor, and adopting a group an earlier controller left.
"""

import contextlib
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from runwright.control.executors.protocol import EXIT_LOST, LostSupervisor
from runwright.control.processes import (
    boot_time_unix_s,
    environs,
    is_alive,
    kill_tree,
    processes_tagged,
    signal_all,
    wait_gone,
)
from runwright.control.supervise import AgentsPlan
from runwright.layout import AttemptPaths, NodePaths, RunPaths, parse_generation, run_paths
from runwright.lifetime import environ_of, has_tags
from runwright.protocol import ENV_GENERATION, ENV_NODE, ENV_RUN_DIR

KILLED_EXIT_SECONDS = 10.0
"""How long SIGKILLed processes get to leave the kernel before the executor reports them as
survivors (SIGKILL acts at once unless a process is blocked in uninterruptible I/O)."""


def generation_tags(root: Path, run_id: str, generation: int) -> dict[str, str]:
    """The launch-environment variables that mark every process of one generation."""
    return {ENV_RUN_DIR: str(run_paths(root, run_id).folder), ENV_GENERATION: str(generation)}


def node_tags(root: Path, run_id: str, generation: int, node: int) -> dict[str, str]:
    """The launch-environment variables that mark the processes of one node of a generation:
    its agent and the ranks it started."""
    return {**generation_tags(root, run_id, generation), ENV_NODE: str(node)}


def generation_processes(root: Path, run_id: str) -> dict[int, list[int]]:
    """generation -> live processes of run `run_id` on this machine, found by their tags."""
    folder = str(run_paths(root, run_id).folder)
    found: dict[int, list[int]] = {}
    for pid, env in environs():
        if env.get(ENV_RUN_DIR) == folder and (env.get(ENV_GENERATION) or "").isdigit():
            found.setdefault(int(env[ENV_GENERATION]), []).append(pid)
    return found


@dataclass(frozen=True)
class NodeAgent:
    """One node of a launched group: its index, host and files."""

    node: int
    host: str
    paths: NodePaths


@dataclass
class WorkerGroup:
    """A launched generation: its supervisor process, its nodes' agents, files and tags."""

    generation: int
    pid: int
    run: RunPaths
    nodes: tuple[NodeAgent, ...]
    tags: dict[str, str] = field(default_factory=dict)
    """generation_tags() of this generation; empty matches nothing by tag."""
    launched_unix_s: float | None = None
    process: subprocess.Popen[bytes] | None = None
    """Set when this controller launched the group; None for an adopted one."""
    ready_ranks: int | None = None
    """For a group launched by activating a warm standby: its ranks that were waiting."""

    @property
    def attempt(self) -> AttemptPaths:
        return self.run.attempt(self.generation)

    @property
    def log_ref(self) -> str:
        """One node's agent log; the folder of every node's logs for several."""
        if len(self.nodes) == 1:
            return str(self.nodes[0].paths.torchrun_log)
        return str(self.attempt.nodes)

    def _supervisor_alive(self) -> bool:
        # A recycled pid is not our supervisor: believe the pid only while it carries the tag,
        # or while its environment cannot be read (then the pid is all there is to go on).
        if not is_alive(self.pid):
            return False
        return not self.tags or environ_of(self.pid) is None or has_tags(self.pid, self.tags)

    def poll(self) -> int | None:
        """The group's exit status once the supervisor wrote it; None while the supervisor runs;
        EXIT_LOST when the supervisor ended without writing it."""
        if self.process is not None:
            if self.process.poll() is None:
                return None
        elif self._supervisor_alive():
            return None
        exit_file = self.attempt.exit_status_file
        if exit_file.exists():
            try:
                return int(exit_file.read_text().strip())
            except ValueError:
                return EXIT_LOST
        return EXIT_LOST

    def members(self) -> list[int]:
        """Live processes of this generation, by tag (wherever they were re-parented to)."""
        return processes_tagged(self.tags) if self.tags else []

    def stop(self, grace_seconds: float, worker_pids: list[int] | None = None) -> int | None:
        """SIGTERM every process of the group, SIGKILL what is left after the grace period, and
        wait until they are gone."""
        kill_tree(self.pid, [*(worker_pids or []), *self.members()], grace_seconds)
        signal_all(self.members(), signal.SIGKILL)  # tagged ones started during the grace
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        wait_gone(self.members(), KILLED_EXIT_SECONDS)
        return self.poll()

    def repair_lost(self) -> LostSupervisor:
        """The supervisor ended without an exit status: kill what is left of the generation.

        Killing, not adopting, is the repair. Without its supervisor nobody can wait() for the
        agents, so their exit statuses (the only trustworthy end of the generation) are gone;
        and every agent dies with its supervisor anyway (its parent-death signal), taking the
        ranks with it, so a group still complete enough to adopt exists only where parent-death
        signals are missing, and then its ranks have lost the agents that would stop them all
        when one fails. The next generation restarts from the newest committed checkpoint: the
        loss is the steps since it, and those are bounded by the checkpoint interval."""
        if self.process is not None:
            code = self.process.returncode
            cause = (
                f"was killed by {signal.Signals(-code).name}"
                if code is not None and code < 0 and -code in signal.valid_signals()
                else f"exited with code {code} without writing its exit status"
            )
        else:
            cause = "vanished without an exit status (killed, or crashed)"
        booted = boot_time_unix_s()
        restarted = (
            booted is not None
            and self.launched_unix_s is not None
            and booted > self.launched_unix_s
        )
        if restarted:
            cause = "is gone: the machine restarted after the group was launched"
        left = self.members()
        signal_all(left, signal.SIGKILL)
        wait_gone(left, KILLED_EXIT_SECONDS)
        return LostSupervisor(
            supervisor_pid=self.pid,
            cause=cause,
            node_restarted=restarted,
            killed_pids=tuple(sorted(left)),
        )


def nodes_of(attempt: AttemptPaths) -> tuple[NodeAgent, ...]:
    """The nodes of a launched generation, from its supervisor's plan; a generation launched
    before plans were written ran one agent on this host."""
    try:
        plan = AgentsPlan.model_validate_json(attempt.agents_file.read_bytes())
    except (OSError, ValueError):
        here = socket.gethostname()
        return tuple(NodeAgent(p.node, here, p) for p in attempt.node_paths())
    return tuple(NodeAgent(a.node, a.host, attempt.node(a.node)) for a in plan.agents)


def adopt_group(root: Path, run_id: str, generation: int) -> WorkerGroup | None:
    """Find generation `generation`'s group left by an earlier controller, if it still runs or
    left an exit status."""
    run = run_paths(root, run_id)
    attempt = run.attempt(generation)
    try:
        fields = attempt.pid_file.read_text().split()
        pid = int(fields[0])
        launched = float(fields[1]) if len(fields) > 1 else None
    except (OSError, ValueError, IndexError):
        return None
    return WorkerGroup(
        generation=generation,
        pid=pid,
        run=run,
        nodes=nodes_of(attempt),
        tags=generation_tags(root, run_id, generation),
        launched_unix_s=launched,
    )


def launched_generations(root: Path, run_id: str) -> list[int]:
    """Generations whose group was launched (they left a pid file), oldest first."""
    paths = run_paths(root, run_id)
    if not paths.attempts.is_dir():
        return []
    found = (parse_generation(p.name) for p in paths.attempts.iterdir())
    return sorted(g for g in found if g is not None and paths.attempt(g).pid_file.exists())
