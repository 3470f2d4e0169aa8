"""A real `runwright server` for the tests: the CLI command itself, started as a child process on
a free loopback port against a SQLite file or a database of the session's throw-away PostgreSQL,
waited for on /health, and stopped with SIGTERM (its controller with it)."""

import contextlib
import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import yaml

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.store import NewEvent, Store

SKELETON = Path(__file__).resolve().parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"
SECRET = "hunter2-but-longer"
SAMPLE = "the quick brown fox, a line of training data"
RUN_A, RUN_B, RUN_S = "alpha-run-000001", "beta-run-000001", "alpha-secret-000001"
MEMBERS = {"viewer": "viewer_a", "submitter": "submitter_a", "operator": "operator_a",
           "admin": "admin_a"}  # fmt: skip
START_SECONDS = 120.0
"""How long a server may take to answer /health: importing FastAPI and migrating the store take
a few seconds on a busy 2-core machine; this is the bound of a hang, not an expected time."""
_counter = itertools.count()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningServer:
    url: str
    store_url: str
    root: Path
    admin_token: str
    """A site admin's token (project `default`), made on the store before the start."""
    process: subprocess.Popen
    log: Path

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60.0)

    def store(self) -> Store:
        return Store(self.store_url)


@contextlib.contextmanager
def running_server(
    store_url: str, root: Path, *, controller: bool = True
) -> Iterator[RunningServer]:
    store = Store(store_url)
    made = Access(store, root, local_actor()).bootstrap_admin("root-admin", "default", 1)
    store.close()
    port = free_port()
    log = root / "server.log"
    root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "runwright.cli.main", "server", "--port", str(port),
            "--root", str(root), "--store", store_url]  # fmt: skip
    if not controller:
        argv.append("--no-controller")
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the server exited: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=5.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no /health within {START_SECONDS} s: {log.read_text()}")
            time.sleep(0.1)
        yield RunningServer(url, store_url, root, made["token"], process, log)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def postgres_database(base: str) -> str:
    """A fresh database on the session's PostgreSQL server."""
    name = f"srv{os.getpid()}_{next(_counter)}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return base.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return postgres_database(request.getfixturevalue("pg_base_url"))


def spec_mapping() -> dict:
    spec = yaml.safe_load(SKELETON.read_text())
    spec["training"]["steps"] = 2
    return spec


def _add_run(store: Store, root: Path, run_id: str, project: str, spec: dict) -> None:
    store.create_run(
        run_id=run_id,
        name="matrix",
        spec=spec,
        spec_hash="0" * 64,
        plan={},
        workdir=str(root),
        root=str(root),
        state="QUEUED",
        project=project,
        submitted_by="submitter_a",
    )
    (run_paths(root, run_id).checkpoints / "staging").mkdir(parents=True)


@pytest.fixture(scope="package")
def world(tmp_path_factory):
    """A server (no controller) on a SQLite store with projects alpha and beta, a member of
    alpha per role, an admin of beta, tokens of every kind, and runs in both projects."""
    base = tmp_path_factory.mktemp("matrix")
    root, url = base / "root", f"sqlite:///{base / 'state.db'}"
    store = Store(url)
    local = Access(store, root, local_actor())
    for project in ("alpha", "beta"):
        local.create_project(project)
    for role, name in MEMBERS.items():
        local.set_role("alpha", name, role)
    local.set_role("beta", "admin_b", "admin")
    tokens = {role: local.create_token(name, "alpha", days=1)["token"]
              for role, name in MEMBERS.items()}  # fmt: skip
    tokens["other proj"] = local.create_token("admin_b", "beta", days=1)["token"]
    expired = local.create_token("viewer_a", "alpha", days=1e-9)
    revoked = local.create_token("operator_a", "alpha", days=1)
    local.revoke_token(revoked["token_id"])
    tokens |= {"expired": expired["token"], "revoked": revoked["token"],
               "malformed": "rwt_not-a-token", "no token": None}  # fmt: skip
    claimed = {
        "no token": "anonymous",
        "malformed": "anonymous",
        "expired": f"viewer_a (token {expired['token_id']})",
        "revoked": f"operator_a (token {revoked['token_id']})",
        "other proj": "admin_b",
        "site admin": "root-admin",
        **{role: name for role, name in MEMBERS.items()},
    }
    secret_spec = spec_mapping()
    secret_spec["environment"]["env"] = {"HF_TOKEN": SECRET, "OMP_NUM_THREADS": "1"}
    _add_run(store, root, RUN_A, "alpha", spec_mapping())
    _add_run(store, root, RUN_B, "beta", spec_mapping())
    _add_run(store, root, RUN_S, "alpha", secret_spec)
    store.update_run(RUN_S, state_detail=f"ValueError: {SAMPLE} ({SECRET})")
    store.append_event(
        NewEvent(
            event_id="failure-1",
            run_id=RUN_S,
            generation=0,
            type=EventType.FAILURE_CLASSIFIED,
            time_unix_s=time.time(),
            attributes={"failure_class": "data", "rank": 0, "message": f"{SAMPLE} {SECRET}"},
        ),
        fenced=False,
    )
    store.close()
    with running_server(url, root, controller=False) as server:
        tokens["site admin"] = server.admin_token
        yield server, tokens, claimed
