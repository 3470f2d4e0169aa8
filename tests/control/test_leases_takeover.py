"""Two real `runwright controller --daemon` processes share one store and a real run (the paced
worker under torchrun): the lease holder is SIGKILLed mid-run and the other takes the run over
once the lease has run out, adopts the live worker group and finishes the run; a holder that is
paused (SIGSTOP) past its lease wakes to find the run taken and writes nothing.

The two controllers run on one host with different node ids (RUNWRIGHT_CONTROLLER_NODE), so each
sees the other as a controller on another host does: known gone only by its lease running out.
"""

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from runwright.control.controller import Controller
from runwright.control.leasing import NODE_ENV, holder_pid
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SKELETON = REPO / "src" / "runwright" / "demo" / "skeleton.yaml"
PACED_WORKER = REPO / "src" / "runwright" / "demo" / "paced_worker.py"
STEPS, STEP_SECONDS = 40, 0.25
"""10 s of training: the takeover (a 4 s lease) comes while the group still runs."""
LEASE_SECONDS = 4.0
"""Long enough that a loaded 2-core machine's slowest pass does not let a live holder's lease
lapse, short enough to keep the test quick."""
BOUND_SECONDS = 240
_databases = itertools.count()


def paced_spec():
    data = yaml.safe_load(SKELETON.read_text())
    data["name"] = "lease-takeover"
    data["training"]["steps"] = STEPS
    data["resources"]["devices_per_node"] = 1
    data["code"] = {"entrypoint": str(PACED_WORKER), "args": [f"--step-seconds={STEP_SECONDS}"]}
    return spec_from_mapping(data)


def fresh_database(base_url: str) -> str:
    name = f"lease{os.getpid()}_{next(_databases)}"
    admin = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return base_url.rsplit("/", 1)[0] + f"/{name}"


