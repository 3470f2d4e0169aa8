"""The seam between the controller and whatever runs the workers (ARCHITECTURE.md, "Executors").

An executor carries out one generation of a run on some engine: it launches the generation's
worker group, finds one an earlier controller launched, stops it, reports its exit status, and
hands over the failure evidence only it can read (for local torchrun: the per-rank error files,
torchrun's own log, the ranks' stderr, what it found of a lost supervisor). The controller, the
recovery sequence and the failure classifier know nothing else of it: they hold a `GroupHandle`
and call the `Executor` with it.

The records here are the executor-neutral form of that evidence; `failures.classify` decides on
a `FailureEvidence` alone.
"""

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

    @property
    def message(self) -> str:
        return f"the worker group's supervisor (pid {self.supervisor_pid}) {self.cause}"

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
    node_exits: tuple[NodeExit, ...] = Field(
        default=(),
        description="Each node's agent, in the order they ended (empty where the executor "
        "cannot tell, e.g. a lost supervisor).",
    )


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
