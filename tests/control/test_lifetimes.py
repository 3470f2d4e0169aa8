"""Process lifetimes against real torchrun worker groups (gloo, CPU): a killed supervisor or
torchrun takes its ranks with it, a lost supervisor is the platform's fault (infrastructure),
and a new generation never starts beside a process of an older one."""

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runwright.control.controller import Controller
from runwright.control.executors.local import LocalExecutor
from runwright.control.executors.local_group import generation_tags
from runwright.control.processes import is_alive, processes_tagged
from runwright.layout import run_paths
from runwright.spec import FailureClass, RecoverySpec, spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "small_train.py"
STEP_SLEEP_SECONDS = 0.3


def spec_for(steps, every, step_sleep=STEP_SLEEP_SECONDS, **recovery):
    return spec_from_mapping(
        {
            "name": "lifetime-test",
            "code": {"entrypoint": str(SCRIPT), "args": ["--step-sleep", str(step_sleep)]},
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


def supervisor_pid(root, run_id, generation):
    return int(run_paths(root, run_id).attempt(generation).pid_file.read_text().split()[0])


def processes_of_generations_below(root, run_id, generation):
    """Live processes whose launch environment names this run and an older generation, read
    from /proc here rather than through the executor under test."""
    folder = f"RUNWRIGHT_RUN_DIR={root / 'runs' / run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        gens = [v.split(b"=", 1)[1] for v in env if v.startswith(b"RUNWRIGHT_GENERATION=")]
        if folder in env and state != "Z" and gens and int(gens[0]) < generation:
            found.append(int(entry.name))
    return found


def parent_of(pid):
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def failures_of(store, run_id):
    return [e for e in store.events(run_id) if e.type == "FAILURE_CLASSIFIED"]


def test_lost_supervisors_are_repaired_and_never_run_two_generations(tmp_path):
    """SIGKILL the supervisor of generations 1-2, each at a random time after its first healthy
    step: every loss is infrastructure (not node_lost), no process of an older generation is
    alive when the next one's first worker reports, and the run still succeeds. (Two losses:
    tests/crash/test_run_writers.py kills supervisors at random times many more times.)"""
    losses = 2
    infrastructure = RecoverySpec().policy_for(FailureClass.INFRASTRUCTURE)
    # The default policy for the class, with a short backoff so the test does not wait minutes.
    assert infrastructure.max_retries >= losses and not infrastructure.consumes_error_budget
    policy = {**infrastructure.model_dump(), "backoff_seconds": 0.1}
    spec = spec_for(steps=12, every=2, policies={"infrastructure": policy})
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    killed: dict[int, int] = {}
    older_alive: dict[int, list[int]] = {}

    def on_event(event):
        gen = event.generation
        if event.type == "STEP_HEALTHY" and gen <= losses and gen not in killed:
            pid = supervisor_pid(tmp_path, event.run_id, gen)
            killed[gen] = pid
            # At a random moment within the next two steps of this generation.
            delay = rng.uniform(0, 2 * STEP_SLEEP_SECONDS)
            threading.Timer(delay, os.kill, (pid, signal.SIGKILL)).start()
        elif event.type == "WORKER_STARTED" and gen > 1 and gen not in older_alive:
            older_alive[gen] = processes_of_generations_below(tmp_path, event.run_id, gen)

    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    context = f"seed {seed}; last events {store.events(run.run_id)[-5:]}"
    assert final.state == "SUCCEEDED", context
    assert sorted(killed) == list(range(1, losses + 1)), context
    assert older_alive == {gen: [] for gen in range(2, losses + 2)}, context
    failures = failures_of(store, run.run_id)
    assert [f.attributes["failure_class"] for f in failures] == ["infrastructure"] * losses
    for failure in failures:
        pid = killed[failure.generation]
        assert f"supervisor (pid {pid}) was killed by SIGKILL" in failure.attributes["message"]
        assert "supervisor exit file missing" in failure.attributes["evidence"]
    assert [a.generation for a in store.attempts(run.run_id)] == list(range(1, losses + 2))
    assert store.checkpoints.latest(run.run_id).step == 12


def test_a_sigkilled_torchrun_leaves_no_rank_alive(tmp_path):
    """The controller is held inside the event callback while torchrun is killed, so no sweep of
    the executor can end the ranks; and torchrun is killed just after a step, while the ranks
    sleep between steps, so they do not fail on the lost agent store either before the next
    step's collectives. Only their parent-death signals can end them within half a step."""
    holder: dict = {}
    healthy: list = []

    def on_event(event):
        if event.type != "STEP_HEALTHY" or event.generation != 1 or event.attributes["rank"]:
            return
        healthy.append(event)
        if holder or len(healthy) < 2:
            return
        ranks = [
            int(e.attributes["pid"])
            for e in store.events(event.run_id, types=["WORKER_STARTED"])
            if e.generation == 1
        ]
        step_seconds = healthy[-1].time_unix_s - healthy[-2].time_unix_s
        supervisor = supervisor_pid(tmp_path, event.run_id, 1)
        (torchrun,) = [
            pid
            for pid in processes_tagged(generation_tags(tmp_path, event.run_id, 1))
            if parent_of(pid) == supervisor
        ]
        os.kill(torchrun, signal.SIGKILL)
        killed_at = time.monotonic()
        while any(is_alive(p) for p in ranks) and time.monotonic() - killed_at < step_seconds / 2:
            time.sleep(0.01)
        holder.update(
            ranks=ranks,
            alive=[p for p in ranks if is_alive(p)],
            seconds=time.monotonic() - killed_at,
            bound=step_seconds / 2,
        )

    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=on_event)
    run, _ = controller.submit(spec_for(steps=4, every=2, step_sleep=2.0), tmp_path)
    final = controller.drive(run.run_id)
    assert len(holder["ranks"]) == 2
    assert holder["alive"] == [], f"ranks alive {holder['bound']:.2f} s after torchrun died"
    assert final.state == "SUCCEEDED"
    (failure,) = failures_of(store, run.run_id)
    assert failure.attributes["failure_class"] == "infrastructure"
    assert failure.attributes["message"] == "torchrun was killed by SIGKILL"


def test_launch_kills_every_older_generation_process_even_without_a_parent(tmp_path):
    """The executor's sweep alone (no parent-death signal involved): processes tagged with
    older generations, orphaned to init by a double fork, are killed and waited for; the
    current generation and other runs are left alone."""
    run_id = "sweep-test"
    sleeper = "import time; time.sleep(600)"
    started = []

    def start_orphan(generation, run=run_id):
        env = {**os.environ, **generation_tags(tmp_path, run, generation)}
        # A double fork: the sleeper's parent exits at once, so it is re-parented to init.
        code = (
            "import subprocess, sys\n"
            f"print(subprocess.Popen([sys.executable, '-c', {sleeper!r}], "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        started.append(int(out.stdout))
        return started[-1]

    old = [start_orphan(1), start_orphan(2)]
    current, other_run = start_orphan(3), start_orphan(1, run="another-run")
    try:
        assert all(parent_of(p) != os.getpid() for p in old)
        killed = LocalExecutor().kill_generations_below(tmp_path, run_id, 3)
        assert killed == {1: [old[0]], 2: [old[1]]}
        assert not any(is_alive(p) for p in old)
        assert is_alive(current) and is_alive(other_run)
        assert LocalExecutor().kill_generations_below(tmp_path, run_id, 3) == {}
    finally:
        for pid in started:
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)
