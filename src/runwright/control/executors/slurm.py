"""The Slurm executor: a run's allocation is one Slurm job, its generations are steps in it.

What runs where:
- the controller (any host with Slurm's clients and the run folder) asks for an allocation with
  `sbatch` and follows it with `squeue` (and `sacct` where accounting is on); it launches a
  generation by writing its launch request into the run folder, and stops one with `scancel`;
- the job's batch script is the agent (slurm_job.py) on the first node: it checks that every node
  sees the run folder, then runs each generation the controller asks for as one `srun` step;
- each step runs `slurm_node run` on every node: one torchrun agent per node, c10d rendezvous
  hosted by node 0, and a record of the node rank the rendezvous gave it and its exit status.

Nothing here reads /proc or a pid: a controller on another host adopts a running generation
from its launch request (job id, request, generation) and follows it through Slurm, so the run
folder must be on a filesystem the controller and every node share (docs/control.md).

The allocation step (sbatch, the job's states, scancel) is slurm_allocation.py's; this module
launches, follows, stops and reads the evidence of the generations in it.
"""

import time
from pathlib import Path

from runwright.control.executors import slurm_cli as cli
from runwright.control.executors import slurm_group as groups
from runwright.control.executors import slurm_states as states
from runwright.control.executors.protocol import (
    EXIT_LOST,
    Allocation,
    FailureEvidence,
    GroupHandle,
    LostSupervisor,
)
from runwright.control.executors.slurm_allocation import SlurmAllocator
from runwright.control.executors.slurm_group import SlurmGroup
from runwright.control.pools import Pool
from runwright.errors import LaunchError
from runwright.protocol import RankEntry
from runwright.spec import JobSpec

KILLED_STEP_SECONDS = 60.0
"""How long a killed step may take to leave before the executor gives up on it."""


def step_name(generation: int) -> str:
    return f"rw-gen{generation:05d}"


def _slurm(group: GroupHandle) -> SlurmGroup:
    if not isinstance(group, SlurmGroup):
        raise TypeError(f"the Slurm executor cannot act on {type(group).__name__}")
    return group


