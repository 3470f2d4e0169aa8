"""`runwright drill` end to end on real runs: the reference trainer at its smallest (one layer,
32 wide, 4 rows of 32 tokens a step) on the tiny dataset, two ranks under torchrun (gloo), the
controller, a real SQLite store, each fault injected from outside.

The default suite drills two faults through the CLI: a SIGKILLed rank (a restart) and a stale
worker (handled while the group trains on: no restart, the cheapest run). The knob faults cost a
restart each, and a collective_block also waits out the progress timeout, which must cover a
busy machine's start-up: they run in the slow test, which runs the whole matrix and checks every
fault ended as the spec's policy calls for.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from runwright_tests_leftovers import assert_nothing_left

from runwright.control.executors.local_group import generation_processes
from runwright.data import build_dataset
from runwright.drill.faults import FAULTS
from runwright.store import Store

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
TINY_GPT = REPO / "src" / "runwright" / "demo" / "tiny_gpt.yaml"


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory) -> Path:
    """The reference trainer's smallest spec: 12 steps, a checkpoint every 4 (faults at step 5,
    after the second checkpoint at 9), a 0.1 s pause after each step so a fault lands before
    the next checkpoint on a busy machine, and a hang noticed after 5 s of silence."""
    root = tmp_path_factory.mktemp("drill-dataset")
    built = build_dataset(REPO / "examples" / "data" / "tiny.yaml", root)
    data = yaml.safe_load(TINY_GPT.read_text())
    data["name"] = "drill-test"
    data["code"]["args"] = ["--step-sleep", "0.1"]
    data["model"].update(
        n_layers=1, d_model=32, n_heads=2, vocab_size=built.manifest.tokenizer.vocab_size
    )
    data["data"].update(
        dataset=str(built.folder),
        manifest_id=built.dataset_id,
        sequence_length=32,
        mixture={"sources": [{"name": "notes", "weight": 1}, {"name": "records", "weight": 1}]},
    )
    data["training"].update(global_batch_samples=4, micro_batch_size=2, steps=12)
    data["training"]["schedule"]["warmup_steps"] = 2
    data["checkpoint"].update(interval={"policy": "steps", "every_steps": 4}, keep_every_steps=None)
    # The progress timeout is also the allowance for a rank's first heartbeat after a launch
    # (the watchdog's): 60 s covers a start-up on a loaded 2-core machine.
    data["recovery"].update(
        heartbeat_interval_seconds=0.5, heartbeat_timeout_seconds=5, progress_timeout_seconds=60
    )
    spec = root / "drill.yaml"
    spec.write_text(yaml.safe_dump(data))
    return spec


def drill(root: Path, spec: Path, faults: str, timeout_seconds: float) -> tuple[int, dict, str]:
    out = root / "drill-out"
    proc = subprocess.run(
        [sys.executable, "-m", "runwright.cli.main", "drill", "--spec", str(spec),
         "--faults", faults, "--out", str(out), "--root", str(root), "--json"],
        capture_output=True, text=True, timeout=timeout_seconds,
    )  # fmt: skip
    assert proc.stdout, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert json.loads((out / "drill.json").read_text()) == report
    return proc.returncode, report, (out / "drill.html").read_text()


def no_process_left(root: Path, report: dict) -> bool:
    """No process of any run, and nothing else either: each fault's run and the reference hold
    nothing once ended (tests/leftovers.py, the drill matrix's leftover check)."""
    runs = [report["reference_run_id"], *(f["run_id"] for f in report["faults"])]
    store = Store.open(root)
    try:
        assert_nothing_left(store, root, *runs)
    finally:
        store.close()
    return all(generation_processes(root, run_id) == {} for run_id in runs)


@pytest.mark.timeout(600)  # three runs and a restart; ~1 min on a quiet 2-core machine
def test_a_killed_rank_and_a_stale_worker_are_drilled_measured_and_shown(tmp_path, tiny_spec):
    code, report, html = drill(tmp_path, tiny_spec, "sigkill_rank,stale_worker", 540)
    killed, stale = report["faults"]
    assert code == 0 and report["ok"], [f["mismatches"] for f in report["faults"]]
    # The kill: classified, restarted from the checkpoint at step 4, the lost steps replayed
    # bit for bit and the run bitwise-equal to the reference.
    assert (killed["fault"], killed["failure_class"], killed["action"]) == (
        "sigkill_rank",
        "node_lost",
        "restart",
    )
    assert killed["injected_step"] >= 5 and killed["restored_step"] == 4
    # Rank 0 may train a step past the report the kill was aimed at before its peer is missed.
    assert killed["lost_steps"] >= killed["injected_step"] - 4 >= 1
    assert killed["lost_seconds"] > 0 and killed["detected_seconds"] > 0
    assert killed["rto_seconds"] > killed["detected_seconds"]
    assert killed["bitwise"] == "yes" and killed["replay_check"] == "verified"
    assert killed["injection"].startswith("SIGKILL to rank 1 (pid ")
    # The stale worker: stopped since the launch, let go at step 5, its save and its step
    # report under generation 0 rejected while generation 1 trained on, nothing lost.
    assert (stale["action"], stale["failure_class"], stale["detected_by"]) == (
        "reject",
        None,
        "STALE_WRITE_REJECTED",
    )
    assert stale["lost_steps"] == 0 and stale["bitwise"] == "yes"
    assert "saved step 5: rejected_stale" in stale["cleanup"]
    # Both runs are in the store under their own ids, next to the one shared reference.
    store = Store.open(tmp_path)
    ids = {report["reference_run_id"], killed["run_id"], stale["run_id"]}
    assert {r.run_id for r in store.list_runs(limit=10)} == ids
    (injected,) = store.events(killed["run_id"], types=["FAULT_INJECTED"])
    assert injected.attributes["fault"] == "sigkill_rank"
    rejected = store.events(stale["run_id"], types=["STALE_WRITE_REJECTED"])
    assert {e.attributes["writer_generation"] for e in rejected} == {0}
    assert [a.generation for a in store.attempts(stale["run_id"])] == [1]
    # The page: the table row and a timeline per fault, with its marks.
    assert html.count('class="chart timeline"') == 2
    assert re.search(r"<td>sigkill_rank</td><td>step \d+ at", html)
    data = json.loads(re.search(r'id="drill-data">(.*?)</script>', html).group(1))
    kinds = {m["kind"] for m in data["faults"][0]["marks"]}
    assert {"injected", "detected", "restored", "first_step", "state"} <= kinds
    assert no_process_left(tmp_path, report)


@pytest.mark.slow
@pytest.mark.timeout(4200)  # fifteen runs, twelve restarts and a 60 s progress timeout
def test_the_whole_matrix_ends_as_the_policy_says(tmp_path, tiny_spec):
    code, report, html = drill(tmp_path, tiny_spec, ",".join(FAULTS), 4100)
    results = {f["fault"]: f for f in report["faults"]}
    assert list(results) == list(FAULTS)
    assert code == 0 and report["ok"], {n: f["mismatches"] for n, f in results.items()}
    damaged = {"data_shard_corrupt", "data_shard_removed"}
    for name, result in results.items():
        assert result["detected_seconds"] is not None, name
        # a damaged shard under the default data.on_corrupt_shard: fail ends the run for good
        assert result["final_state"] == ("FAILED" if name in damaged else "SUCCEEDED"), name
    for name in damaged:
        assert (results[name]["failure_class"], results[name]["terminal_reason"]) == (
            "data",
            "FAILED_PERMANENT",
        )
    # each refused or hung save of step 8 restarts from the checkpoint of step 4, bitwise
    for name in ("storage_timeout", "storage_full", "storage_read_only"):
        assert results[name]["failure_class"] == "storage", name
        assert (results[name]["restored_step"], results[name]["bitwise"]) == (4, "yes"), name
    # The newest committed checkpoint when the injector acted: step 8 at the fault's step 9, or
    # step 12 when a loaded controller acted after the run's last save (load 12-15: it did).
    # Either way the restore refuses it and falls back to the one before.
    corrupt = results["corrupt_checkpoint_shard"]
    corrupted = int(re.search(r"\(step (\d+)\)", corrupt["injection"]).group(1))
    assert corrupt["restored_step"] == corrupted - 4, corrupt["injection"]
    assert "checksum" in corrupt["fallback"] and f"(step {corrupted})" in corrupt["fallback"]
    assert results["sigterm_preemption"]["lost_steps"] == 0
    blocked = results["collective_block"]
    assert blocked["failure_class"] == "no_progress"
    # the steady-state limit, confirmed by the ranks' CPU, well before the 60 s cap
    assert "steady-state limit" in blocked["failure_message"], blocked["failure_message"]
    assert blocked["detected_seconds"] < 60
    assert results["node_lost"]["spec_change"].startswith("resources.nodes 2")
    assert html.count('class="chart timeline"') == len(FAULTS)
    assert no_process_left(tmp_path, report)
