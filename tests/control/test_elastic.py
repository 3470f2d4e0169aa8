"""Elastic membership on real torchrun groups (the multi-node local executor, gloo, CPU): a run of
2 nodes x 1 rank loses a node after its first committed checkpoint, continues on the remaining
node with the global batch kept (dp 2 -> 1, accumulation 1 -> 2), grows back to 2 nodes at its
next checkpoint boundary (the local executor has the nodes again at once), and finishes; against
a fixed 2-node run of the same model and data its sample ledger and global batches are identical
and its parameters are within rounding (the reduction order may change, so bitwise equality is
not required)."""

import signal
from pathlib import Path

import pytest
from runwright_tests_tiny import tiny_gpt

from runwright.control.controller import Controller
from runwright.control.executors.local_group import generation_processes, node_tags
from runwright.control.processes import processes_tagged, signal_all
from runwright.data import build_dataset
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.govern.report import collect_report
from runwright.spec import spec_from_mapping
from runwright.store import Store

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
STEPS, EVERY = 16, 4


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    return build_dataset(REPO / "examples" / "data" / "tiny.yaml", tmp_path_factory.mktemp("data"))


def tiny_spec(built, membership):
    """The reference trainer at its smallest on 2 nodes x 1 rank: 4 rows of 32 tokens a step,
    micro-batch 2 (at dp 2: 1 micro-batch per rank; at dp 1: 2, accumulated)."""
    data = tiny_gpt(built, steps=STEPS, devices=1, every_steps=EVERY)
    data["data"]["manifest_id"] = built.dataset_id
    data["training"]["schedule"]["warmup_steps"] = 2
    data["checkpoint"]["keep_every_steps"] = None
    data["resources"]["nodes"] = 2
    data["parallelism"]["membership"] = membership
    # Slow enough that the kill lands before the last checkpoint on a busy machine.
    data["code"]["args"] = ["--step-sleep", "0.3"]
    data["recovery"].update(heartbeat_timeout_seconds=30, progress_timeout_seconds=120)
    return spec_from_mapping(data)


@pytest.mark.timeout(600)  # three groups of up to four processes: give a busy machine room
def test_an_elastic_run_that_loses_a_node_continues_on_one_and_covers_the_same_samples(
    tmp_path, tiny_dataset
):
    elastic = tiny_spec(tiny_dataset, {"mode": "elastic", "min_nodes": 1, "max_nodes": 2})
    store = Store.open(tmp_path)
    plan = {}

    def kill_node_1(event):
        # After the first committed checkpoint, once a later step is reported: SIGKILL node 1's
        # agent and rank (node 0 hosts the rendezvous; either is a lost node).
        if event.generation != 1:
            return
        if event.type == EventType.CHECKPOINT_COMMITTED:
            plan["after"] = max(plan.get("after", 0), int(event.step))
        elif (
            event.type == EventType.STEP_HEALTHY
            and "killed" not in plan
            and event.step > plan.get("after", STEPS)
        ):
            pids = processes_tagged(node_tags(tmp_path, event.run_id, 1, 1))
            signal_all(pids, signal.SIGKILL)
            plan["killed"] = (event.step, pids)

    controller = Controller(store, tmp_path, poll_seconds=0.05, on_event=kill_node_1)
    run, _ = controller.submit(elastic, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "SUCCEEDED", (plan, store.events(run.run_id)[-5:])
    assert plan["killed"][1], plan
    (failure,) = store.events(run.run_id, types=[EventType.FAILURE_CLASSIFIED])
    assert failure.attributes["failure_class"] == "node_lost", failure.attributes
    shrink, grow = store.events(run.run_id, types=[EventType.MEMBERSHIP_CHANGED])
    keys = ("nodes", "world_size", "dp", "micro_batch_size", "grad_accumulation_steps")
    two = dict(zip(keys, (2, 2, 2, 2, 1), strict=True))
    one = dict(zip(keys, (1, 1, 1, 2, 2), strict=True))  # 2 micro-batches of 2, accumulated
    for change, kind, generations, old, new in (
        (shrink, "shrink", (1, 2), two, one),
        (grow, "grow", (2, 3), one, two),
    ):
        a = change.attributes
        assert (a["change"], (a["from_generation"], a["to_generation"])) == (kind, generations)
        assert {k: a["old"][k] for k in keys} == old and {k: a["new"][k] for k in keys} == new
        assert a["old"]["global_batch_samples"] == a["new"]["global_batch_samples"] == 4
    attempts = [(x.generation, x.world_size) for x in store.attempts(run.run_id)]
    assert attempts == [(1, 2), (2, 1), (3, 2)]
    restored = {
        e.generation: (e.step, e.attributes["mode"])
        for e in store.events(run.run_id, types=[EventType.RESTORED])
        if e.attributes.get("rank") == 0
    }
    # Generation 2 resharded the newest checkpoint generation 1 committed (step 4, or a later
    # one when the workers ran ahead of the events the kill waited for); generation 3 the one
    # generation 2 saved when asked to stop for the resize, after its first checkpoint.
    assert restored[2] == (plan["after"], "reshard"), (plan, restored)
    (resize,) = [
        e
        for e in store.events(run.run_id, types=[EventType.STOP_ACKNOWLEDGED])
        if e.attributes.get("reason") == "resize" and e.attributes.get("rank", 0) == 0
    ]
    assert resize.generation == 2 and restored[3] == (resize.step, "reshard"), restored
    assert plan["after"] + EVERY <= resize.step < STEPS
    trained = {
        g: sorted({e.step for e in store.events(run.run_id, types=[EventType.STEP_HEALTHY])
                   if e.generation == g})
        for g in (2, 3)
    }  # fmt: skip
    assert trained[2] == list(range(plan["after"] + 1, resize.step + 1))
    assert trained[3] == list(range(resize.step + 1, STEPS + 1))
    report, _ = collect_report(store, run.run_id)
    assert [m.change for m in report.membership_changes] == ["shrink", "grow"]
    assert generation_processes(tmp_path, run.run_id) == {}

    fixed = tiny_spec(tiny_dataset, {"mode": "fixed"})
    reference = Controller(store, tmp_path, poll_seconds=0.1)
    ref, _ = reference.submit(fixed, tmp_path)
    assert reference.drive(ref.run_id).state == "SUCCEEDED"
    comparison = compare_runs(store, run.run_id, ref.run_id)
    assert comparison.ledger_identical and comparison.global_batches_identical, comparison
    assert comparison.steps_compared == STEPS
    difference = comparison.parameter_difference
    assert difference is not None and difference.tensors > 0, comparison
    assert difference.step_a == difference.step_b == STEPS
    # fp32 sums in another order: rounding-level differences, amplified a little by AdamW over
    # the steps after the reshard; a different sample or batch would be orders of magnitude
    # larger (the learning rate is 3e-3).
    assert difference.relative_l2 < 1e-4, difference
    # Two ranks' halves summed by gloo, or two micro-batches accumulated on one rank: with
    # dp 2 -> 1 the sums may round alike (this model usually ends bit-identical), so either
    # verdict is right; a wider change of size would not be.
    assert comparison.equivalence in ("bitwise-equal", "coverage-equivalent"), comparison
    assert "bitwise equality is not expected" in comparison.note
