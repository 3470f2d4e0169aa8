"""The recovery controller against real torchrun worker groups (gloo, CPU)."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runwright.control.cancel import request_cancel
from runwright.control.controller import Controller
from runwright.control.executors.local import LocalExecutor
from runwright.layout import run_paths
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"


def spec_for(steps=12, every=4, args=(), **recovery):
    return spec_from_mapping(
        {
            "name": "recovery-test",
            "code": {"entrypoint": str(SCRIPT), "args": list(args)},
            "training": {"global_batch_samples": 8, "steps": steps, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"interval": {"policy": "steps", "every_steps": every}, "keep_last": 5},
            "recovery": {
                "heartbeat_interval_seconds": 0.5,
                "heartbeat_timeout_seconds": 4,
                "progress_timeout_seconds": 60,
                **recovery,
            },
        }
    )


def start(tmp_path, spec, on_event=None):
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec, tmp_path)
    return store, controller, run


def step_trigger(step, generation, action):
    """Call `action(event)` once, when `generation` first reports `step` healthy."""
    fired = []

    def on_event(event):
        if (
            not fired
            and event.type == "STEP_HEALTHY"
            and event.generation == generation
            and event.step >= step
        ):
            fired.append(event)
            action(event)

    return on_event


def rank_pid(store, run_id, rank, generation):
    for e in store.events(run_id, types=["WORKER_STARTED"]):
        if e.generation == generation and e.attributes["rank"] == rank:
            return int(e.attributes["pid"])
    raise AssertionError(f"no WORKER_STARTED for rank {rank} of generation {generation}")


def of_type(store, run_id, type_):
    """Events of `type_`, a step row unfolded into its ranks' reports (observe/rank_steps.py)."""
    return [e for e in per_rank(store.events(run_id)) if e.type == type_]


def healthy_steps(store, run_id, generation, rank=0):
    return [
        e.step
        for e in per_rank(store.events(run_id, types=["STEP_HEALTHY"]))
        if e.generation == generation and e.attributes["rank"] == rank
    ]


def test_sigkill_one_rank_recovers_from_last_checkpoint(tmp_path):
    holder = {}
    trigger = step_trigger(
        6, 1, lambda e: os.kill(rank_pid(holder["store"], e.run_id, 1, 1), signal.SIGKILL)
    )
    store, controller, run = start(tmp_path, spec_for(args=["--step-sleep", "0.3"]), trigger)
    holder["store"] = store
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED", store.events(run.run_id)[-5:]
    (failure,) = of_type(store, run.run_id, "FAILURE_CLASSIFIED")
    assert failure.attributes["failure_class"] == "node_lost"
    (recovered,) = of_type(store, run.run_id, "RECOVERY_SUCCEEDED")
    assert recovered.attributes["restored_step"] == 4
    assert recovered.attributes["lost_steps"] == failure.attributes["last_step"] - 4 >= 2
    assert recovered.attributes["recovery_seconds"] > 0
    assert healthy_steps(store, run.run_id, 2) == list(range(5, 13))
    assert [a.generation for a in store.attempts(run.run_id)] == [1, 2]
    assert store.checkpoints.latest(run.run_id).step == 12
    # The run record alone says where the run resumes: the cursor committed at step 12
    # (8 global samples a step).
    assert final.data_cursor == {"samples": 96}
    # The replayed steps reproduced the failed generation's reports, without a second run.
    (verified,) = of_type(store, run.run_id, "RECOVERY_VERIFIED")
    assert verified.generation == 2 and verified.attributes["restored_step"] == 4
    lost = recovered.attributes["lost_steps"]
    assert verified.attributes["replayed_steps"] == lost
    assert verified.attributes["compared"] == 2 * lost and verified.attributes["complete"]


