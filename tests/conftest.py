"""A throw-away PostgreSQL server for the tests that need a real one (the store suite, the
controller's store-outage tests).

The server is started the way pytest-postgresql does it: initdb into a temporary folder, a free
port on 127.0.0.1, stopped at the end. PostgreSQL refuses to run as root, so under root the
server runs as the `postgres` (or `nobody`) user. Without the server binaries these tests skip,
unless RUNWRIGHT_REQUIRE_POSTGRES is set (CI sets it), which makes them fail instead."""

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

SLOWEST_FILES = (
    "tests/control/test_recovery.py",
    "tests/ladder/test_ladder.py",
    "tests/control/test_admission.py",
    "tests/train/test_mixture_stages.py",
    "tests/control/test_alerts_live.py",
    "tests/control/test_multinode.py",
    "tests/test_newcomer.py",
    "tests/crash/test_run_writers.py",
    "tests/crash/test_checkpoint_writers.py",
    "tests/control/test_elastic.py",
    "tests/train/test_resume_from.py",
    "tests/train/test_s3_run.py",
    "tests/govern/test_release.py",
    "tests/drill/test_drill_runs.py",
    "tests/demo/test_demo.py",
    "tests/train/test_layouts.py",
    "tests/train/test_corrupt_shard.py",
    "tests/control/test_operator_actions.py",
    "tests/govern/test_baseline_runs.py",
    "tests/runtime/test_readme_integration.py",
)
"""The files that take longest (`make test`'s --durations, summed per file), handed out first:
a long file left for last keeps one worker busy while the other has nothing to do."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With RUNWRIGHT_TEST_CPU_LOG=PATH, one JSON line per test: its wall seconds and the CPU
    seconds it and the processes it reaped used. A suite whose tests mostly wait (CPU well under
    wall) would finish sooner with more workers than cores; one whose tests compute would not."""
    path = os.environ.get("RUNWRIGHT_TEST_CPU_LOG")
    if not path:
        return (yield)
    import json
    import resource
    import time

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime

    wall, used = time.monotonic(), cpu()
    try:
        return (yield)
    finally:
        line = {
            "test": item.nodeid,
            "wall_s": round(time.monotonic() - wall, 3),
            "cpu_s": round(cpu() - used, 3),
        }
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `-n 2 --dist loadgroup` (make test), a test file is one unit of work for one worker:
    its module-scoped servers and runs are set up once, as in a serial run. A module that shares
    a session-scoped service with another names a group of its own (the Slurm cluster). The
    slowest files come first (SLOWEST_FILES)."""
    rank = {name: index for index, name in enumerate(SLOWEST_FILES)}

    def file_of(item) -> str:
        return item.nodeid.split("::", 1)[0]

    items.sort(key=lambda item: rank.get(file_of(item), len(rank)))  # stable: order kept within
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(file_of(item)))


_STORE_WATCHES: dict[Path, Any] = {}
"""One tests/replay_verdicts.StoreWatch per base temporary folder (one per xdist worker)."""


@pytest.fixture(autouse=True)
def _recoveries_prove_themselves(request, tmp_path_factory) -> Iterator[None]:
    """Every recovery a test ran was verified by the replay check (tests/replay_verdicts.py)."""
    yield
    base = tmp_path_factory.getbasetemp()
    if base not in _STORE_WATCHES:
        _STORE_WATCHES[base] = _helper_module(
            "runwright_tests_verdicts", "replay_verdicts.py"
        ).StoreWatch(base)
    watch = _STORE_WATCHES[base]
    found = watch.new_problems(request.node.get_closest_marker("replay_diverges") is not None)
    if found:
        pytest.fail("a recovery was not proven by its replay:\n" + "\n".join(found))


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


class PostgresServer:
    """One initdb'd cluster on a free port; `stop()` and `start()` it to simulate an outage."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.prefix, user = _runner()
        self.base = Path(tempfile.mkdtemp(prefix="runwright-pg-"))
        if user:
            pw = pwd.getpwnam(user)
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.data, self.log = self.base / "data", self.base / "server.log"
        self.port = _free_port()
        self.url = f"postgresql+psycopg://runwright@127.0.0.1:{self.port}/postgres"
        self._pg(
            "initdb", "-D", str(self.data), "-U", "runwright", "--auth=trust", "-E", "UTF8",
            "--no-sync",
        )  # fmt: skip

    def _pg(self, tool: str, *args: str, check: bool = True) -> None:
        subprocess.run(
            [*self.prefix, str(self.bindir / tool), *args],
            check=check,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o",
                 options, "start")  # fmt: skip

    def stop(self, mode: str = "fast", check: bool = True) -> None:
        """`fast` ends every session (clients get admin_shutdown); `immediate` aborts."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=check)

    def remove(self) -> None:
        self.stop("immediate", check=False)
        shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A started server, removed at the end."""
    bindir = find_bindir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.remove()


