"""Every store test runs twice: against a real SQLite file and a real PostgreSQL server.

The PostgreSQL server is started the way pytest-postgresql does it: initdb into a temporary
folder, a free port on 127.0.0.1, stopped at the end. PostgreSQL refuses to run as root, so under
root the server runs as the `postgres` (or `nobody`) user."""

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from runwright.store import Store


def find_bindir() -> Path | None:
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _runner() -> tuple[list[str], str | None]:
    if os.geteuid() != 0:
        return [], None
    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return ["runuser", "-u", user, "--"], user
    raise RuntimeError("running as root and no unprivileged user exists for PostgreSQL")


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL of a fresh server's `postgres` database."""
    bindir = find_bindir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
    prefix, user = _runner()
    base = Path(tempfile.mkdtemp(prefix="runwright-pg-"))
    if user:
        pw = pwd.getpwnam(user)
        os.chown(base, pw.pw_uid, pw.pw_gid)
    data, log = base / "data", base / "server.log"
    port = _free_port()
    run = lambda *args: subprocess.run(  # noqa: E731
        [*prefix, *args], check=True, capture_output=True, text=True, timeout=120
    )
    try:
        run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "runwright",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        run(
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(log),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )
        yield f"postgresql+psycopg://runwright@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)


_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_base_url():
    if find_bindir() is None:
        if os.environ.get("RUNWRIGHT_REQUIRE_POSTGRES"):
            pytest.fail("RUNWRIGHT_REQUIRE_POSTGRES is set but no PostgreSQL binaries exist")
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not installed; "
            "install Debian's `postgresql` package to run the PostgreSQL half"
        )
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    base = request.getfixturevalue("pg_base_url")
    name = f"t{os.getpid()}_{next(_counter)}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    yield base.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def store(store_url):
    s = Store(store_url)
    yield s
    s.close()
