"""The seam between the controller and whatever runs the workers (ARCHITECTURE.md, "Executors").

An executor carries out one generation of a run on some engine: it launches the generation's
worker group, finds one an earlier controller launched, stops it, reports its exit status, and
hands over the failure evidence only it can read (for local torchrun: the per-rank error files,
torchrun's own log, the ranks' stderr, what it found of a lost supervisor). The controller, the
recovery sequence and the failure classifier know nothing else of it: they hold a `GroupHandle`
and call the `Executor` with it.

The records here are the executor-neutral form of that evidence; `failures.classify` decides on
a `FailureEvidence` alone.

Before a generation runs, the engine must place the whole gang: the allocation step. It never
blocks the controller: `request_allocation` asks once per (run, request number) and returns, and
`allocation_status` is polled by later passes, so an engine's queue (Slurm's PENDING with its
reason, a Kubernetes pod group waiting for nodes) maps onto ALLOCATING with the engine's reason in
words. `refusal` is asked before a run is even recorded: a spec this engine can never place is
refused at submit, never left waiting without a reason.
"""

from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import Field

from runwright.protocol import RankEntry
from runwright.records import Record
from runwright.spec import JobSpec

EXIT_LOST = -1000
"""`Executor.poll` result for a group whose supervisor ended without recording the group's exit
status (the supervisor was killed, or the machine restarted): the real exit status is lost."""


class ErrorRecord(Record):
    """One rank's own record of the exception that ended it."""

    rank: int = Field(description="The global rank that wrote it.")
    message: str = Field(description="The exception's `Name: text` line.")
    timestamp_s: float = Field(description="When the rank failed (unix seconds; 0 if unknown).")
    traceback: str = Field(description="The formatted traceback, its last 4,000 characters.")


class LostSupervisor(Record):
    """What the executor found and did when a group's supervisor ended without an exit status."""

    supervisor_pid: int = Field(description="The supervisor process that is gone.")
    cause: str = Field(description="How the supervisor ended, as far as this machine can tell.")
    node_restarted: bool = Field(
        description="The machine booted after the group was launched: the node, not only the "
        "process, went."
    )
    killed_pids: tuple[int, ...] = Field(
        description="Processes of the generation still alive that the executor killed."
    )
    supervisor: str = Field(
        default="",
        description="How the engine names what supervised the group (`Slurm job 12`); empty "
        "for a local supervisor process, named by its pid.",
    )
    lost_hosts: tuple[str, ...] = Field(
        default=(), description="Nodes the engine reports lost with the group, if any."
    )

    @property
    def message(self) -> str:
        who = self.supervisor or f"pid {self.supervisor_pid}"
        return f"the worker group's supervisor ({who}) {self.cause}"

    @property
    def evidence(self) -> str:
        left = (
            f"the executor killed {len(self.killed_pids)} process(es) of the generation still "
            f"running without it: {list(self.killed_pids)}"
            if self.killed_pids
            else "no process of the generation was left (parent-death signals took them)"
        )
        return f"supervisor exit file missing; {left}"


class NodeExit(Record):
    """How one node's launcher (its torchrun agent) ended, with what it ran."""

    node: int = Field(description="The executor's index of the node (its allocation slot).")
    host: str = Field(description="The host the node's agent ran on.")
    exit_code: int = Field(description="The agent's exit status; negative: killed by a signal.")
    stopped: bool = Field(
        description="The agent ended after the group's supervisor signalled it (a stop, or a "
        "failed peer): its exit is not evidence against its node."
    )
    ranks: tuple[int, ...] = Field(description="The global ranks the agent ran.")


class FailureEvidence(Record):
    """Everything an executor can tell about how a generation's group ended, beyond its exit
    status: what `failures.classify` decides on and the diagnostics bundle keeps."""

    launcher_log: str = Field(
        default="",
        description="The tail of the launcher's own output (torchrun's failure summary), up to "
        "20,000 characters.",
    )
    error_records: tuple[ErrorRecord, ...] = Field(
        default=(), description="The ranks' error records, earliest first."
    )
    rank_tracebacks: dict[int, str] = Field(
        default_factory=dict,
        description="rank -> the last traceback on its stderr (a rank that failed without an "
        "error record).",
    )
    lost: LostSupervisor | None = Field(
        default=None,
        description="Set when the supervisor was lost and the executor repaired the group.",
    )
    log_tails: dict[str, str] = Field(
        default_factory=dict,
        description="log name -> its last 4,000 bytes, for the diagnostics bundle.",
    )
    lost_hosts: tuple[str, ...] = Field(
        default=(),
        description="Nodes of the group the engine reports lost (down, not responding, failed) "
        "that left no exit status of their own: the failure's cause, whatever the survivors "
        "logged about their vanished peers.",
    )
    node_exits: tuple[NodeExit, ...] = Field(
        default=(),
        description="Each node's agent, in the order they ended (empty where the executor "
        "cannot tell, e.g. a lost supervisor).",
    )