class Daemon:
    """`runwright controller --daemon` in a process of its own, as if on host `node`."""

    def __init__(self, root: Path, url: str, node: str, lease_seconds: float = LEASE_SECONDS):
        self.node = node
        self.log = root / f"controller-{node}.log"
        if url.startswith("postgresql"):
            url += f"?application_name={node}"  # so the test can see its sessions
        argv = [sys.executable, "-m", "runwright.cli.main", "controller", "--daemon", "--root",
                str(root), "--store", url, "--lease-seconds", str(lease_seconds)]  # fmt: skip
        env = {**os.environ, NODE_ENV: node, "PYTHONUNBUFFERED": "1"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def wait_for(condition, what: str, seconds: float = BOUND_SECONDS, daemons=()):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    logs = "\n".join(f"--- {d.node}\n{d.text()[-3000:]}" for d in daemons)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


def of_type(store, run_id, type_):
    return store.events(run_id, types=[type_])


def the_holder(store, run_id, daemons):
    lease, now = store.leases.get(run_id)
    if lease is None or not lease.live(now):
        return None
    return next((d for d in daemons if d.proc.pid == holder_pid(lease.holder)), None)


def check_finished_once(store, run_id, new_holder: str):
    """The run SUCCEEDED on its first generation, launched once and adopted by `new_holder`'s
    controller, with every step stored once and nothing stale."""
    run = store.get_run(run_id)
    assert run.state == "SUCCEEDED" and run.generation == 1, run
    launched = of_type(store, run_id, "WORKER_GROUP_LAUNCHED")
    assert [e.generation for e in launched] == [1]  # exactly one launch per generation
    assert [a.generation for a in store.attempts(run_id)] == [1]
    assert store.attempts(run_id)[0].exit_code == 0
    assert len(of_type(store, run_id, "WORKER_GROUP_ADOPTED")) == 1
    steps = [e.step for e in of_type(store, run_id, "STEP_HEALTHY")]
    assert steps == list(range(1, STEPS + 1))
    assert not of_type(store, run_id, "STALE_WRITE_REJECTED")
    finished = of_type(store, run_id, "RUN_FINISHED")
    assert len(finished) == 1 and store.events(run_id)[-1].type == "RUN_FINISHED"
    lease, _ = store.leases.get(run_id)
    assert lease.holder == new_holder and lease.released


def finished_and_handed_back(store, run_id) -> bool:
    """The run finished and its controller handed the lease back (right after RUN_FINISHED)."""
    lease, _ = store.leases.get(run_id)
    return bool(of_type(store, run_id, "RUN_FINISHED")) and lease is not None and lease.released


def kill_the_holder_mid_run(tmp_path: Path, url: str) -> None:
    store = Store(url)
    run, _ = Controller(store, tmp_path).submit(paced_spec(), tmp_path)
    daemons = [Daemon(tmp_path, url, "host-a"), Daemon(tmp_path, url, "host-b")]
    try:
        holder = wait_for(
            lambda: the_holder(store, run.run_id, daemons), "a holder", daemons=daemons
        )
        wait_for(lambda: of_type(store, run.run_id, "STEP_HEALTHY"), "a step", daemons=daemons)
        killed_lease, _ = store.leases.get(run.run_id)
        holder.proc.send_signal(signal.SIGKILL)
        holder.proc.wait()
        (takeover,) = wait_for(
            lambda: of_type(store, run.run_id, "CONTROLLER_TAKEOVER"), "takeover", daemons=daemons
        )
        survivor = next(d for d in daemons if d is not holder)
        new_lease, _ = store.leases.get(run.run_id)
        assert takeover.attributes["old_holder"] == killed_lease.holder
        assert takeover.attributes["new_holder"] == new_lease.holder
        assert holder_pid(new_lease.holder) == survivor.proc.pid
        assert takeover.attributes["reason"] == "expired"
        assert takeover.attributes["epoch"] == killed_lease.epoch + 1 == new_lease.epoch
        # Taken only after the dead holder's lease ran out, on the database's clock.
        assert new_lease.acquired_unix_s >= killed_lease.expires_unix_s
        assert takeover.attributes["uncontrolled_seconds"] >= LEASE_SECONDS * 0.99
        wait_for(
            lambda: finished_and_handed_back(store, run.run_id), "the run to end", daemons=daemons
        )
        check_finished_once(store, run.run_id, new_lease.holder)
        adopted = of_type(store, run.run_id, "WORKER_GROUP_ADOPTED")[0]
        assert adopted.seq > takeover.seq
    finally:
        codes = [d.stop() for d in daemons]
        store.close()
    assert codes[daemons.index(survivor)] == 128 + signal.SIGTERM, survivor.text()[-3000:]
    assert "Traceback" not in survivor.text(), survivor.text()[-3000:]


def test_postgres_holder_killed_mid_run_the_other_controller_finishes_it(tmp_path, pg_base_url):
    kill_the_holder_mid_run(tmp_path, fresh_database(pg_base_url))


@pytest.mark.slow  # the same path as PostgreSQL's; SQLite leases between stores: tests/store
def test_sqlite_holder_killed_mid_run_the_other_controller_finishes_it(tmp_path):
    kill_the_holder_mid_run(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")


def pause_outside_a_transaction(daemon: Daemon, admin: sa.Engine) -> None:
    """SIGSTOP `daemon` at a moment none of its sessions is inside a transaction: one paused
    while it holds the lease row locked would (rightly) hold every takeover back until it runs
    again, which is not the case under test."""
    for _ in range(200):
        daemon.proc.send_signal(signal.SIGSTOP)
        with admin.connect() as conn:
            busy = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
                    "AND state <> 'idle'"
                ),
                {"name": daemon.node},
            ).scalar()
        if not busy:
            return
        daemon.proc.send_signal(signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError(f"{daemon.node} was inside a transaction at every try")


def snapshot(store: Store, run_id: str):
    lease, _ = store.leases.get(run_id)
    return (
        store.get_run(run_id),
        store.events(run_id),
        store.attempts(run_id),
        store.checkpoints.list(run_id),
        lease,
    )


# Slow (about 40 s): the default suite keeps the killed-holder takeover above; a stale holder's
# writes refused is covered there by tests/control/test_leases.py and tests/store/test_leases.py.
@pytest.mark.slow
def test_a_paused_holder_finds_its_lease_taken_and_writes_nothing(tmp_path, pg_base_url):
    url = fresh_database(pg_base_url)
    store = Store(url)
    admin = sa.create_engine(url)
    run, _ = Controller(store, tmp_path).submit(paced_spec(), tmp_path)
    # The first controller holds the run on a short lease and is paused once it has launched
    # the group; the second, started only then, takes over on a long lease, so that it can be
    # paused itself while the first wakes up without its lease running out meanwhile.
    paused = Daemon(tmp_path, url, "host-a", lease_seconds=LEASE_SECONDS)
    daemons = [paused]
    try:
        wait_for(lambda: the_holder(store, run.run_id, daemons), "a holder", daemons=daemons)
        wait_for(
            lambda: of_type(store, run.run_id, "WORKER_GROUP_LAUNCHED"), "launch", daemons=daemons
        )
        pause_outside_a_transaction(paused, admin)
        daemons.append(taker := Daemon(tmp_path, url, "host-b", lease_seconds=60.0))
        (takeover,) = wait_for(
            lambda: of_type(store, run.run_id, "CONTROLLER_TAKEOVER"), "takeover", daemons=daemons
        )
        assert takeover.attributes["reason"] == "expired"
        assert holder_pid(takeover.attributes["old_holder"]) == paused.proc.pid
        assert holder_pid(takeover.attributes["new_holder"]) == taker.proc.pid
        wait_for(
            lambda: of_type(store, run.run_id, "WORKER_GROUP_ADOPTED"), "adoption", daemons=daemons
        )
        # Freeze the new holder too, then wake the old one: what the store holds now must
        # still be all it holds once the old holder has seen that its lease is gone.
        pause_outside_a_transaction(taker, admin)
        before = snapshot(store, run.run_id)
        log_before = len(paused.text())
        paused.proc.send_signal(signal.SIGCONT)
        wait_for(
            lambda: "stands by" in paused.text()[log_before:], "the old holder to stand by",
            daemons=daemons,
        )  # fmt: skip
        assert snapshot(store, run.run_id) == before
        woke = paused.text()[log_before:]
        assert "Traceback" not in woke, woke
        # Its workers were not touched: the new holder finishes the run on the same group.
        taker.proc.send_signal(signal.SIGCONT)
        wait_for(
            lambda: finished_and_handed_back(store, run.run_id), "the run to end", daemons=daemons
        )
        check_finished_once(store, run.run_id, takeover.attributes["new_holder"])
    finally:
        for d in daemons:
            d.stop()
        admin.dispose()
        store.close()