@pytest.mark.replay_diverges
def test_a_nondeterministic_replay_is_caught_naming_the_step_and_alerted(tmp_path):
    holder = {}
    trigger = step_trigger(
        6, 1, lambda e: os.kill(rank_pid(holder["store"], e.run_id, 1, 1), signal.SIGKILL)
    )
    # 12 steps: the group trains on for 6 steps after the first replayed one, so the alert (judged
    # while the group lives) has passes to fire in however late the verdict's ingest is.
    spec = spec_for(steps=12, args=["--step-sleep", "0.2", "--nondeterministic"])
    store, controller, run = start(tmp_path, spec, trigger)
    holder["store"] = store
    final = controller.drive(run.run_id)
    # Each process perturbs its inputs by its pid: the first step replayed after the restore at
    # step 4 differs from what generation 1 reported for it.
    assert final.state == "SUCCEEDED"
    (diverged,) = of_type(store, run.run_id, "RECOVERY_DIVERGED")
    assert diverged.attributes["step"] == 5 and diverged.attributes["restored_step"] == 4
    assert diverged.attributes["loss"] != diverged.attributes["earlier_loss"]
    assert not of_type(store, run.run_id, "RECOVERY_VERIFIED")
    fired = [
        e
        for e in of_type(store, run.run_id, "ALERT_FIRED")
        if e.attributes["rule"] == "recovery_diverged"
    ]
    assert fired and fired[0].attributes["step"] == 5


def test_sigstop_one_rank_is_detected_as_a_hang_and_recovered(tmp_path):
    holder = {}

    def freeze(event):
        pid = rank_pid(holder["store"], event.run_id, 1, 1)
        holder["frozen"] = pid
        os.kill(pid, signal.SIGSTOP)
        holder["at"] = time.monotonic()

    store, controller, run = start(
        tmp_path, spec_for(args=["--step-sleep", "0.2"]), step_trigger(5, 1, freeze)
    )
    holder["store"] = store
    try:
        final = controller.drive(run.run_id)
    finally:
        if "frozen" in holder:
            subprocess.run(["kill", "-CONT", str(holder["frozen"])], check=False)
    assert final.state == "SUCCEEDED"
    (failure,) = of_type(store, run.run_id, "FAILURE_CLASSIFIED")
    assert failure.attributes["failure_class"] == "hang"
    assert failure.attributes["rank"] == 1
    detected = failure.time_unix_s
    # heartbeat timeout 4 s; detection within the timeout plus a few polls and a heartbeat.
    assert detected - of_type(store, run.run_id, "WORKER_STARTED")[0].time_unix_s > 4
    assert of_type(store, run.run_id, "RECOVERY_SUCCEEDED")
    (verified,) = of_type(store, run.run_id, "RECOVERY_VERIFIED")
    assert verified.attributes["complete"]


def test_nan_rolls_back_and_skips_the_batch(tmp_path):
    once = tmp_path / "once"
    store, controller, run = start(
        tmp_path, spec_for(args=["--nan-at-step", "6", "--once-dir", str(once)])
    )
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED"
    (failure,) = of_type(store, run.run_id, "FAILURE_CLASSIFIED")
    assert failure.attributes["failure_class"] == "nan_inf"
    assert of_type(store, run.run_id, "NAN_DETECTED")[0].step == 6
    (started,) = of_type(store, run.run_id, "RECOVERY_STARTED")
    assert started.attributes["skip_steps"] == [6, 6]
    skipped = [
        e.step
        for e in per_rank(store.events(run.run_id, types=["STEP_HEALTHY"]))
        if e.generation == 2 and e.attributes.get("skipped")
    ]
    assert set(skipped) == {6}
    assert healthy_steps(store, run.run_id, 2)[0] == 5  # rolled back to the step-4 checkpoint
    # The script's restore probe (runtime API) validated the step-4 checkpoint before step 5.
    (validated,) = of_type(store, run.run_id, "RESTORE_VALIDATED")
    assert validated.generation == 2 and validated.step == 4


def test_nan_with_fail_policy_fails(tmp_path):
    _, controller, run = start(tmp_path, spec_for(args=["--nan-at-step", "3"], on_nan="fail"))
    final = controller.drive(run.run_id)
    assert final.state == "FAILED" and final.terminal_reason == "FAILED_PERMANENT"


def test_cancel_saves_at_the_stop_step_and_fences(tmp_path):
    holder = {}
    trigger = step_trigger(
        5,
        1,
        lambda e: holder.setdefault(
            "cancel", request_cancel(holder["store"], e.run_id, "test cancel")
        ),
    )
    store, controller, run = start(
        tmp_path, spec_for(steps=200, every=50, args=["--step-sleep", "0.2"]), trigger
    )
    holder["store"] = store
    final = controller.drive(run.run_id)
    assert final.state == "CANCELLED" and final.terminal_reason == "USER_CANCELLED"
    assert final.generation == 2  # bumped by the cancel itself
    latest = store.checkpoints.latest(run.run_id)
    stop = [e for e in of_type(store, run.run_id, "STOP_ACKNOWLEDGED")]
    assert stop and latest is not None and latest.step == stop[0].step >= 5
    assert latest.generation == 2  # published under the token the cancel handed over
    assert of_type(store, run.run_id, "RUN_FINISHED")


