"""Operator actions (issue 25, control/operator.py) on one real run of the reference trainer under
torchrun, driven by a controller in this process while a person acts from the CLI: a rollback to
an older committed checkpoint (the later ones kept and marked abandoned, the replayed steps the
same losses and the same data cursor as the first time), a skipped bad shard (recorded in the
data cursor with the tokens lost), a move to another pool (queued again there) and a stop with a
save. Each has its audit record and its line in the report, with actor, reason and effect. What
cannot be done is refused in words, and the refusal changes nothing."""

import getpass
import json
import threading
import time
from pathlib import Path

import pytest
from runwright_tests_tiny import TINY_DATA, tiny_gpt
from typer.testing import CliRunner

from runwright.ckpt.catalog import scan
from runwright.ckpt.storage import CheckpointStorage
from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.govern.report import render_report
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store
from runwright.store.audit import AuditLog
from runwright.store.fence import run_checkpoint_root

pytestmark = pytest.mark.integration
runner = CliRunner()
WAIT_SECONDS = 300.0
"""Bound of a hang for the run to reach a point (a torchrun start on a busy 2-core machine takes
tens of seconds); not an expected time."""


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    return build_dataset(TINY_DATA, tmp_path_factory.mktemp("dataset"))


def _cli(root: Path, *argv: str):
    """A person's command, in this process, on the same store (its own connection)."""
    result = runner.invoke(app, ["--root", str(root), *argv], env={"RUNWRIGHT_SERVER": ""})
    return result.exit_code, result.output


def _steps(store, run_id, generation):
    """rank 0's (step, loss) of `generation`, in order."""
    return [
        (e.step, e.attributes.get("loss"))
        for e in per_rank(store.events(run_id, types=[EventType.STEP_HEALTHY]))
        if e.generation == generation and e.attributes.get("rank") == 0
    ]


def _wait(store, run_id, until, what, driver):
    deadline = time.monotonic() + WAIT_SECONDS
    while not until(store.get_run(run_id)):
        run = store.get_run(run_id)
        assert driver.is_alive(), f"the controller ended before {what}: {run.state_detail}"
        assert time.monotonic() < deadline, f"{what}: still {run.state} at step {run.last_step}"
        time.sleep(0.1)
    return store.get_run(run_id)


def _live_after(generation, store, run_id, past_step=0):
    """A generation newer than `generation` runs and has trained a step past `past_step` (a
    generation that failed on its own in between, e.g. killed from outside, is restarted by
    recovery: the test does not count on generation numbers)."""

    def until(run):
        if run.generation <= generation or run.state not in ("RUNNING", "CHECKPOINTING"):
            return False
        return any(step > past_step for step, _ in _steps(store, run_id, run.generation))

    return until


def _act(root, store, run_id, *argv):
    """Run a person's command on the live run; returns the generation it was asked of."""
    generation = store.get_run(run_id).generation
    code, out = _cli(root, *argv)
    assert code == 0, out
    return generation


@pytest.mark.timeout(900)  # five groups on a busy 2-core machine: give it room
def test_each_operator_action_on_a_real_run(tmp_path, tiny_dataset):
    (tmp_path / "pools.yaml").write_text("pools: {default: {}, spare: {}}\n")
    data = tiny_gpt(tiny_dataset, steps=400, devices=1, every_steps=4)
    data["code"]["args"] = ["--step-sleep", "0.15"]
    data["checkpoint"].update(keep_last=100, keep_every_steps=None)
    data["recovery"].update(heartbeat_timeout_seconds=60, progress_timeout_seconds=180)
    spec = spec_from_mapping(data)
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    run_id = run.run_id
    driver = threading.Thread(target=controller.drive, args=(run_id,))
    driver.start()
    shard = next(s.name for s in tiny_dataset.manifest.shards if s.split == "train")
    asked_all = False
    try:
        # 1. Roll back to step 4 once step 8 is committed; wait until a later generation has
        # trained past step 8 again and committed it.
        _wait(store, run_id, lambda r: any(c.step >= 8 for c in store.checkpoints.list(
            run_id, status="COMMITTED")), "a checkpoint at step 8", driver)  # fmt: skip
        g_rollback = _act(tmp_path, store, run_id, "rollback", run_id, "--to", "4",
                          "--reason", "bad batch")  # fmt: skip
        _wait(store, run_id, lambda r: any(
            c.step == 8 and c.generation > g_rollback
            for c in store.checkpoints.list(run_id, status="COMMITTED")
        ), "step 8 committed again after the rollback", driver)  # fmt: skip
        # 2. Skip a train shard; 3. move to the spare pool; 4. stop with a save.
        g_skip = _act(tmp_path, store, run_id, "skip-shard", run_id, shard,
                      "--reason", "garbled text")  # fmt: skip
        _wait(store, run_id, _live_after(g_skip, store, run_id), "a restart without it", driver)
        g_move = _act(tmp_path, store, run_id, "move", run_id, "--pool", "spare",
                      "--reason", "rack work")  # fmt: skip
        _wait(store, run_id, _live_after(g_move, store, run_id), "a start in pool spare", driver)
        code, out = _cli(tmp_path, "stop", run_id, "--reason", "enough for today", "--json")
        assert code == 0 and json.loads(out)["outcome"] == "APPLIED", out
        asked_all = True
    finally:
        if not asked_all and driver.is_alive():
            _cli(tmp_path, "cancel", run_id)  # a failed step above: leave nothing running
        driver.join(timeout=WAIT_SECONDS)
    assert not driver.is_alive(), "the stop with a save did not end the run"
    _check_outcome(store, run_id, spec.spec_hash, shard, g_rollback, g_skip)
    store.close()


