"""A real S3-compatible server for the object-store tests: moto in server mode.

`moto_server -H 127.0.0.1 -p <free port>` runs as a subprocess (moto[server] is in the dev extra),
is waited for until it answers HTTP, and is stopped by its pid at the end. Clients reach it
through the standard AWS environment (AWS_ENDPOINT_URL, keys, AWS_DEFAULT_REGION=us-east-1: with
s3fs, a region passed in client_kwargs makes bucket creation fail with
InvalidLocationConstraint), exactly as a user's processes would reach their store, so the
controller's workers inherit it. Without moto_server the tests skip, unless
RUNWRIGHT_REQUIRE_S3 is set (CI sets it), which makes them fail instead.
"""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

START_SECONDS = 60.0
"""Upper bound on the server answering; it is up in about a second on an idle machine."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def moto_command() -> list[str] | None:
    """How to start moto's server: its script beside this Python, on PATH, or None."""
    beside = Path(sys.executable).with_name("moto_server")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("moto_server")
    return [found] if found else None


class MotoServer:
    """One moto server on a free port of 127.0.0.1; `stop()` it to simulate an outage."""

    def __init__(self) -> None:
        command = moto_command()
        if command is None:
            raise FileNotFoundError("moto_server not found: pip install 'moto[server]'")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = Path(tempfile.mkstemp(prefix="runwright-moto-", suffix=".log")[1])
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [*command, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_until_up()

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "runwright-test",
            "AWS_SECRET_ACCESS_KEY": "runwright-test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"moto_server exited with {self.process.returncode}: "
                    + self.log.read_text()[-2000:]
                )
            try:
                with urllib.request.urlopen(self.endpoint, timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # it answered (an error status is an answer)
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"moto_server did not answer within {START_SECONDS:g} s")

    def stop(self) -> None:
        """Stop the server by its pid (and its process group); idempotent."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def remove(self) -> None:
        self.stop()
        self.log.unlink(missing_ok=True)


@contextlib.contextmanager
def moto_server() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        yield server
    finally:
        server.remove()


def forget_clients() -> None:
    """Drop fsspec's cached S3 file systems: each holds the endpoint it first connected to."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


def new_bucket(prefix: str = "rw") -> str:
    """Create a bucket with a unique name on the server the environment points at; returns it
    (names need 3+ characters)."""
    import s3fs

    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem().mkdir(name)
    return name
