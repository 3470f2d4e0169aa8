"""The controller under run leases, without workers: a controller whose lease was taken writes
nothing and drops the run, `drive` stands by while another controller holds the run and takes it
over when it is handed back, a holder gone on this node is taken over at once, and no process is
started or ended once the lease may have run out."""

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from runwright.access.base import local_actor
from runwright.access.service import Access
from runwright.cli.main import app
from runwright.control.cancel import request_cancel
from runwright.control.controller import Controller
from runwright.control.executors.protocol import FailureEvidence
from runwright.control.leasing import (
    ControllerLeases,
    LeaseGuardedExecutor,
    PassOutcome,
    holder_pid,
)
from runwright.control.summary import describe_run, run_summary
from runwright.errors import LeaseLostError
from runwright.spec import spec_from_mapping
from runwright.store import Store
from runwright.store.leases import LeaseOutcome

SKELETON = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path)
    yield s
    s.close()


def submit(store, root):
    spec = spec_from_mapping(yaml.safe_load(SKELETON.read_text()))
    run, _ = Controller(store, root).submit(spec, root)
    return run.run_id


def take(leases, run_id):
    lease, now = leases.store.leases.get(run_id)
    return leases.take_if_free(run_id, lease, now)


def until(condition, time_bound, seconds=60, every=0.05):
    with time_bound(seconds):
        while not condition():
            time.sleep(every)


def expire(store, run_id, time_bound):
    """Wait until the run's lease has run out on the database's clock."""
    lease, _ = store.leases.get(run_id)
    until(lambda: store.leases.now_unix_s() > lease.expires_unix_s, time_bound)


def test_a_controller_whose_lease_was_taken_writes_nothing_and_drops_the_run(
    store, tmp_path, time_bound, caplog
):
    run_id = submit(store, tmp_path)
    stale = Controller(store, tmp_path, lease_seconds=0.5)
    assert take(stale.leases, run_id).outcome is LeaseOutcome.ACQUIRED
    expire(store, run_id, time_bound)
    other = ControllerLeases(store, 30.0)
    assert take(other, run_id).outcome is LeaseOutcome.TAKEN_OVER
    before = (store.get_run(run_id), store.events(run_id))

    # The stale controller still believes it holds the run: its pass is refused at its first
    # write, inside that write's transaction.
    refused = pytest.raises(LeaseLostError, match=f"{other.holder} holds it now, at epoch 2")
    with refused, stale.leases.fenced(run_id):
        stale.reconcile(run_id)
    assert (store.get_run(run_id), store.events(run_id)) == before
    # Through the drive loops the refusal is an outcome: the run is dropped.
    assert stale._leased_pass(run_id) is PassOutcome.LOST
    assert not stale.leases.holds(run_id)
    # Its next sweep leaves the run to the holder and says who that is.
    active: set[str] = set()
    with caplog.at_level(logging.WARNING):
        stale._sweep(active, [])
    assert active == {run_id}
    assert (store.get_run(run_id), store.events(run_id)) == before
    assert f"pid {holder_pid(other.holder)}" in caplog.text and "stands by" in caplog.text


def test_drive_stands_by_while_another_controller_holds_the_run(store, tmp_path, time_bound):
    run_id = submit(store, tmp_path)
    other = ControllerLeases(store, 30.0)
    assert take(other, run_id).outcome is LeaseOutcome.ACQUIRED
    standby = Controller(store, tmp_path, poll_seconds=0.05)
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logging.getLogger("runwright.control.controller").addHandler(handler)
    result: list = []
    driver = threading.Thread(target=lambda: result.append(standby.drive(run_id)), daemon=True)
    try:
        driver.start()
        until(lambda: any("stands by" in m for m in messages), time_bound)
        said = next(m for m in messages if "stands by" in m)
        assert other.holder in said and f"pid {holder_pid(other.holder)}" in said
        assert "until" in said
        # It writes nothing while it stands by, and `status` names the holder.
        assert store.get_run(run_id).state == "CREATED"
        assert [e.type for e in store.events(run_id)] == ["JOB_SUBMITTED"]
        summary = run_summary(store, run_id)
        assert summary["controller"]["holder"] == other.holder and summary["controller"]["live"]
        assert f"driven by controller {other.holder}" in describe_run(summary)

        # The holder hands the run back (it stopped cleanly) after a cancel: the standby takes
        # it over at once, records the takeover and winds the run down.
        assert request_cancel(store, run_id).applied
        other.release()
        driver.join(timeout=60)
        assert not driver.is_alive()
    finally:
        logging.getLogger("runwright.control.controller").removeHandler(handler)
    assert result[0].state == "CANCELLED"
    (takeover,) = store.events(run_id, types=["CONTROLLER_TAKEOVER"])
    assert takeover.attributes["old_holder"] == other.holder
    assert takeover.attributes["new_holder"] == standby.leases.holder
    assert takeover.attributes["reason"] == "released" and takeover.attributes["epoch"] == 2
    assert store.events(run_id)[-1].type == "RUN_FINISHED"
    lease, _ = store.leases.get(run_id)
    assert lease.holder == standby.leases.holder and lease.released  # handed back on leaving


