"""The local executor: launches a run's worker group under torchrun on this machine.

One generation = one supervisor (control/supervise.py) running torchrun, in a session of its own
so the group outlives a controller restart. Each rank gets the run id, generation, run folder,
the spec and its rank-manifest entry through environment variables (runtime/context.py); those
variables are also the generation's tag: every process of it (supervisor, torchrun, ranks and
anything they start) carries the run folder and generation in its launch environment, so the
executor finds all of them through /proc even once their parents are gone.

Process lifetimes: torchrun dies with its supervisor and every rank with torchrun (parent-death
signals, runwright/lifetime.py); stopping a generation kills its process tree and its tagged
processes and nothing else; and `kill_generations_below` makes sure no process of an older
generation is alive before a new one starts.

Failure evidence (`LocalExecutor.evidence`): torchrun's per-rank error files (written by
`torch.distributed.elastic.multiprocessing.errors.record`), the tail of torchrun's own log (its
root-cause summary), the last traceback on each rank's stderr, and the lost-supervisor record.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from runwright.control.executors.protocol import (
    EXIT_LOST,
    Allocation,
    AllocationState,
    ErrorRecord,
    FailureEvidence,
    GroupHandle,
    LostSupervisor,
)
from runwright.control.executors.torchrun import torchrun_argv
from runwright.control.failures import exception_line
from runwright.control.processes import (
    boot_time_unix_s,
    environs,
    is_alive,
    kill_tree,
    processes_tagged,
    signal_all,
    wait_gone,
)
from runwright.errors import LaunchError
from runwright.layout import AttemptPaths, parse_generation, run_paths
from runwright.lifetime import environ_of, has_tags
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

KILLED_EXIT_SECONDS = 10.0
"""How long SIGKILLed processes get to leave the kernel before the executor reports them as
survivors (SIGKILL acts at once unless a process is blocked in uninterruptible I/O)."""


def generation_tags(root: Path, run_id: str, generation: int) -> dict[str, str]:
    """The launch-environment variables that mark every process of one generation."""
    return {ENV_RUN_DIR: str(run_paths(root, run_id).folder), ENV_GENERATION: str(generation)}


def generation_processes(root: Path, run_id: str) -> dict[int, list[int]]:
    """generation -> live processes of run `run_id` on this machine, found by their tags."""
    folder = str(run_paths(root, run_id).folder)
    found: dict[int, list[int]] = {}
    for pid, env in environs():
        if env.get(ENV_RUN_DIR) == folder and (env.get(ENV_GENERATION) or "").isdigit():
            found.setdefault(int(env[ENV_GENERATION]), []).append(pid)
    return found


@dataclass
class WorkerGroup:
    """A launched generation: its supervisor process, exit file, logs and process tags."""

    generation: int
    pid: int
    exit_file: Path
    log_path: Path
    log_dir: Path
    tags: dict[str, str] = field(default_factory=dict)
    """generation_tags() of this generation; empty matches nothing by tag."""
    launched_unix_s: float | None = None
    process: subprocess.Popen[bytes] | None = None
    """Set when this controller launched the group; None for an adopted one."""

    @property
    def log_ref(self) -> str:
        return str(self.log_path)

    @classmethod
    def of(
        cls,
        attempt: AttemptPaths,
        pid: int,
        tags: dict[str, str],
        *,
        launched_unix_s: float | None = None,
        process: subprocess.Popen[bytes] | None = None,
    ) -> "WorkerGroup":
        """The group of the generation whose files are `attempt`, run by supervisor `pid`."""
        return cls(
            generation=attempt.generation,
            pid=pid,
            exit_file=attempt.exit_status_file,
            log_path=attempt.torchrun_log,
            log_dir=attempt.rank_logs,
            tags=tags,
            launched_unix_s=launched_unix_s,
            process=process,
        )

    def _supervisor_alive(self) -> bool:
        # A recycled pid is not our supervisor: believe the pid only while it carries the tag,
        # or while its environment cannot be read (then the pid is all there is to go on).
        if not is_alive(self.pid):
            return False
        return not self.tags or environ_of(self.pid) is None or has_tags(self.pid, self.tags)

    def poll(self) -> int | None:
        """torchrun's exit status once the supervisor wrote it; None while the supervisor runs;
        EXIT_LOST when the supervisor ended without writing it."""
        if self.process is not None:
            if self.process.poll() is None:
                return None
        elif self._supervisor_alive():
            return None
        if self.exit_file.exists():
            try:
                return int(self.exit_file.read_text().strip())
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

        Killing, not adopting, is the repair. Without its supervisor nobody can wait() for
        torchrun, so its exit status (the only trustworthy end of the generation) is gone; and
        torchrun dies with its supervisor anyway (its parent-death signal), taking the ranks with
        it, so a group still complete enough to adopt exists only where parent-death signals are
        missing, and then its ranks have lost the agent that would stop them all when one fails.
        The next generation restarts from the newest committed checkpoint: the loss is the steps
        since it, and those are bounded by the checkpoint interval."""
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


def adopt_group(root: Path, run_id: str, generation: int) -> WorkerGroup | None:
    """Find generation `generation`'s group left by an earlier controller, if it still runs or
    left an exit status."""
    attempt = run_paths(root, run_id).attempt(generation)
    try:
        fields = attempt.pid_file.read_text().split()
        pid = int(fields[0])
        launched = float(fields[1]) if len(fields) > 1 else None
    except (OSError, ValueError, IndexError):
        return None
    return WorkerGroup.of(
        attempt, pid, generation_tags(root, run_id, generation), launched_unix_s=launched
    )