class AllocationState(StrEnum):
    """Where one allocation request stands on its engine."""

    PENDING = "pending"
    """Asked for, not yet placed (queued, nodes booting, the engine's agent not yet ready)."""
    GRANTED = "granted"
    """Every node of the gang is the run's, and the engine is ready to launch generations on it."""
    FAILED = "failed"
    """The request ended without (or lost) its nodes: refused, cancelled, timed out, a node
    failed. `permanent` says whether asking again can help."""
    RELEASED = "released"
    """The run gave it back (`release_allocation`)."""


class Allocation(Record):
    """One allocation request of a run, as its engine reports it; stored in the run's
    `allocation` field and its ALLOCATION_* events."""

    executor: str
    """The engine's executor name (`local`, `slurm`)."""
    request: int
    """Which request of the run this is (1 for the first; one more each time the run enters
    ALLOCATING), so every controller names the same request the same way."""
    state: AllocationState
    """pending, granted, failed or released."""
    hosts: tuple[str, ...] = ()
    """The granted nodes' names, in the engine's node order (node 0 first); empty until granted."""
    reason: str = ""
    """Why it is where it is, in words a user can act on (e.g. `waiting in Slurm partition debug:
    Resources (the nodes are busy), 2 nodes requested`)."""
    code: str = ""
    """The engine's own code for that reason (Slurm's `Resources`, `Priority`, `NODE_FAIL`)."""
    engine_id: str | None = None
    """The engine's id of the allocation (the Slurm job id); None before the engine has one."""
    permanent: bool = False
    """For a failed request: asking again cannot help (the spec does not fit, the run folder is
    not shared with the nodes); the run fails instead of going back to the queue."""
    lost_hosts: tuple[str, ...] = ()
    """Nodes the engine reports failed while the allocation held them (Slurm's NODE_FAIL)."""

    @property
    def held(self) -> bool:
        """The engine may still hold nodes or a queue entry for it: release it when done."""
        return self.state in (AllocationState.PENDING, AllocationState.GRANTED)


class GroupHandle(Protocol):
    """One launched generation, as the controller holds it; only its executor looks inside."""

    @property
    def generation(self) -> int: ...

    @property
    def pid(self) -> int:
        """The process (or job) that supervises the group, as the launch events record it."""
        ...

    @property
    def log_ref(self) -> str:
        """Where the group's own log is (a path or URL), for the attempt record."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Runs generations of runs on one engine (local torchrun first; Slurm, Kubernetes later).

    Every method may be repeated by a restarted controller: `launch` is guarded by the store's
    claim on the attempt, and the rest only observe or end processes of a named generation."""

    name: str
    """Recorded in the run's allocation, e.g. `local`."""

    def hosts(self, nodes: int) -> list[str]:
        """The hosts a `nodes`-node generation runs on; LaunchError if this engine cannot."""
        ...

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
    ) -> GroupHandle:
        """Start generation `generation`'s worker group; LaunchError if it cannot start."""
        ...

    def adopt(self, root: Path, run_id: str, generation: int) -> GroupHandle | None:
        """The group of `generation` an earlier launch left, if it runs or left an exit status."""
        ...

    def launched_generations(self, root: Path, run_id: str) -> list[int]:
        """Generations of the run that were launched, oldest first."""
        ...

    def kill_generations_below(
        self, root: Path, run_id: str, generation: int
    ) -> dict[int, list[int]]:
        """End every process of a generation older than `generation` and return once they are
        gone: generation -> the processes ended (LaunchError naming any that survive)."""
        ...

    def poll(self, group: GroupHandle) -> int | None:
        """The group's exit status; None while it runs; EXIT_LOST when the status is lost."""
        ...

    def stop(
        self, group: GroupHandle, grace_seconds: float, worker_pids: list[int] | None = None
    ) -> int | None:
        """Ask every process of the group to end, kill what is left after `grace_seconds`, and
        return its exit status once it is gone. `worker_pids` are pids the ranks reported."""
        ...

    def repair_lost(self, group: GroupHandle) -> LostSupervisor:
        """The group's supervisor is gone (poll said EXIT_LOST): end what is left of it."""
        ...

    def evidence(self, group: GroupHandle, lost: LostSupervisor | None = None) -> FailureEvidence:
        """What the ended group left behind; `lost` is repair_lost's record, if it ran."""
        ...

    # -- the allocation step ---------------------------------------------------------------------

    def refusal(self, spec: JobSpec) -> str | None:
        """Why this engine can never run `spec` (more nodes than it has, a device kind it lacks),
        in words naming the field and the fix; None when it can, perhaps after a wait."""
        ...

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
        """Ask the engine for the gang of request number `request`, without waiting for it.
        Idempotent per (run, request), across controller restarts and hosts: asking again
        returns the same request's status and never queues a second one. `exclude_hosts` are
        nodes the run lost before; the engine avoids them when it has enough others.
        `placed_hosts` are the nodes runwright's scheduler placed the gang on (its admission,
        control/admission.py); an engine that chooses nodes is held to them."""
        ...

    def allocation_status(self, root: Path, run_id: str, request: int) -> Allocation:
        """Where request `request` stands now (cheap: a controller polls it every pass)."""
        ...

    def release_allocation(self, root: Path, run_id: str, request: int) -> Allocation:
        """Give request `request` back (dequeue it, or free its nodes); idempotent, and safe for
        a request that never reached the engine."""
        ...
