"""The local executor: launches a run's worker group under torchrun on this machine.

One generation = one torchrun process group in its own session, so stopping a generation kills
every rank it started and nothing else. Each rank gets the run id, generation, run folder, the
spec and its rank-manifest entry through environment variables (runtime/context.py).
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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


@dataclass
class WorkerGroup:
    """A launched generation: the torchrun process and where its logs go."""

    generation: int
    process: subprocess.Popen[bytes]
    log_path: Path
    log_dir: Path

    def poll(self) -> int | None:
        return self.process.poll()

    def stop(self, grace_seconds: float) -> int:
        """SIGTERM the whole group, then SIGKILL after the grace period. Returns the exit code."""
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_seconds)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(timeout=30)
        return self.process.returncode

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)


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
        }
        argv = [
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
        (gen_dir / "pid").write_text(f"{process.pid} {time.time()}\n")
        return WorkerGroup(
            generation=generation, process=process, log_path=log_path, log_dir=gen_dir / "ranks"
        )
