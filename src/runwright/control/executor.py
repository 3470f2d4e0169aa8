"""The local executor: launches a run's worker group under torchrun on this machine.

One generation = one supervisor (control/supervise.py) running torchrun, in a session of its own
so the group outlives a controller restart; stopping a generation kills every process of its tree
and nothing else. Each rank gets the run id, generation, run folder, the
spec and its rank-manifest entry through environment variables (runtime/context.py).
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from runwright.control.processes import is_alive, kill_tree
from runwright.errors import LaunchError
from runwright.runtime.context import (
    ENV_GENERATION,
    ENV_RANK_MANIFEST,
    ENV_RUN_DIR,
    ENV_RUN_ID,
    ENV_SPEC_FILE,
)
from runwright.runtime.rank_manifest import RankEntry
from runwright.spec import JobSpec


def run_dir(root: Path, run_id: str) -> Path:
    return root / "runs" / run_id


def entrypoint_argv(spec: JobSpec, workdir: Path) -> list[str]:
    """`module:NAME` runs `python -m NAME`; a path resolves against the submit folder."""
    entry = spec.code.entrypoint
    if entry.startswith("module:"):
        return ["-m", entry.removeprefix("module:"), *spec.code.args]
    script = Path(entry)
    if not script.is_absolute():
        script = workdir / script
    if not script.is_file():
        raise LaunchError(
            f"code.entrypoint {entry!r} does not exist (looked for {script}); give a path "
            "relative to the spec's folder or `module:package.module`"
        )
    return [str(script), *spec.code.args]


# poll() result for a group whose supervisor vanished without writing its exit status (e.g. the
# machine or the supervisor was killed): the process was lost.
EXIT_LOST = -1000
PID_FILE = "pid"
EXIT_FILE = "exit_status"


@dataclass
class WorkerGroup:
    """A launched generation: its supervisor process, exit file and logs."""

    generation: int
    pid: int
    exit_file: Path
    log_path: Path
    log_dir: Path
    process: subprocess.Popen[bytes] | None = None
    """Set when this controller launched the group; None for an adopted one."""

    def poll(self) -> int | None:
        if self.process is not None:
            code = self.process.poll()
            if code is None:
                return None
        if self.exit_file.exists():
            try:
                return int(self.exit_file.read_text().strip())
            except ValueError:
                return EXIT_LOST
        if self.process is None and is_alive(self.pid):
            return None
        return EXIT_LOST if self.process is None else self.process.returncode

    def stop(self, grace_seconds: float, worker_pids: list[int] | None = None) -> int | None:
        """SIGTERM every process of the group, SIGKILL what is left after the grace period."""
        kill_tree(self.pid, worker_pids or [], grace_seconds)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        return self.poll()


def adopt(root: Path, run_id: str, generation: int) -> WorkerGroup | None:
    """Find generation `generation`'s group left by an earlier controller, if it still runs or
    left an exit status."""
    gen_dir = run_dir(root, run_id) / "attempts" / f"gen{generation:05d}"
    try:
        pid = int((gen_dir / PID_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return WorkerGroup(
        generation=generation,
        pid=pid,
        exit_file=gen_dir / EXIT_FILE,
        log_path=gen_dir / "torchrun.log",
        log_dir=gen_dir / "ranks",
    )


def launched_generations(root: Path, run_id: str) -> list[int]:
    attempts = run_dir(root, run_id) / "attempts"
    if not attempts.is_dir():
        return []
    return sorted(
        int(p.name.removeprefix("gen")) for p in attempts.glob("gen*") if (p / PID_FILE).exists()
    )


class LocalExecutor:
    """Runs worker groups as local processes (gloo on CPU, NCCL on GPU)."""

    name = "local"

    def hosts(self, nodes: int) -> list[str]:
        if nodes != 1:
            raise LaunchError(
                f"resources.nodes={nodes}: the local executor runs one node; set nodes: 1 or use "
                "a cluster executor"
            )
        return [socket.gethostname()]

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
        folder = run_dir(root, run_id)
        gen_dir = folder / "attempts" / f"gen{generation:05d}"
        gen_dir.mkdir(parents=True, exist_ok=True)
        spec_file = folder / "spec.json"
        if not spec_file.exists():
            spec_file.write_text(spec.canonical_json())
        manifest_file = gen_dir / "rank_manifest.json"
        manifest_file.write_text(json.dumps([e.model_dump() for e in rank_manifest], indent=1))
        env = {
            **os.environ,
            **spec.environment.env,
            ENV_RUN_ID: run_id,
            ENV_GENERATION: str(generation),
            ENV_RUN_DIR: str(folder),
            ENV_SPEC_FILE: str(spec_file),
            ENV_RANK_MANIFEST: str(manifest_file),
            # Ranks are processes on few cores; one intra-op thread each avoids oversubscription.
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            "PYTHONUNBUFFERED": "1",
            **(extra_env or {}),
        }
        argv = [
            sys.executable,
            "-m",
            "runwright.control.supervise",
            str(gen_dir / EXIT_FILE),
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc-per-node",
            str(spec.resources.devices_per_node),
            "--max-restarts",
            "0",
            "--log-dir",
            str(gen_dir / "ranks"),
            "--redirects",
            "3",
            *entrypoint_argv(spec, workdir),
        ]
        log_path = gen_dir / "torchrun.log"
        with open(log_path, "ab") as log:
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
        (gen_dir / PID_FILE).write_text(f"{process.pid} {time.time()}\n")
        return WorkerGroup(
            generation=generation,
            pid=process.pid,
            exit_file=gen_dir / EXIT_FILE,
            log_path=log_path,
            log_dir=gen_dir / "ranks",
            process=process,
        )