def test_sigterm_preemption_saves_and_ends_preempted(tmp_path):
    holder = {}

    def preempt(event):
        for rank in (0, 1):
            os.kill(rank_pid(holder["store"], event.run_id, rank, 1), signal.SIGTERM)

    spec = spec_for(
        steps=200,
        every=50,
        args=["--step-sleep", "0.2"],
        policies={"preemption": {"max_retries": 0}},
    )
    store, controller, run = start(tmp_path, spec, step_trigger(5, 1, preempt))
    holder["store"] = store
    final = controller.drive(run.run_id)
    assert final.state == "CANCELLED" and final.terminal_reason == "PREEMPTED"
    (failure,) = of_type(store, run.run_id, "FAILURE_CLASSIFIED")
    assert failure.attributes["failure_class"] == "preemption"
    latest = store.checkpoints.latest(run.run_id)
    assert (
        latest is not None
        and latest.step == of_type(store, run.run_id, "STOP_ACKNOWLEDGED")[0].step
    )


def test_preemption_requeues_and_finishes(tmp_path):
    holder = {}

    def preempt(event):
        for rank in (0, 1):
            os.kill(rank_pid(holder["store"], event.run_id, rank, 1), signal.SIGTERM)

    store, controller, run = start(
        tmp_path,
        spec_for(steps=10, every=50, args=["--step-sleep", "0.1"]),
        step_trigger(4, 1, preempt),
    )
    holder["store"] = store
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED"
    states = [e.attributes["to_state"] for e in of_type(store, run.run_id, "STATE_CHANGED")]
    assert "QUEUED" in states[states.index("RECOVERING") :]
    resumed = healthy_steps(store, run.run_id, 2)
    assert resumed[0] == of_type(store, run.run_id, "STOP_ACKNOWLEDGED")[0].step + 1
    # Saved at the stop step: nothing to replay, and the verdict says so.
    (verified,) = of_type(store, run.run_id, "RECOVERY_VERIFIED")
    assert verified.attributes["nothing_replayed"] is True


def test_controller_killed_and_restarted_adopts_the_group(tmp_path):
    spec = spec_for(steps=16, every=4, args=["--step-sleep", "0.3"])
    store, _, run = start(tmp_path, spec)
    argv = [
        sys.executable,
        "-m",
        "runwright.cli.main",
        "controller",
        run.run_id,
        "--root",
        str(tmp_path),
    ]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (store.get_run(run.run_id).last_step or 0) < 4:
        time.sleep(0.2)
    first.kill()
    first.wait()
    second = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    final = store.get_run(run.run_id)
    assert final.state == "SUCCEEDED"
    assert [a.generation for a in store.attempts(run.run_id)] == [1]
    assert len(of_type(store, run.run_id, "WORKER_GROUP_LAUNCHED")) == 1
    assert len(of_type(store, run.run_id, "WORKER_GROUP_ADOPTED")) == 1
    assert healthy_steps(store, run.run_id, 1) == list(range(1, 17))
    assert not of_type(store, run.run_id, "STALE_WRITE_REJECTED")


