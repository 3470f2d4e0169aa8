"""The allocation step on Slurm: one allocation request of a run is one Slurm job.

`sbatch` asks for the whole gang with the pool's settings; `squeue` (and `sacct` where accounting
is on) follows it; the job's agent (slurm_job.py) says when every node is checked and ready;
`scancel` gives it back. A request reaches Slurm at most once: its folder is claimed (O_EXCL)
before `sbatch`, the job id is recorded after it, and a controller that finds a claim without a
job id looks the job up by its name (`rw-<run id>-r<request>`) before it would submit again. Jobs
are submitted `--no-requeue`: after a lost node, a time limit or a preemption the controller
decides (classified, counted against the run's policy) and asks again with a new request,
excluding the lost nodes where the partition has enough others.
"""

import os
import secrets
import shlex
import sys
import time
from pathlib import Path

from runwright.control.executors import slurm_cli as cli
from runwright.control.executors import slurm_states as states
from runwright.control.executors.protocol import Allocation, AllocationState
from runwright.control.executors.slurm_group import read_json
from runwright.control.executors.slurm_node import write_json
from runwright.control.pools import Pool
from runwright.layout import AllocationPaths, run_paths
from runwright.spec import JobSpec

SLURM_POLL_SECONDS = 2.0
"""A controller asks slurmctld about one job at most this often (each pass reads the run folder;
slurmctld is shared by the whole cluster)."""
CLAIM_SECONDS = 60.0
"""How long a claimed request without a job id is taken as another controller's `sbatch` in
flight, before this one concludes the claimer died first and submits itself."""
ENDED_GRACE_SECONDS = 10.0
"""How long after Slurm reports a job ended the controller still waits for the agent's last
files to appear (a shared filesystem's attribute cache can lag behind the writer)."""


def job_name(run_id: str, request: int) -> str:
    return f"rw-{run_id}-r{request}"


def sbatch_argv(
    *,
    spec: JobSpec,
    pool: Pool,
    run_id: str,
    paths: AllocationPaths,
    workdir: Path,
    exclude_hosts: tuple[str, ...] = (),
    placed_hosts: tuple[str, ...] = (),
    python: str = sys.executable,
) -> list[str]:
    """The `sbatch` command of one allocation request (pure). `workdir` is the batch script's
    folder (the run folder: it exists on every node); ranks run in the run's own workdir.
    `placed_hosts`, runwright's admission placement, become `--nodelist`: Slurm starts the job
    on exactly those nodes, or holds it with its own reason while they are busy."""
    res = spec.resources
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_name(run_id, paths.request)}",
        f"--nodes={res.nodes}",
        "--ntasks-per-node=1",
        f"--output={paths.agent_log}",
        f"--chdir={workdir}",
        "--no-requeue",
        "--export=ALL",
    ]
    if res.device_type == "cuda":
        argv.append(f"--gres={pool.gres}:{res.devices_per_node}")
    else:
        argv.append(f"--cpus-per-task={res.devices_per_node}")  # one CPU per CPU rank
    for flag, value in (
        ("--partition", pool.partition),
        ("--account", pool.account),
        ("--qos", pool.qos),
        ("--time", pool.time_limit_minutes),
    ):
        if value is not None:
            argv.append(f"{flag}={value}")
    if pool.signal_lead_seconds:
        argv.append(f"--signal=TERM@{pool.signal_lead_seconds}")
    if placed_hosts:
        argv.append(f"--nodelist={','.join(dict.fromkeys(placed_hosts))}")
    elif exclude_hosts:
        argv.append(f"--exclude={','.join(exclude_hosts)}")
    argv += list(pool.extra_sbatch_args)
    agent = [python, "-m", "runwright.control.executors.slurm_job"]
    argv.append("--wrap=exec " + shlex.join([*agent, str(paths.folder), str(paths.request)]))
    return argv