class SlurmExecutor:
    """Runs a pool's generations as steps of one Slurm job per allocation request."""

    name = "slurm"

    def __init__(self, pool_name: str, pool: Pool) -> None:
        self.allocations = SlurmAllocator(pool_name, pool)

    # -- the allocation step (slurm_allocation.py) -----------------------------------------------

    def refusal(self, spec: JobSpec) -> str | None:
        return self.allocations.refusal(spec)

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
        return self.allocations.request_allocation(
            spec=spec,
            run_id=run_id,
            root=root,
            request=request,
            exclude_hosts=exclude_hosts,
            placed_hosts=placed_hosts,
        )

    def allocation_status(self, root: Path, run_id: str, request: int) -> Allocation:
        return self.allocations.allocation_status(root, run_id, request)

    def release_allocation(self, root: Path, run_id: str, request: int) -> Allocation:
        return self.allocations.release_allocation(root, run_id, request)

    # -- generations ---------------------------------------------------------------------------

    def hosts(self, nodes: int) -> list[str]:
        raise LaunchError(
            "Slurm places a run's nodes when it grants the allocation: ask request_allocation, "
            "whose granted Allocation names the hosts"
        )

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
    ) -> SlurmGroup:
        # The newest request with a job: granted when the controller launches, though the job
        # may have ended since; then the generation is lost at once and recovered as such.
        allocation = self.allocations.newest(root, run_id)
        if allocation is None or allocation.engine_id is None:
            raise LaunchError(
                f"run {run_id} has no Slurm job to launch generation {generation} into"
            )
        return groups.write_launch(
            spec=spec,
            run_id=run_id,
            generation=generation,
            root=root,
            workdir=workdir,
            rank_manifest=rank_manifest,
            extra_env=extra_env,
            request=allocation.request,
            job_id=allocation.engine_id,
            hosts=allocation.hosts,
        )

    def adopt(self, root: Path, run_id: str, generation: int) -> SlurmGroup | None:
        return groups.adopt(root, run_id, generation)

    def launched_generations(self, root: Path, run_id: str) -> list[int]:
        return groups.launched_generations(root, run_id)

    def poll(self, group: GroupHandle) -> int | None:
        """The agent's exit status for the generation; None while its job runs; EXIT_LOST once
        the job has ended (ENDED_GRACE_SECONDS ago) without one."""
        slurm = _slurm(group)
        code = slurm.exit_status()
        if code is not None:
            return code
        try:
            info = self.allocations.job(slurm.job_id)
        except cli.SlurmError:
            return None  # slurmctld unreachable and never answered: nothing to conclude yet
        if info is not None and (states.is_running(info.state) or states.is_pending(info.state)):
            self.allocations.still_running(slurm.job_id)
            return None
        if not self.allocations.ended_long_enough(slurm.job_id):
            return None
        code = slurm.exit_status()
        return EXIT_LOST if code is None else code

    def _step(self, slurm: SlurmGroup) -> str | None:
        try:
            return cli.steps_of(slurm.job_id).get(step_name(slurm.generation))
        except cli.SlurmError:
            return None

    def _wait_exit(self, slurm: SlurmGroup, seconds: float) -> int | None:
        deadline = time.monotonic() + seconds
        while True:
            code = slurm.exit_status()
            info = self.allocations.job(slurm.job_id, fresh=True)
            if code is not None or info is None or self.allocations.ended_state(info.state):
                return code
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)

    def stop(
        self,
        group: GroupHandle,
        grace_seconds: float,
        worker_pids: list[int] | None = None,
    ) -> int | None:
        """SIGTERM the generation's step (ranks save at a step boundary), SIGKILL it after the
        grace, and wait for the agent's exit status. `worker_pids` live on other hosts: unused."""
        slurm = _slurm(group)
        code = slurm.exit_status()
        if code is not None:
            return code
        step = self._step(slurm)
        if step and grace_seconds > 0:
            self.allocations.cancel(step, "TERM")
            code = self._wait_exit(slurm, grace_seconds)
            if code is not None:
                return code
            step = self._step(slurm)
        if step:
            self.allocations.cancel(step, "KILL")
        code = self._wait_exit(slurm, KILLED_STEP_SECONDS)
        return code if code is not None else self.poll(slurm)

    def repair_lost(self, group: GroupHandle) -> LostSupervisor:
        """The job ended without the generation's exit status (NODE_FAIL, a time limit, a
        scancel, the agent killed): say how, and which of its nodes Slurm reports lost."""
        slurm = _slurm(group)
        info = self.allocations.job(slurm.job_id, fresh=True)
        if info is not None and not self.allocations.ended_state(info.state):
            self.allocations.cancel(slurm.job_id)  # the agent is gone but the job holds nodes
        state = info.state if info else "UNKNOWN"
        lost = self._lost_hosts(slurm)
        return LostSupervisor(
            supervisor_pid=slurm.pid,
            supervisor=f"Slurm job {slurm.job_id}",
            cause=states.ended_words(slurm.job_id, state, info.reason if info else "").split(
                f"job {slurm.job_id} ", 1
            )[-1]
            + f" before generation {slurm.generation}'s exit status was written",
            node_restarted=bool(lost) or state in states.LOST_NODE_STATES,
            killed_pids=(),
            lost_hosts=lost,
        )

    def _lost_hosts(self, slurm: SlurmGroup) -> tuple[str, ...]:
        """Nodes that left no exit status and that Slurm reports down or not responding."""
        silent = groups.silent_nodes(slurm)
        if not silent:
            return ()
        try:
            found = cli.node_states(silent)
        except cli.SlurmError:
            return ()
        return tuple(h for h in silent if states.is_lost_node_state(found.get(h, "")))

    def evidence(self, group: GroupHandle, lost: LostSupervisor | None = None) -> FailureEvidence:
        slurm = _slurm(group)
        lost_hosts = lost.lost_hosts if lost and lost.lost_hosts else self._lost_hosts(slurm)
        return groups.evidence(slurm, lost, lost_hosts)

    def kill_generations_below(
        self, root: Path, run_id: str, generation: int
    ) -> dict[int, list[int]]:
        """Cancel the step of every older generation still running in its job (the agent also
        never starts one beside another), and return once they are gone: generation -> [job]."""
        killed: dict[int, list[int]] = {}
        for older in groups.launched_generations(root, run_id):
            group = groups.adopt(root, run_id, older) if older < generation else None
            if group is None or group.exit_status() is not None:
                continue
            step = self._step(group)
            if step is None:
                continue
            self.allocations.cancel(step, "KILL")
            deadline = time.monotonic() + KILLED_STEP_SECONDS
            while self._step(group) is not None:
                if time.monotonic() >= deadline:
                    raise LaunchError(
                        f"Slurm step {step} of run {run_id}'s generation {older} outlived "
                        f"scancel for {KILLED_STEP_SECONDS:g} s; generation {generation} starts "
                        "only once it is gone: see `scontrol show step` and slurmd's log"
                    )
                time.sleep(0.2)
            killed[older] = [group.pid]
        return killed