def _check_outcome(store, run_id, submitted_hash, shard, g_rollback, g_skip):
    """What the four actions left: the run, its checkpoints, its cursor, the audit log and the
    report."""
    me = f"local:{getpass.getuser()}"
    storage = CheckpointStorage(run_checkpoint_root(store.get_run(run_id)))
    final = store.get_run(run_id)
    assert final.state == "CANCELLED" and final.terminal_reason == "USER_CANCELLED", (
        final.state_detail
    )
    applied = {
        e.attributes["action"]: e
        for e in store.events(run_id, types=[EventType.OPERATOR_ACTION_APPLIED])
    }
    assert sorted(applied) == ["move_pool", "rollback", "skip_shard", "stop_with_save"]
    g_stop = applied["stop_with_save"].generation  # the run's own moved on: a cancel bumps it
    stop_step = max(
        e.step
        for e in store.events(run_id, types=[EventType.STOP_ACKNOWLEDGED])
        if e.generation == g_stop
    )
    assert final.state_detail == (
        f"stopped by an operator at step {stop_step} (saved at step {stop_step})"
    )

    # Rollback: gen 1's later checkpoints kept and abandoned; gen 2 restored step 4 and replayed
    # gen 1's steps with the same losses, and committed the same data cursor at step 8.
    committed, _ = scan(storage)
    abandoned = [c for c in committed if c.abandoned is not None]
    assert abandoned and all(
        c.record.generation <= g_rollback and c.record.step > 4 for c in abandoned
    )
    assert applied["rollback"].attributes["abandoned"] == sorted(c.folder for c in abandoned)
    restored = {e.generation: e.step for e in store.events(run_id, types=[EventType.RESTORED])}
    after = min(g for g in restored if g > g_rollback)
    assert restored[after] == 4, restored
    first, again = {}, {}
    for g in range(1, g_skip + 1):
        (first if g <= g_rollback else again).update(_steps(store, run_id, g))
    replayed = sorted(set(first) & set(again))
    assert replayed[:4] == [5, 6, 7, 8], replayed
    assert [again[s] for s in replayed] == [first[s] for s in replayed]
    at_8 = {c.abandoned is None: c.manifest.data_cursor for c in committed if c.record.step == 8}
    assert at_8[True] == at_8[False] and at_8[True] is not None

    # Skip: in the cursor from gen 3's first step on, with the tokens lost counted.
    newest = max((c for c in committed if c.abandoned is None), key=lambda c: c.record.step)
    (skipped,) = [q for q in newest.manifest.data_cursor["quarantined"] if q["shard"] == shard]
    assert skipped["reason"] == "operator"
    assert skipped["from_step"] == restored[min(g for g in restored if g > g_skip)]
    assert skipped["tokens_lost"] > 0, skipped
    (quarantined,) = store.events(run_id, types=[EventType.DATA_SHARD_QUARANTINED])
    assert quarantined.attributes["problems"] == ["skipped by an operator: garbled text"]

    # Move: gen 4 was placed in the spare pool, under a spec that differs in the pool alone.
    pools = [
        e.attributes.get("pool") for e in store.events(run_id, types=[EventType.ALLOCATION_READY])
    ]
    assert pools[-1] == "spare" and pools[0] == "default", pools
    assert final.spec["resources"]["pool"] == "spare" and final.spec_hash != submitted_hash

    # Stop with a save: the newest checkpoint is at the stop step.
    assert newest.record.step == stop_step and newest.record.generation == g_stop
    rows = {c.checkpoint_id: c.status for c in store.checkpoints.list(run_id)}
    assert {rows[c.record.checkpoint_id] for c in abandoned} == {"ABANDONED"}

    # Audit and report: each action with actor, reason and effect.
    audit = AuditLog(store.engine).query(target=run_id)
    asked = [(a.action, a.actor, a.outcome) for a in audit if a.action != "run.cancel"]
    assert asked == [
        (action, me, "ok")
        for action in ("run.rollback", "run.skip_shard", "run.move_pool", "run.stop")
    ], asked
    report, html = render_report(store, run_id)
    lines = [(i.kind, i.actor, i.reason) for i in report.interventions if i.effect]
    assert lines == [
        ("rollback", me, "bad batch"),
        ("skip_shard", me, "garbled text"),
        ("move_pool", me, "rack work"),
        ("stop_with_save", me, "enough for today"),
    ], lines
    effects = {i.kind: i.effect for i in report.interventions if i.effect}
    assert (
        effects["rollback"].startswith("rolled back from step ")
        and "to step 4" in effects["rollback"]
    )
    assert f"skipping shard {shard}" in effects["skip_shard"]
    assert "queued in pool spare" in effects["move_pool"]
    assert "stopped by an operator" in effects["stop_with_save"]
    assert "rack work -&gt; stopped at step" in html or "rack work" in html
