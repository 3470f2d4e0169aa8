"""Nothing left behind (issue 27): `runwright gc` releases what ended runs still hold, only what
their records say they own, and a second sweep finds nothing.

An ended run (cancelled before it launched: no torchrun needed) is given one leftover of each
kind the cleaner knows, each real: a live process started with the run's launch tags, a node's
temporary folder, a staged checkpoint folder in its checkpoint root, a torch shared-memory
segment named after a (now dead) pid its rank reported, and a lease held by a controller whose
process is gone. Beside them, things that are not its: the same kinds for a run that is still
queued, a shared-memory segment of a pid no run reported, and a folder the store does not know.
The runs that end through the controller (SUCCEEDED, FAILED, CANCELLED, each drill fault) are
checked by `assert_nothing_left` in their own tests (tests/leftovers.py)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from runwright_tests_leftovers import leftovers
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.cancel import request_cancel
from runwright.control.cleaner import RELEASERS, SHM, register_releaser
from runwright.control.controller import Controller
from runwright.control.executors.local_group import generation_tags
from runwright.control.leasing import node_id
from runwright.control.processes import is_alive
from runwright.events import EventType, NewEvent
from runwright.layout import run_paths
from runwright.spec import spec_from_mapping
from runwright.store import Store

SKELETON = Path(__file__).parents[2] / "src" / "runwright" / "demo" / "skeleton.yaml"


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def tagged_sleeper(root: Path, run_id: str) -> subprocess.Popen:
    env = {**os.environ, **generation_tags(root, run_id, 1)}
    return subprocess.Popen(["sleep", "300"], env=env)


def plant(store: Store, root: Path, run_id: str, tag: str) -> dict[str, object]:
    """One leftover of each kind for `run_id`; returns what was planted."""
    paths = run_paths(root, run_id)
    sleeper = tagged_sleeper(root, run_id)
    tmp = paths.attempt(1).node(0).tmp
    tmp.mkdir(parents=True)
    (tmp / "torchelastic_x").mkdir()
    staged = paths.checkpoints / "staging" / "g000001-abcdef012345"
    staged.mkdir(parents=True)
    (staged / "shard.distcp").write_bytes(b"x" * 100)
    rank_pid = dead_pid()
    store.append_event(
        NewEvent(event_id=f"started-{tag}", run_id=run_id, generation=1,
                 type=EventType.WORKER_STARTED, time_unix_s=time.time(),
                 attributes={"rank": 0, "pid": rank_pid}),
        fenced=False,
    )  # fmt: skip
    segment = SHM / f"torch_{rank_pid}_0_{tag}"
    segment.write_bytes(b"")
    return {"sleeper": sleeper, "tmp": tmp, "staged": staged, "segment": segment}


@pytest.mark.integration
def test_gc_releases_only_what_ended_runs_own_and_a_second_sweep_finds_nothing(tmp_path):
    spec = spec_from_mapping(yaml.safe_load(SKELETON.read_text()))
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.05)
    ended, _ = controller.submit(spec, tmp_path)
    request_cancel(store, ended.run_id, "test")
    assert controller.drive(ended.run_id).state == "CANCELLED"
    live, _ = Controller(store, tmp_path).submit(spec, tmp_path, idempotency_key="live")
    assert store.get_run(live.run_id).state not in ("SUCCEEDED", "FAILED", "CANCELLED")

    mine = plant(store, tmp_path, ended.run_id, "ended")
    theirs = plant(store, tmp_path, live.run_id, "live")
    gone_holder = f"elsewhere:{dead_pid()}:abc123"
    store.leases.acquire(ended.run_id, gone_holder, 600.0, holder_node=node_id())
    stranger = SHM / f"torch_{dead_pid()}_0_stranger"
    stranger.write_bytes(b"")
    unknown = tmp_path / "runs" / "not-a-run" / "attempts" / "gen00001" / "nodes" / "x" / "tmp"
    unknown.mkdir(parents=True)
    try:
        gc = ["gc", "--root", str(tmp_path), "--data-cache", str(tmp_path / "cache"), "--json"]
        dry = CliRunner().invoke(app, [*gc, "--dry-run"])
        assert dry.exit_code == 0, dry.output
        report = json.loads(dry.stdout)
        assert report["runs_checked"] == 1 and report["live_runs"] == [live.run_id]
        (cleanup,) = report["cleanups"]
        kinds = sorted(x["kind"] for x in cleanup["found"])
        assert kinds == ["lease-v1", "processes-v1", "shm-v1", "staging-v1", "tmp-v1"], cleanup
        assert cleanup["released"] == [] and mine["sleeper"].poll() is None  # a dry run

        swept = CliRunner().invoke(app, gc)
        assert swept.exit_code == 0, swept.output
        assert json.loads(swept.stdout)["released"] == 5
        assert mine["sleeper"].wait(timeout=30) is not None
        assert not mine["tmp"].exists() and not mine["staged"].exists()
        assert not mine["segment"].exists()
        lease, now = store.leases.get(ended.run_id)
        assert lease is not None and not lease.live(now)
        assert leftovers(store, tmp_path, ended.run_id) == []
        again = CliRunner().invoke(app, gc)
        assert json.loads(again.stdout)["cleanups"] == []

        # Nothing that is not an ended run's was touched.
        assert is_alive(theirs["sleeper"].pid)
        assert theirs["tmp"].exists() and theirs["staged"].exists()
        assert theirs["segment"].exists() and stranger.exists() and unknown.exists()
    finally:
        for planted in (mine, theirs):
            planted["sleeper"].kill()
            planted["sleeper"].wait()
        for segment in (mine["segment"], theirs["segment"], stranger):
            segment.unlink(missing_ok=True)
        store.close()


def test_a_releaser_plugs_in_by_a_new_name_only():
    class Credentials:
        name = "processes-v1"

        def find(self, scope):
            return []

        def release(self, scope, leftover):
            pass

    with pytest.raises(ValueError, match="registered already"):
        register_releaser(Credentials())
    assert next(iter(RELEASERS)) == "processes-v1"  # processes go first: nothing writes after


def test_a_run_that_never_saved_leaves_nothing_to_find(tmp_path):
    """An empty checkpoint folder (the run ended before its first save) is no leftover and no
    error: there is nothing staged in it."""
    spec = spec_from_mapping(yaml.safe_load(SKELETON.read_text()))
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.05)
    run, _ = controller.submit(spec, tmp_path)
    request_cancel(store, run.run_id, "test")
    assert controller.drive(run.run_id).state == "CANCELLED"
    run_paths(tmp_path, run.run_id).checkpoints.mkdir(parents=True, exist_ok=True)
    assert leftovers(store, tmp_path, run.run_id) == []
    store.close()
