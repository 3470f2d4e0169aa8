"""A throw-away MLflow tracking server for the tracker tests: `mlflow server` from the venv (PyPI
`mlflow`, in the dev extra, so it is always there and these tests never skip), on a free
loopback port, its SQLite backend store and artifact folder in a temporary folder, stopped with
SIGTERM to its main pid (../shared/SERVICES.md).

On 2 cores it starts with one worker and job execution off (~5 s to healthy on an idle machine
instead of ~30 s); creating its database takes most of that, and far longer on a loaded one,
which is why the wait is bounded by the process itself (it exits on a real error) and a
generous STARTUP_SECONDS, polled, never slept through.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STARTUP_SECONDS = 300
"""Longest wait for /health: the slowest start seen here was 88 s at load average 10."""


@dataclass(frozen=True)
class MlflowServer:
    url: str
    folder: Path
    pid: int


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def mlflow_server() -> Iterator[MlflowServer]:
    folder = Path(tempfile.mkdtemp(prefix="runwright-mlflow-server-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(folder / "server.log", "wb")  # noqa: SIM115 - closed below
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited with {proc.returncode}: "
                    + (folder / "server.log").read_text()[-3000:]
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server not healthy after {STARTUP_SECONDS} s")
            time.sleep(0.2)
        yield MlflowServer(url=url, folder=folder, pid=proc.pid)
    finally:
        # TERM to the main pid stops its uvicorn worker too; the group is killed if it lingers.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
