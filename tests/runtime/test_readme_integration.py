"""The README's integration, in a user's own script (examples/train_ddp.py, not the reference
trainer), killed at a random step and recovered under the controller on real torchrun: the
library alone must give it the evidence the reference trainer's run has (restored step and
checkpoint, lost steps, replayed tokens, the consumed-sample ledger, the dataset and mixture, the
final parameter digests), and it must be bitwise the same run as one that was never killed."""

import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from runwright.control.controller import Controller
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.govern.report import collect_report
from runwright.observe.rank_steps import per_rank
from runwright.spec import spec_from_mapping
from runwright.store import Store

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCRIPT = EXAMPLES / "train_ddp.py"


def _readme_snippet() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"From `examples/train_ddp\.py`.*?```python\n(.*?)```", text, re.S)
    assert block, "the README's integration snippet is gone"
    return [line.strip() for line in block.group(1).splitlines() if line.strip() not in ("", "...")]


def test_the_readme_snippet_is_the_example_script():
    """Every line the README shows is a line of the script this file runs, so the tested script
    is the README's integration and cannot drift from it."""
    script = {line.strip() for line in SCRIPT.read_text().splitlines()}
    snippet = _readme_snippet()
    shown = ("runwright.init(", "ctx.checkpointer()", "ckpt.restore(", "ctx.step_healthy(")
    assert all(any(call in line for line in snippet) for call in shown), snippet
    missing = [line for line in snippet if line not in script]
    assert not missing, f"README lines not in {SCRIPT.name}: {missing}"


class KillRankOne:
    """After generation 1's first committed checkpoint at step c, SIGKILL rank 1 once the run
    reports a step drawn at random from (c, c + interval): a kill from outside, at a time the
    script does not choose."""

    def __init__(self, store: Store, run_id: str, interval: int, seed: int) -> None:
        self.store, self.run_id, self.interval = store, run_id, interval
        self.rng = random.Random(seed)
        self.target: int | None = None
        self.killed_after: int | None = None

    def __call__(self, event) -> None:
        if event.generation != 1 or self.killed_after is not None:
            return
        if event.type == EventType.CHECKPOINT_COMMITTED and self.target is None:
            self.target = int(event.step) + self.rng.randint(1, self.interval - 1)
        elif (
            event.type == EventType.STEP_HEALTHY
            and self.target is not None
            and (event.step or 0) >= self.target
        ):
            started = self.store.events(self.run_id, types=[EventType.WORKER_STARTED])
            pid = next(
                int(e.attributes["pid"])
                for e in started
                if e.generation == 1 and e.attributes.get("rank") == 1
            )
            os.kill(pid, signal.SIGKILL)
            self.killed_after = int(event.step)


@pytest.mark.integration
def test_a_user_script_is_killed_and_recovered_with_the_reference_trainers_evidence(tmp_path):
    built = build_dataset(EXAMPLES / "data" / "tiny.yaml", tmp_path)
    data = yaml.safe_load((EXAMPLES / "train_ddp.yaml").read_text())
    data["data"]["dataset"] = str(built.folder)
    data["data"]["manifest_id"] = built.dataset_id
    data["model"]["vocab_size"] = built.manifest.tokenizer.vocab_size
    spec = spec_from_mapping(data, "train_ddp.yaml")
    interval = int(spec.checkpoint.interval.every_steps)
    total = int(spec.plan.total_steps.value)
    tokens_per_step = int(spec.plan.tokens_per_step.value)
    store = Store.open(tmp_path)

    controller = Controller(store, tmp_path, poll_seconds=0.05)
    run, _ = controller.submit(spec, EXAMPLES)
    fault = KillRankOne(store, run.run_id, interval, seed=int(time.time()))
    controller.on_event = fault
    controller.drive(run.run_id)
    reference, _ = Controller(store, tmp_path).submit(spec, EXAMPLES, idempotency_key="reference")
    Controller(store, tmp_path).drive(reference.run_id)

    assert fault.killed_after is not None, "the kill never landed"
    final = store.get_run(run.run_id)
    assert final.state == "SUCCEEDED", final.state_detail
    events = store.events(run.run_id)

    # The checkpointer's restore: generation 2 resumed from the newest commit before the kill.
    commits = {
        e.checkpoint_id: int(e.step)
        for e in events
        if e.type == EventType.CHECKPOINT_COMMITTED and e.generation == 1
    }
    (restored,) = [e for e in events if e.type == EventType.RESTORED and e.generation == 2]
    assert restored.checkpoint_id in commits and commits[restored.checkpoint_id] == restored.step
    reached = max(e.step for e in events if e.type == EventType.STEP_HEALTHY and e.generation == 1)
    assert restored.step == max(s for s in commits.values() if s <= reached)

    # Recovery's figures follow from it: the steps gen 1 did past the restored one were lost.
    (recovered,) = [e for e in events if e.type == EventType.RECOVERY_SUCCEEDED]
    lost = recovered.attributes["lost_steps"]
    assert lost == reached - restored.step
    assert recovered.attributes["replayed_tokens"] == lost * tokens_per_step

    # The report has the reference trainer's evidence chain.
    report, timeline = collect_report(store, run.run_id)
    (incident,) = report.incidents
    assert (incident.restored_step, incident.restored_checkpoint_id) == (
        restored.step,
        restored.checkpoint_id,
    )
    assert (incident.lost_steps, incident.replayed_tokens) == (lost, lost * tokens_per_step)
    assert incident.failure_class is not None and incident.recovered
    assert report.dataset.dataset_id == built.dataset_id
    assert report.dataset.source == "DATA_STAGE_READY event"
    assert report.dataset.tokenizer_hash == built.manifest.tokenizer.sha256
    assert {row.source for row in report.mixture} == {"notes", "records"}
    assert all(row.actual_count for row in report.mixture)
    lineage = {entry.checkpoint_id: entry for entry in report.checkpoint_lineage}
    # generation 2's first commit names the checkpoint it restored as its parent
    first_of_gen2 = min(
        (e for e in report.checkpoint_lineage if e.generation == 2), key=lambda e: e.step
    )
    assert first_of_gen2.parent == restored.checkpoint_id and restored.checkpoint_id in lineage
    assert all(p.device_tokens > 0 for p in timeline.steps)
    assert report.final_metrics.replayed_tokens == sum(
        p.device_tokens for p in timeline.steps if p.replay
    )
    assert {e.type for e in events} >= {
        EventType.DATA_STAGE_READY,
        EventType.MIXTURE_ACTUAL,
        EventType.TRAINING_COMPLETE,
    }

    # And it is the same run as the one never killed: parameters, ledger and loss curve.
    comparison = compare_runs(store, run.run_id, reference.run_id)
    assert comparison.equivalence == "bitwise-equal", comparison.first_difference
    assert comparison.steps_compared == total
    ledger = [
        e.attributes.get("samples")
        for e in per_rank(events)
        if e.type == EventType.STEP_HEALTHY and e.attributes.get("rank") == 0
    ]
    assert all(isinstance(s, list) and len(s) == 2 for s in ledger)
    store.close()