def test_stale_worker_cannot_publish_or_report(tmp_path):
    """A worker of an old generation (e.g. SIGCONT after a restart) keeps computing, but its
    events and its checkpoint publish are rejected and recorded."""
    store, controller, run = start(tmp_path, spec_for(steps=3, every=1))
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED"
    env = {
        **os.environ,
        "RUNWRIGHT_RUN_ID": run.run_id,
        "RUNWRIGHT_GENERATION": "0",
        "RUNWRIGHT_RUN_DIR": str(run_paths(tmp_path, run.run_id).folder),
        "RUNWRIGHT_SPEC_FILE": str(run_paths(tmp_path, run.run_id).spec_file),
        "WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29599",
    }
    code = (
        "import runwright.runtime, torch, torch.distributed as dist\n"
        "from runwright.ckpt import TrainState\n"
        "ctx = runwright.runtime.init(heartbeat=False)\n"
        "dist.init_process_group('gloo')\n"
        "ckpt = ctx.checkpointer()\n"
        "model = torch.nn.Linear(8, 1)\n"
        "r = ckpt.save(99, TrainState(model=model))\n"
        "print('STATUS', r.status)\n"
        "ctx.step_healthy(99, loss=0.0)\n"
        "ctx.close()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert "STATUS" in proc.stdout and "committed" not in proc.stdout.lower(), proc.stderr[-2000:]
    Controller(store, tmp_path)._ingest_and_watch(store.get_run(run.run_id), spec_for())
    after = store.get_run(run.run_id)
    assert after.last_step == 3 and store.checkpoints.latest(run.run_id).step == 3
    rejected = of_type(store, run.run_id, "STALE_WRITE_REJECTED")
    assert {e.attributes["rejected_type"] for e in rejected} >= {"STEP_HEALTHY"}


def race_two_controllers(tmp_path, run_id, executor_type=LocalExecutor, leased=True) -> list[str]:
    """Drive one run from two controllers in two threads; their final states. `leased=False`
    reconciles without the run's lease, so both controllers act on the run at once."""
    results = []

    def drive():
        controller = Controller(Store.open(tmp_path), tmp_path, executor_type(), poll_seconds=0.1)
        if leased:
            results.append(controller.drive(run_id).state)
            return
        while not controller.reconcile(run_id):
            time.sleep(controller.poll_seconds)
        results.append(controller.store.get_run(run_id).state)

    threads = [threading.Thread(target=drive) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_concurrent_threads_never_run_two_groups(tmp_path):
    """Two controllers driving one run: one holds its lease and drives it, the other stands by
    until the run is finished; one launch per generation."""
    store, _, run = start(tmp_path, spec_for(steps=4, every=2))
    assert race_two_controllers(tmp_path, run.run_id) == ["SUCCEEDED", "SUCCEEDED"]
    launched = of_type(store, run.run_id, "WORKER_GROUP_LAUNCHED")
    assert len({e.generation for e in launched}) == len(launched)


class SlowLaunch(LocalExecutor):
    """Holds every launch back, so two racing controllers both find no group to adopt."""

    def launch(self, **kwargs):
        time.sleep(0.5)
        return super().launch(**kwargs)


def test_racing_controllers_claim_a_generation_once_and_the_loser_adopts(tmp_path):
    """Under the run's lease only one controller drives it; the claim on the attempt row is the
    line behind it that keeps one launch per generation when two act on a run at once anyway
    (one whose lease lapsed in the middle of a launch): raced here without the lease."""
    store, _, run = start(tmp_path, spec_for(steps=4, every=2))
    outcome = race_two_controllers(tmp_path, run.run_id, SlowLaunch, leased=False)
    assert outcome == ["SUCCEEDED", "SUCCEEDED"]
    launched = of_type(store, run.run_id, "WORKER_GROUP_LAUNCHED")
    adopted = of_type(store, run.run_id, "WORKER_GROUP_ADOPTED")
    assert len(launched) == 1 and len(adopted) >= 1
    assert {e.generation for e in adopted} == {launched[0].generation}
    assert [a.generation for a in store.attempts(run.run_id)] == [launched[0].generation]


def test_token_budget_stops_at_a_step_boundary_with_a_checkpoint(tmp_path):
    # 8 samples x 128 tokens = 1,024 tokens per step; the limit is reached after step 5.
    spec = spec_from_mapping(
        {
            **spec_for(steps=200, every=50, args=["--step-sleep", "0.2"]).model_dump(mode="json"),
            "budget": {"tokens": 5_000, "warn_fraction": 0.5},
        }
    )
    store, controller, run = start(tmp_path, spec)
    final = controller.drive(run.run_id)
    assert final.state == "CANCELLED" and final.terminal_reason == "BUDGET_EXCEEDED"
    assert of_type(store, run.run_id, "BUDGET_WARNING")[0].attributes["kind"] == "tokens"
    assert of_type(store, run.run_id, "BUDGET_EXCEEDED")
    stop = of_type(store, run.run_id, "STOP_ACKNOWLEDGED")[0]
    assert stop.attributes["reason"] == "budget" and stop.step >= 5
    assert store.checkpoints.latest(run.run_id).step == stop.step