def _local(group: GroupHandle) -> WorkerGroup:
    if not isinstance(group, WorkerGroup):
        raise TypeError(f"the local executor cannot act on {type(group).__name__}")
    return group


def launched_generations(root: Path, run_id: str) -> list[int]:
    """Generations whose group was launched (they left a pid file), oldest first."""
    paths = run_paths(root, run_id)
    if not paths.attempts.is_dir():
        return []
    found = (parse_generation(p.name) for p in paths.attempts.iterdir())
    return sorted(g for g in found if g is not None and paths.attempt(g).pid_file.exists())


LAUNCHER_LOG_CHARS = 20_000
"""How much of torchrun's log the classifier sees: its failure summary is at the end."""
LOG_TAIL_BYTES = 4000
"""How much of each log the diagnostics bundle keeps."""


def tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


def read_error_files(log_dir: Path) -> list[ErrorRecord]:
    """torchrun's `<log_dir>/<rdzv id>/attempt_<n>/<local rank>/error.json`, earliest first."""
    records = []
    for path in log_dir.glob("*/attempt_*/*/error.json"):
        try:
            body = json.loads(path.read_text())["message"]
            info = body.get("extraInfo", {}) if isinstance(body, dict) else {}
            message = body["message"] if isinstance(body, dict) else str(body)
            records.append(
                ErrorRecord(
                    rank=int(path.parent.name),
                    message=str(message),
                    timestamp_s=float(info.get("timestamp", 0) or 0),
                    traceback=str(info.get("py_callstack", ""))[-4000:],
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(records, key=lambda r: (r.timestamp_s, r.rank))


def rank_tracebacks(log_dir: Path) -> dict[int, str]:
    """The last traceback of each rank whose stderr shows one (a rank that failed without
    `@record`, e.g. before the runtime was set up); `exception_line` gives its message."""
    found: dict[int, str] = {}
    for path in log_dir.glob("*/attempt_*/*/stderr.log"):
        try:
            text = path.read_bytes()[-20_000:].decode("utf-8", errors="replace")
        except OSError:
            continue
        marker = "Traceback (most recent call last)"
        if marker in text and exception_line(text):
            found[int(path.parent.name)] = marker + text.rsplit(marker, 1)[1]
    return found


def evidence_from(
    log_dir: Path, launcher_log: str = "", lost: LostSupervisor | None = None
) -> FailureEvidence:
    """The evidence in a torchrun `--log-dir` folder, beside torchrun's own log text."""
    logs = {
        f"rank{path.parent.name}/{path.name}": tail(path)
        for path in sorted(log_dir.glob("*/attempt_*/*/std*.log"))
    }
    return FailureEvidence(
        launcher_log=launcher_log,
        error_records=tuple(read_error_files(log_dir)),
        rank_tracebacks=rank_tracebacks(log_dir),
        lost=lost,
        log_tails=logs,
    )


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
        found = evidence_from(local.log_dir, tail(local.log_path, LAUNCHER_LOG_CHARS), lost)
        return found.model_copy(
            update={"log_tails": {"torchrun": tail(local.log_path), **found.log_tails}}
        )

    def hosts(self, nodes: int) -> list[str]:
        if nodes != 1:
            raise LaunchError(
                f"resources.nodes={nodes}: the local executor runs one node; set nodes: 1 or use "
                "a cluster executor"
            )
        return [socket.gethostname()]

    def kill_generations_below(
        self, root: Path, run_id: str, generation: int
    ) -> dict[int, list[int]]:
        """SIGKILL every live process of run `run_id` on this machine whose generation is below
        `generation`, found by tag (so ranks whose supervisor and torchrun are gone are found
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
        paths = run_paths(root, run_id)
        attempt = paths.attempt(generation)
        attempt.folder.mkdir(parents=True, exist_ok=True)
        if not paths.spec_file.exists():
            paths.spec_file.write_text(spec.canonical_json())
        attempt.rank_manifest_file.write_text(encode_rank_manifest(rank_manifest))
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
        }
        argv = [
            sys.executable,
            "-m",
            "runwright.control.supervise",
            str(attempt.exit_status_file),
            "--",
            *torchrun_argv(spec, workdir, log_dir=attempt.rank_logs),
        ]
        # The supervisor alone gets no parent-death signal: the group must outlive a controller
        # restart, and the next controller adopts it by its pid file.
        with open(attempt.torchrun_log, "ab") as log:
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
                raise LaunchError(f"cannot start torchrun: {exc}") from None
        launched = time.time()
        attempt.pid_file.write_text(f"{process.pid} {launched}\n")
        return WorkerGroup.of(
            attempt,
            process.pid,
            generation_tags(root, run_id, generation),
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
        gpus = nvidia_gpu_count()
        if res.devices_per_node <= gpus:
            return None
        return (
            f"resources.device_type=cuda with devices_per_node={res.devices_per_node}, but this "
            f"machine ({socket.gethostname()}) has {gpus} NVIDIA GPU(s): set device_type: cpu, "
            "lower devices_per_node, or submit to a pool whose executor has GPUs (--pools)"
        )

    def request_allocation(
        self,
        *,
        spec: JobSpec,
        run_id: str,
        root: Path,
        request: int,
        exclude_hosts: tuple[str, ...] = (),
    ) -> Allocation:
        """Granted at once with this machine's hosts; a node count it cannot run fails for good
        with `hosts`'s reason (never a run waiting for nothing)."""
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
