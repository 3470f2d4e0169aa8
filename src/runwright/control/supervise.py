"""The worker-group supervisor: `python -m runwright.control.supervise AGENTS_FILE`.

One generation is one supervisor, whatever its node count. It reads the plan the executor wrote
(`AgentsPlan`: one torchrun agent per node), starts every agent as its child, each in a process
group of its own (so one node's agent can be signalled, or lost, alone), forwards SIGTERM/SIGINT to
all of them, and once every agent ended writes each agent's exit status (`GroupExit`, in the order
they ended) and then the group's exit status, both atomically, before exiting with the latter.
The controller starts it in a session of its own, so the group outlives a controller crash; a
restarted controller, which is not the parent and cannot wait() for it, reads the files instead.

The group's exit status (`group_exit_code`): 0 only if every agent exited 0; otherwise the status
of the first agent that failed. A generation is one gang: once an agent failed, the others get
`peer_grace_seconds` (30 s by default) to end on their own (their ranks see the lost peer at
their next collective and fail, leaving their own evidence), and are then killed; a gang missing
a member cannot save or step, so there is nothing to wait for after that. Agents the supervisor
signalled (a forwarded stop, or the end of the grace) are marked `stopped`: their exit is the
supervisor's doing, not evidence of their node's failure.

Every agent dies with the supervisor: its parent-death signal (runwright/lifetime.py, set between
fork and exec; this process is single-threaded, so its main thread is the forking thread) SIGKILLs
it when the supervisor exits, and the ranks' own parent-death signals then take them. A killed
supervisor therefore leaves no group training without anyone to report its exit; the executor
sees the missing exit file and treats the group as lost (executors/local.py,
WorkerGroup.repair_lost).

Each agent's command is an argv run on this host. A remote agent (a user's hosts list) is the
same argv behind a command prefix such as `ssh HOST env VAR=...` (the node's variables travel in
it), built by the executor; the supervisor needs nothing more for it.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pydantic import Field

from runwright.control.processes import processes_tagged, signal_all
from runwright.lifetime import die_with_pid
from runwright.records import Record

PEER_GRACE_SECONDS = 30.0
"""The default of `AgentsPlan.peer_grace_seconds`: how long the other agents of a group get to
end on their own once one agent failed, before the supervisor kills them. Their ranks normally
fail within a second (gloo sees the lost peer's sockets close); a rank in a long step notices only
at its next collective."""

SPAWN_FAILED_EXIT = 127
"""An agent whose command could not be started (the shell's `command not found`)."""


class Agent(Record):
    """One node's torchrun agent, as the supervisor starts it."""

    node: int = Field(ge=0)
    """The executor's index of the node (its slot in the allocation)."""
    host: str
    """The host the agent runs on."""
    argv: list[str] = Field(min_length=1)
    """The agent's command line (torchrun, or torchrun behind a remote command prefix)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for this agent alone (its node's tag), on top of the supervisor's."""
    log: str
    """The file the agent's output goes to (appended)."""


class AgentsPlan(Record):
    """What one generation's supervisor runs (`attempts/gen<G>/agents.json`)."""

    agents: list[Agent] = Field(min_length=1)
    """One agent per node, in node order."""
    tags: dict[str, str]
    """The launch-environment variables that mark every process of the generation; with an
    agent's `env` they mark that node's processes."""
    exit_file: str
    """Where the group's exit status goes."""
    node_exits_file: str
    """Where each agent's exit status goes (`GroupExit`)."""
    rendezvous_endpoint: str | None = None
    """`host:port` where the agents meet (c10d, hosted by node 0's agent); None for one node."""
    peer_grace_seconds: float = Field(default=PEER_GRACE_SECONDS, ge=0)
    """How long the other agents get to end on their own once one agent failed."""


class AgentExit(Record):
    """How one node's agent ended."""

    node: int
    exit_code: int
    """Its exit status; negative: killed by that signal."""
    stopped: bool
    """It ended after the supervisor signalled it (a forwarded stop, or a failed peer's grace
    ran out): its exit is not evidence against its node."""


class GroupExit(Record):
    """Every agent's end, in the order they ended, and the group's exit status."""

    exit_code: int
    """`group_exit_code(agents)`."""
    stop_signal: int | None = None
    """The signal the supervisor received and forwarded, if any."""
    agents: list[AgentExit]


def group_exit_code(ended: list[AgentExit]) -> int:
    """0 only if every agent exited 0; otherwise the status of the first one that failed."""
    return next((a.exit_code for a in ended if a.exit_code != 0), 0)


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_exit(path: Path, code: int) -> None:
    write_atomically(path, f"{code}\n")


def read_group_exit(path: Path) -> GroupExit | None:
    """The agents' exits a supervisor recorded; None before it wrote them (or a supervisor that
    was lost, or one from before per-node exits were recorded)."""
    try:
        return GroupExit.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None


HELD_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
"""Held while the agents start, so a stop reaches every one of them."""


def _in_agent(supervisor_pid: int) -> None:
    """In the agent between fork and exec: a blocked signal mask survives exec, so release the
    held signals, and die with the supervisor."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
    die_with_pid(supervisor_pid)


class Supervisor:
    """Runs the agents of one plan and collects how each ended."""

    def __init__(self, plan: AgentsPlan) -> None:
        self.plan = plan
        self.running: dict[int, tuple[Agent, subprocess.Popen[bytes]]] = {}
        self.ended: list[AgentExit] = []
        self.signalled: set[int] = set()
        """Nodes whose agent the supervisor signalled."""
        self.stop_signal: int | None = None

    def forward(self, signum: int, _frame: object = None) -> None:
        self.stop_signal = signum
        for pid, (agent, _proc) in list(self.running.items()):
            self.signalled.add(agent.node)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def start(self) -> None:
        me = os.getpid()
        for agent in self.plan.agents:
            with open(agent.log, "ab") as log:
                try:
                    proc = subprocess.Popen(
                        agent.argv,
                        env={**os.environ, **agent.env},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        process_group=0,
                        preexec_fn=lambda: _in_agent(me),
                    )
                except OSError as exc:
                    log.write(f"runwright supervisor: cannot start the agent: {exc}\n".encode())
                    self.ended.append(
                        AgentExit(node=agent.node, exit_code=SPAWN_FAILED_EXIT, stopped=False)
                    )
                    return
            self.running[proc.pid] = (agent, proc)

    def kill_rest(self) -> None:
        """SIGKILL every agent still running, and every process of its node (the ranks sit in
        sessions of their own; their parent-death signals take them too)."""
        for pid, (agent, _proc) in list(self.running.items()):
            self.signalled.add(agent.node)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            signal_all(processes_tagged({**self.plan.tags, **agent.env}), signal.SIGKILL)

    def _reaped(self, pid: int, status: int) -> bool:
        """Record an ended agent; False for a pid that is not one (nothing else is a child)."""
        entry = self.running.pop(pid, None)
        if entry is None:
            return False
        agent, proc = entry
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code  # reaped here, so Popen must not wait for it again
        stopped = agent.node in self.signalled or self.stop_signal is not None
        self.ended.append(AgentExit(node=agent.node, exit_code=code, stopped=stopped))
        return True

    def wait(self) -> GroupExit:
        deadline: float | None = None
        if self.ended and self.running:  # an agent could not be started: the gang is broken
            self.kill_rest()
        while self.running:
            if deadline is None:
                pid, status = os.wait()  # retried after a forwarded signal (PEP 475)
            else:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    if time.monotonic() >= deadline:
                        self.kill_rest()
                        deadline = None
                    else:
                        time.sleep(0.05)
                    continue
            if not self._reaped(pid, status):
                continue
            # The first failure starts the others' grace (once: not after a stop or a kill).
            failed = self.ended[-1].exit_code != 0
            quiet = self.stop_signal is None and not self.signalled
            if failed and quiet and deadline is None and self.running:
                deadline = time.monotonic() + self.plan.peer_grace_seconds
        return GroupExit(
            exit_code=group_exit_code(self.ended),
            stop_signal=self.stop_signal,
            agents=self.ended,
        )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m runwright.control.supervise AGENTS_FILE", file=sys.stderr)
        return 2
    plan = AgentsPlan.model_validate_json(Path(argv[0]).read_bytes())
    supervisor = Supervisor(plan)
    # A stop that arrives while the agents start is held until all of them can get it.
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    signal.signal(signal.SIGTERM, supervisor.forward)
    signal.signal(signal.SIGINT, supervisor.forward)
    supervisor.start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
    ended = supervisor.wait()
    write_atomically(Path(plan.node_exits_file), ended.model_dump_json(indent=1))
    write_exit(Path(plan.exit_file), ended.exit_code)
    return ended.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