def require_postgres() -> None:
    if find_bindir() is None:
        if os.environ.get("RUNWRIGHT_REQUIRE_POSTGRES"):
            pytest.fail("RUNWRIGHT_REQUIRE_POSTGRES is set but no PostgreSQL binaries exist")
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not installed; "
            "install Debian's `postgresql` package to run the PostgreSQL half"
        )


@pytest.fixture(scope="session")
def pg_base_url():
    """The URL of a server shared by the whole session (tests make databases of their own)."""
    require_postgres()
    with postgres_server() as server:
        yield server.url


@pytest.fixture
def pg_server():
    """A server of this test's own, which it may stop and start."""
    require_postgres()
    with postgres_server() as server:
        yield server


@contextlib.contextmanager
def _time_bound(seconds: int) -> Iterator[None]:
    """Raise TimeoutError in the block once it has run `seconds` (a hang fails the test instead
    of blocking the suite); SIGALRM, so the main thread only."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def time_bound():
    """`with time_bound(seconds): ...` (session-scoped, so hypothesis tests may use it)."""
    return _time_bound


_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A fresh store's URL, once a SQLite file and once a database of its own on the session's
    PostgreSQL server: a test that takes it runs against both."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    base = request.getfixturevalue("pg_base_url")
    name = f"t{os.getpid()}_{next(_databases)}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    yield base.rsplit("/", 1)[0] + f"/{name}"


def _store_with_running_run(url: str, root: Path):
    """A store at `url` holding run `run-a` (files under `root`), RUNNING at generation 1."""
    from runwright.store import Store

    store = Store(url)
    store.create_run(
        run_id="run-a",
        name="t",
        spec={"name": "t"},
        spec_hash="h" * 64,
        plan={},
        workdir=str(root),
        root=str(root),
        state="RUNNING",
    )
    store.transition("run-a", "RUNNING", allowed_from=["RUNNING"], bump_generation=True)
    return store


@pytest.fixture
def running_run(tmp_path):
    """A SQLite store under tmp_path holding run `run-a`, RUNNING at generation 1."""
    store = _store_with_running_run(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)
    yield store
    store.close()


@pytest.fixture
def running_run_on_each_store(store_url, tmp_path):
    """`running_run` on SQLite and on PostgreSQL (`store_url`)."""
    store = _store_with_running_run(store_url, tmp_path)
    yield store
    store.close()


def _helper_module(name: str, file: str):
    """A helper module of tests/, loaded by path (the tests are not a package) as `name`."""
    import importlib.util
    import sys

    if name not in sys.modules:
        path = Path(__file__).with_name(file)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _s3_server_module():
    """tests/s3_server.py."""
    return _helper_module("runwright_tests_s3_server", "s3_server.py")


# The reference trainer at test size (tests/tiny_trainer.py), imported by test modules.
_helper_module("runwright_tests_tiny", "tiny_trainer.py")
# Headless Chromium for the browser tests (tests/browser.py).
_helper_module("runwright_tests_browser", "browser.py")
# The suite-wide replay-verdict check (tests/replay_verdicts.py), and its own test.
_helper_module("runwright_tests_verdicts", "replay_verdicts.py")
# Nothing left behind after a run ends (tests/leftovers.py).
_helper_module("runwright_tests_leftovers", "leftovers.py")


def require_s3() -> None:
    if _s3_server_module().moto_command() is None:
        if os.environ.get("RUNWRIGHT_REQUIRE_S3"):
            pytest.fail("RUNWRIGHT_REQUIRE_S3 is set but moto_server is not installed")
        pytest.skip("moto_server not installed; pip install -e '.[dev]' (moto[server], s3fs)")


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server shared by the whole session (tests make buckets of their own)."""
    require_s3()
    with _s3_server_module().moto_server() as server:
        yield server


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This test's environment points at the session's S3 server (workers inherit it)."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    _s3_server_module().forget_clients()
    yield s3_server
    _s3_server_module().forget_clients()


@pytest.fixture
def s3_bucket(s3_env):
    """`s3://<a new bucket>` on the session's server."""
    return f"s3://{_s3_server_module().new_bucket()}"


@pytest.fixture(scope="session")
def iam_s3_server():
    """A moto S3 server that enforces IAM policies, shared by the session (tests/s3_server.py,
    IamMotoServer); its `env` carries the controller's all-allowed key."""
    require_s3()
    with _s3_server_module().iam_moto_server() as server:
        yield server


@pytest.fixture
def iam_s3_env(iam_s3_server, monkeypatch):
    """This test's environment points at the IAM-enforcing server, as its controller."""
    for name, value in iam_s3_server.env.items():
        monkeypatch.setenv(name, value)
    _s3_server_module().forget_clients()
    yield iam_s3_server
    _s3_server_module().forget_clients()


@pytest.fixture
def own_s3_server(monkeypatch):
    """A moto S3 server of this test's own, which it may stop; the environment points at it."""
    require_s3()
    module = _s3_server_module()
    with module.moto_server() as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        module.forget_clients()
        yield server
    module.forget_clients()