def test_a_holder_gone_on_this_node_is_taken_over_at_once(store, tmp_path):
    run_id = submit(store, tmp_path)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                           capture_output=True, text=True)  # fmt: skip
    dead = f"somehost:{int(ended.stdout)}:dead00"
    controller = ControllerLeases(store, 30.0)
    # On another node the holder's process cannot be seen: only the expiry frees the lease.
    store.leases.acquire(run_id, dead, 30.0, holder_node="another-node")
    assert take(controller, run_id) is None
    # On this node a holder whose process has ended cannot act: its lease is taken at once.
    store.leases.release(dead, {run_id: 1})
    store.leases.acquire(run_id, dead, 30.0, holder_node=controller.node)
    assert "that process has ended" in describe_run(run_summary(store, run_id))
    result = take(controller, run_id)
    assert result.outcome is LeaseOutcome.TAKEN_OVER and result.previous.holder == dead
    assert controller.holds(run_id)
    # A live holder on this node (this very process) is left alone.
    alive = ControllerLeases(store, 30.0)
    assert take(alive, run_id) is None


class Recorder:
    """An executor that only records what it is asked (nothing may run in this test)."""

    name = "recorder"

    def __init__(self):
        self.calls: list[str] = []

    def launch(self, **kwargs):
        self.calls.append("launch")

    def kill_generations_below(self, root, run_id, generation):
        self.calls.append("kill_generations_below")
        return {}

    def stop(self, group, grace_seconds, worker_pids=None):
        self.calls.append("stop")
        return 0

    def repair_lost(self, group):
        self.calls.append("repair_lost")

    def poll(self, group):
        self.calls.append("poll")
        return None

    def evidence(self, group, lost=None):
        return FailureEvidence()


def test_no_process_is_started_or_ended_once_the_lease_may_have_run_out(
    store, tmp_path, time_bound
):
    run_id = submit(store, tmp_path)
    leases = ControllerLeases(store, 1.0)
    recorder = Recorder()
    executor = LeaseGuardedExecutor(recorder, leases)
    take(leases, run_id)
    acts = {
        "launch": lambda: executor.launch(
            spec=None, run_id=run_id, generation=1, root=tmp_path, workdir=tmp_path,
            rank_manifest=[],
        ),
        "kill_generations_below": lambda: executor.kill_generations_below(tmp_path, run_id, 1),
        "stop": lambda: executor.stop(None, 0.0),
        "repair_lost": lambda: executor.repair_lost(None),
    }  # fmt: skip
    with leases.fenced(run_id):
        executor.kill_generations_below(tmp_path, run_id, 1)
        assert recorder.calls == ["kill_generations_below"]
        # 1 s lease, 20 % safety margin: no act 0.8 s after the acquire began, though the
        # lease itself still has 0.2 s to go and nobody took it.
        held = leases._held[run_id]
        until(lambda: time.monotonic() > held.deadline_monotonic, time_bound)
        for name, act in acts.items():
            with pytest.raises(LeaseLostError, match="starts and stops no process"):
                act()
            assert recorder.calls == ["kill_generations_below"], name
        assert executor.poll(None) is None  # reads go on
        assert executor.name == "recorder"
    # A renewal that still finds the lease its own allows acting again.
    assert leases.renew() == []
    with leases.fenced(run_id):
        executor.stop(None, 0.0)
    assert recorder.calls[-1] == "stop"


def test_a_foreground_submit_holds_the_new_runs_lease_from_its_first_moment(store, tmp_path):
    """`runwright submit` in the foreground records the run through the access layer with its
    own controller: that controller holds the lease from the transaction that creates the run,
    so a daemon sharing the store cannot take it first. Without one (the server, --detach) the
    run waits for whichever controller takes it."""
    spec = spec_from_mapping(yaml.safe_load(SKELETON.read_text()))
    access = Access(store, tmp_path, local_actor())
    mine = Controller(store, tmp_path, lease_seconds=30.0)
    run_id = access.submit(spec, workdir=tmp_path, controller=mine)["run_id"]
    lease, now = store.leases.get(run_id)
    assert lease.holder == mine.leases.holder and lease.epoch == 1 and lease.live(now)
    assert mine.leases.holds(run_id)
    assert take(ControllerLeases(store, 30.0), run_id) is None  # a daemon finds it held

    left = access.submit(spec, workdir=tmp_path)["run_id"]
    assert store.leases.get(left)[0] is None


def test_a_lease_shorter_than_a_second_is_refused_on_the_command_line(tmp_path):
    done = CliRunner().invoke(
        app, ["controller", "--lease-seconds", "0.1", "--root", str(tmp_path)]
    )
    assert done.exit_code == 2 and "--lease-seconds" in done.output
