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


ADMIN_POLICY = (
    '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
)
"""The controller's own rights on the IAM-enforcing server: everything."""


class IamMotoServer(MotoServer):
    """A moto server that enforces IAM policies (what moto enforces: docs/trust.md): started
    open, it makes an IAM user `controller` allowed everything with one access key, then switches
    enforcement on (POST /moto-api/reset-auth 0, what INITIAL_NO_AUTH_ACTION_COUNT=0 sets at
    start), so every later request must be signed by a known key whose policies allow it. `env`
    carries the controller's key."""

    def __init__(self) -> None:
        super().__init__()
        import botocore.session

        iam = botocore.session.get_session().create_client(
            "iam",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName="controller")
        iam.put_user_policy(UserName="controller", PolicyName="all", PolicyDocument=ADMIN_POLICY)
        key = iam.create_access_key(UserName="controller")["AccessKey"]
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=30):
            pass

    @property
    def env(self) -> dict[str, str]:
        return {
            **super().env,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
        }


@contextlib.contextmanager
def iam_moto_server() -> Iterator[IamMotoServer]:
    server = IamMotoServer()
    try:
        yield server
    finally:
        server.remove()