class SlurmAllocator:
    """Asks Slurm for a pool's allocations and follows them (the executor's allocation step)."""

    name = "slurm"

    def __init__(self, pool_name: str, pool: Pool) -> None:
        self.pool_name = pool_name
        self.pool = pool
        self.python = pool.python or sys.executable
        self._jobs: dict[str, tuple[float, cli.JobInfo | None]] = {}
        self._ended: dict[str, float] = {}

    def job(self, job_id: str, fresh: bool = False) -> cli.JobInfo | None:
        """The job as Slurm reports it, asked at most every SLURM_POLL_SECONDS; while slurmctld
        cannot be reached, what it said last (SlurmError if it never answered)."""
        cached = self._jobs.get(job_id)
        now = time.monotonic()
        if fresh or cached is None or now - cached[0] > SLURM_POLL_SECONDS:
            try:
                cached = (now, cli.query_job(job_id))
            except cli.SlurmError:
                if cached is None:
                    raise
                return cached[1]
            self._jobs[job_id] = cached
        return cached[1]

    def ended_long_enough(self, job_id: str) -> bool:
        """The job ended at least ENDED_GRACE_SECONDS ago (as this controller saw it)."""
        first = self._ended.setdefault(job_id, time.monotonic())
        return time.monotonic() - first >= ENDED_GRACE_SECONDS

    def still_running(self, job_id: str) -> None:
        self._ended.pop(job_id, None)

    def cancel(self, target: str, signal_name: str | None = None) -> None:
        """`scancel` a job or a step; one that has just ended is not an error."""
        argv = [
            "scancel",
            *([f"--signal={signal_name}"] if signal_name else []),
            target,
        ]
        try:
            cli.run(argv)
        except cli.SlurmError as exc:
            gone = ("already completing or completed", "Invalid job id")
            if not any(text in str(exc) for text in gone):
                raise
        self._jobs.pop(target.split(".")[0], None)

    def newest(self, root: Path, run_id: str) -> Allocation | None:
        """The run's newest request that reached Slurm (it has a job id), as it stands now."""
        folder = run_paths(root, run_id).allocations
        requests = sorted(
            int(p.name.removeprefix("req"))
            for p in (folder.iterdir() if folder.is_dir() else [])
            if p.name.startswith("req") and p.name[3:].isdigit()
        )
        for request in reversed(requests):
            if run_paths(root, run_id).allocation(request).job_file.exists():
                return self.allocation_status(root, run_id, request)
        return None

    # -- the protocol's allocation methods ------------------------------------------------------

    def refusal(self, spec: JobSpec) -> str | None:
        res = spec.resources
        partition = self.pool.partition or "(the default partition)"
        if not cli.have_slurm():
            return (
                f"pool {self.pool_name!r} runs on Slurm, but Slurm's clients (sbatch, squeue, "
                "scontrol, scancel, sinfo) are not on PATH on this host: install them (Debian: "
                "slurm-client) or submit to a local pool"
            )
        nodes = cli.partition_nodes(self.pool.partition)
        if not nodes:
            return f"Slurm partition {partition} of pool {self.pool_name!r} has no nodes"
        if res.device_type == "cuda":
            if not self.pool.gres:
                return (
                    f"resources.device_type=cuda, but pool {self.pool_name!r} declares no GRES "
                    "for its devices: set `gres: gpu` (the partition's GRES name) in the pool"
                )
            fit = [
                n for n in nodes if cli.gres_count(n.gres, self.pool.gres) >= res.devices_per_node
            ]
            need = f"{res.devices_per_node} {self.pool.gres} GRES"
        else:
            fit = [n for n in nodes if n.cpus >= res.devices_per_node]
            need = f"{res.devices_per_node} CPUs (one per CPU rank)"
        if res.nodes > len(nodes):
            return (
                f"resources.nodes={res.nodes}, but Slurm partition {partition} (pool "
                f"{self.pool_name!r}) has {len(nodes)} node(s): lower resources.nodes or "
                "use a pool on a larger partition"
            )
        if res.nodes > len(fit):
            return (
                f"resources.nodes={res.nodes} with devices_per_node={res.devices_per_node} needs "
                f"{res.nodes} nodes with {need}; Slurm partition {partition} (pool "
                f"{self.pool_name!r}) has {len(fit)}: lower devices_per_node or nodes"
            )
        return None

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
        paths = run_paths(root, run_id).allocation(request)
        if paths.job_file.exists():
            return self.allocation_status(root, run_id, request)
        paths.folder.mkdir(parents=True, exist_ok=True)
        name = job_name(run_id, request)
        try:
            fd = os.open(paths.claim_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, f"{os.getpid()} {time.time()}\n".encode())
            os.close(fd)
        except FileExistsError:
            # Another controller (or this one, before a restart) claimed the request: its job
            # may be in Slurm with the id not yet recorded.
            found = cli.jobs_named(name)
            if found:
                self._record_job(paths, found[0].job_id, [])
                return self.allocation_status(root, run_id, request)
            if time.time() - paths.claim_file.stat().st_mtime < CLAIM_SECONDS:
                return self._pending(request, "submitting to Slurm", "Submitting")
            paths.claim_file.touch()  # the claimer died before sbatch: this one submits
        paths.token_file.write_text(secrets.token_hex(16) + "\n")
        exclude = self._excludable(spec, exclude_hosts)
        argv = sbatch_argv(
            spec=spec,
            pool=self.pool,
            run_id=run_id,
            paths=paths,
            workdir=run_paths(root, run_id).folder,
            exclude_hosts=exclude,
            placed_hosts=placed_hosts,
            python=self.python,
        )
        return self._submit(paths, argv, request, exclude)

    def _submit(
        self,
        paths: AllocationPaths,
        argv: list[str],
        request: int,
        exclude: tuple[str, ...],
    ) -> Allocation:
        try:
            out = cli.run(argv)
        except cli.SlurmError as exc:
            return Allocation(
                executor=self.name,
                request=request,
                state=AllocationState.FAILED,
                reason=f"Slurm refused the job: {exc}",
                code="sbatch",
                permanent="submission failed" in str(exc).lower(),
            )
        job_id = out.strip().split(";")[0]
        self._record_job(paths, job_id, argv, exclude)
        return self._pending(
            request, f"submitted as Slurm job {job_id}", "Submitted", engine_id=job_id
        )

    def _record_job(
        self,
        paths: AllocationPaths,
        job_id: str,
        argv: list[str],
        exclude: tuple[str, ...] = (),
    ) -> None:
        write_json(
            paths.job_file,
            {
                "job_id": job_id,
                "submitted_unix_s": time.time(),
                "argv": argv,
                "exclude_hosts": list(exclude),
            },
        )

    def _excludable(self, spec: JobSpec, exclude: tuple[str, ...]) -> tuple[str, ...]:
        """The lost nodes to avoid, if the partition keeps enough others; else none, so the run
        waits for them to come back (with Slurm's reason shown) rather than for ever."""
        if not exclude:
            return ()
        nodes = {n.name for n in cli.partition_nodes(self.pool.partition)}
        left = nodes - set(exclude)
        return tuple(sorted(set(exclude) & nodes)) if len(left) >= spec.resources.nodes else ()

    def _pending(
        self, request: int, reason: str, code: str, engine_id: str | None = None
    ) -> Allocation:
        return Allocation(
            executor=self.name,
            request=request,
            state=AllocationState.PENDING,
            reason=reason,
            code=code,
            engine_id=engine_id,
        )

    def allocation_status(self, root: Path, run_id: str, request: int) -> Allocation:
        paths = run_paths(root, run_id).allocation(request)
        job = read_json(paths.job_file)
        base = {"executor": self.name, "request": request}
        if job is None:
            if paths.claim_file.exists():
                return self._pending(request, "submitting to Slurm", "Submitting")
            return Allocation(**base, state=AllocationState.RELEASED, reason="never requested")
        job_id = str(job["job_id"])
        base["engine_id"] = job_id
        if paths.release_file.exists():
            return Allocation(**base, state=AllocationState.RELEASED, reason="released")
        info = self.job(job_id)
        agent = read_json(paths.agent_file) or {}
        if agent.get("state") == "failed":
            return Allocation(
                **base,
                state=AllocationState.FAILED,
                reason=str(agent.get("reason")),
                code="agent",
                permanent=bool(agent.get("permanent")),
            )
        if info is not None and states.is_running(info.state):
            self.still_running(job_id)
            if agent.get("state") in ("ready", "running", "idle"):
                return Allocation(
                    **base,
                    state=AllocationState.GRANTED,
                    hosts=tuple(agent.get("hosts") or info.nodes),
                    reason=f"Slurm job {job_id} on {', '.join(info.nodes)}",
                    code=info.state,
                )
            return Allocation(
                **base,
                state=AllocationState.PENDING,
                reason=f"Slurm job {job_id} started on {', '.join(info.nodes)}; its agent is "
                "checking that every node sees the run folder",
                code="Checking",
            )
        if info is not None and states.is_pending(info.state):
            nodes = info.node_count or len(info.nodes)
            reason = states.pending_words(info.partition, info.state, info.reason, nodes)
            if states.is_hopeless(info.state, info.reason):
                return Allocation(
                    **base, state=AllocationState.FAILED, reason=reason, code=info.reason,
                    permanent=True,
                )  # fmt: skip
            return Allocation(
                **base, state=AllocationState.PENDING, reason=reason, code=info.reason
            )
        return self._ended_allocation(paths, base, job_id, info, agent)

    def _ended_allocation(
        self,
        paths: AllocationPaths,
        base: dict,
        job_id: str,
        info: cli.JobInfo | None,
        agent: dict,
    ) -> Allocation:
        state = info.state if info else "UNKNOWN"
        reason = states.ended_words(job_id, state, info.reason if info else "")
        if info is None:
            reason = f"Slurm no longer knows job {job_id} (ended, and no accounting)"
        lost: tuple[str, ...] = ()
        if state in states.LOST_NODE_STATES:
            hosts = list(info.nodes) if info else list(agent.get("hosts") or [])
            lost = tuple(
                h for h, s in cli.node_states(hosts).items() if states.is_lost_node_state(s)
            )
        permanent = False
        if not agent and state == "FAILED":
            # The batch script failed before the agent wrote a line: no node could run it.
            permanent = True
            reason += (
                f" before its agent started: see {paths.agent_log}. The run folder must be on a "
                f"filesystem every node mounts at the same path, and {self.python} must exist "
                "on every node (pools file: python)"
            )
        return Allocation(
            **base,
            state=AllocationState.FAILED,
            reason=reason,
            code=state,
            permanent=permanent,
            lost_hosts=lost,
        )

    def release_allocation(self, root: Path, run_id: str, request: int) -> Allocation:
        paths = run_paths(root, run_id).allocation(request)
        job = read_json(paths.job_file)
        if paths.folder.is_dir():
            paths.release_file.touch()
        if job is None and paths.claim_file.exists():
            found = cli.jobs_named(job_name(run_id, request))
            job = {"job_id": found[0].job_id} if found else None
        engine_id = str(job["job_id"]) if job else None
        if engine_id is not None:
            info = self.job(engine_id, fresh=True)
            if info is not None and not self.ended_state(info.state):
                self.cancel(engine_id)
        return Allocation(
            executor=self.name,
            request=request,
            state=AllocationState.RELEASED,
            reason="released" + (f" (scancel {engine_id})" if engine_id else ""),
            engine_id=engine_id,
        )

    @staticmethod
    def ended_state(state: str) -> bool:
        return not (states.is_pending(state) or states.is_running(state))
