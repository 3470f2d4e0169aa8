"""A fault's figures from a recorded event log (drill/outcome.py), on a fake clock so each one
can be worked out by hand, and the matrix's own checks (drill/faults.py, drill/runner.py).

The SIGKILL log: generation 1 reports steps 1-13 at 10 + step seconds, commits step 10 at 20.2,
rank 1 is killed at 23.5 (after step 13), the controller classifies it at 25.0 and restarts;
generation 2 restores step 10 at 40.0 and reports steps 11-30 at 30 + step seconds.
  detected 25.0 - 23.5 = 1.5 s; lost 13 - 10 = 3 steps, 23.0 - 20.0 = 3.0 s of training;
  RTO: step 11 of generation 2 at 41.0 - 23.5 = 17.5 s.
"""

import errno
import json
import re
from pathlib import Path

import numpy as np
import pytest

from runwright.ckpt import faultfs
from runwright.cli.drill import FAULT_NAMES
from runwright.data import write_pretokenized
from runwright.drill.faults import FAULTS, Expected, after_failure
from runwright.drill.injectors import Target
from runwright.drill.outcome import measure
from runwright.drill.page import render_page
from runwright.drill.runner import DRILL_SETTINGS, DrillReport, check_faults, fault_step
from runwright.drill.shard_damage import target_shard
from runwright.errors import DrillError
from runwright.events import EventType
from runwright.govern.compare import Comparison
from runwright.spec import FailureClass, spec_from_mapping
from runwright.store import EventRecord, RunRecord, Store

T0 = 1000.0


class Log:
    def __init__(self) -> None:
        self.events: list[EventRecord] = []

    def add(self, at: float, type_: EventType, generation: int = 1, step=None, **attributes):
        self.events.append(
            EventRecord(
                seq=len(self.events) + 1,
                event_id=f"e{len(self.events)}",
                run_id="r",
                generation=generation,
                type=type_,
                step=step,
                time_unix_s=T0 + at,
                attributes=attributes,
            )
        )

    def steps(self, generation: int, first: int, last: int, offset: float) -> None:
        for step in range(first, last + 1):
            self.add(offset + step, EventType.STEP_HEALTHY, generation, step, rank=0, loss=1.0)


def run_record(state="SUCCEEDED", reason="COMPLETED") -> RunRecord:
    return RunRecord(
        run_id="r", name="drill", spec_hash="h", spec={}, plan={}, idempotency_key=None,
        generation=2, state=state, terminal_reason=reason, state_detail="done", workdir=".",
        root=".", allocation=None, rank_manifest=None, last_heartbeat_unix_s=None, last_step=30,
        latest_checkpoint_id=None, data_cursor=None, created_unix_s=T0, updated_unix_s=T0 + 70,
    )  # fmt: skip


def comparison(equivalence="bitwise-equal", first=None) -> Comparison:
    return Comparison(
        run_a="r", run_b="ref", equivalence=equivalence, first_difference=first,
        parameters_compared=10, steps_compared=30, restored_steps=[10],
    )  # fmt: skip


def sigkill_log() -> Log:
    log = Log()
    log.add(0.0, EventType.JOB_SUBMITTED, 0)
    log.add(5.0, EventType.STATE_CHANGED, 1, from_state="STARTING", to_state="RUNNING")
    log.steps(1, 1, 10, offset=10.0)
    log.add(20.2, EventType.CHECKPOINT_COMMITTED, 1, 10)
    log.steps(1, 11, 13, offset=10.0)
    log.add(23.5, EventType.FAULT_INJECTED, 1, 13, fault="sigkill_rank", detail="SIGKILL")
    log.add(25.0, EventType.FAILURE_CLASSIFIED, 1, failure_class="node_lost", message="killed")
    log.add(25.1, EventType.RECOVERY_STARTED, 1, action="restart", reason="node_lost retry 1/3")
    log.add(26.2, EventType.STATE_CHANGED, 2, from_state="RECOVERING", to_state="STARTING")
    log.add(40.0, EventType.RESTORED, 2, 10, rank=0)
    log.steps(2, 11, 11, offset=30.0)
    log.add(41.2, EventType.RECOVERY_SUCCEEDED, 2, lost_steps=3, restored_step=10)
    log.add(41.3, EventType.RECOVERY_VERIFIED, 2, verified_generation=2, replayed_steps=2,
            compared=4, restored_step=10)  # fmt: skip
    log.steps(2, 12, 30, offset=30.0)
    return log


def measured(log: Log, expected: Expected, compared=None, run=None, **more):
    return measure(
        fault="sigkill_rank",
        mechanism="SIGKILL",
        expected=expected,
        detected_by=more.pop("detected_by", (EventType.FAILURE_CLASSIFIED,)),
        run=run or run_record(),
        events=log.events,
        comparison=compared,
        wall_seconds=70.0,
        **more,
    )


RESTART = Expected(state="SUCCEEDED", failure_class="node_lost", action="restart", bitwise=True)


def test_a_recovered_kill_has_its_detection_rpo_rto_and_replay_verdict():
    result = measured(sigkill_log(), RESTART, comparison())
    assert result.ok, result.mismatches
    assert (result.injected_step, result.injected_unix_s) == (13, T0 + 23.5)
    assert result.detected_seconds == pytest.approx(1.5)
    assert result.detected_by == EventType.FAILURE_CLASSIFIED
    assert (result.failure_class, result.action, result.restored_step) == (
        "node_lost",
        "restart",
        10,
    )
    assert result.lost_steps == 3 and result.lost_seconds == pytest.approx(3.0)
    assert result.rto_seconds == pytest.approx(41.0 - 23.5)
    assert result.replay_check == "verified" and result.bitwise == "yes"
    kinds = [m.kind for m in result.marks]
    assert kinds.index("injected") < kinds.index("detected") < kinds.index("first_step")
    first = next(m for m in result.marks if m.kind == "first_step")
    assert first.seconds == pytest.approx(41.0) and "11" in first.label
    assert [s.generation for s in result.steps].count(2) == 20  # steps 11-30 of generation 2


def test_each_difference_from_the_expectation_is_named():
    expected = RESTART.model_copy(update={"fallback": True, "failure_class": "hang"})
    result = measured(sigkill_log(), expected, comparison("different", "loss:step 11"))
    assert not result.ok and result.bitwise == "no"
    assert result.mismatches == (
        "classified node_lost, expected hang",
        "different to the reference, expected bitwise",
        "no restore refused the corrupt checkpoint (no RESTORE_FALLBACK)",
    )
    stopped = measured(sigkill_log(), RESTART, None, run_record("FAILED", "FAILED_RECOVERABLE"))
    assert stopped.mismatches[0].startswith("ended FAILED (done), expected SUCCEEDED")
    assert stopped.bitwise == "not compared"


def test_a_fault_never_injected_is_not_as_expected_whatever_the_run_did():
    log = Log()
    log.steps(1, 1, 30, offset=10.0)
    result = measured(log, RESTART, comparison(), injection_error="the injection failed: boom")
    assert result.mismatches == (
        "the injection failed: boom",
        "never injected: the run ended before the fault's step",
    )
    assert result.detected_seconds is None and result.rto_seconds is None


def test_a_requeue_and_a_skipped_nan_read_from_their_events():
    log = sigkill_log()
    log.add(25.5, EventType.STATE_CHANGED, 1, from_state="RECOVERING", to_state="QUEUED")
    result = measured(log, RESTART.model_copy(update={"action": "requeue"}), comparison())
    assert result.action == "requeue" and result.ok
    nan = after_failure(FailureClass.NAN_INF, spec_from_mapping(SMALL))
    assert (nan.state, nan.action, nan.bitwise) == ("SUCCEEDED", "restart", False)
    different = measured(sigkill_log(), nan.model_copy(update={"failure_class": "node_lost"}),
                         comparison("different", "loss:step 13"))  # fmt: skip
    assert different.ok and different.bitwise == "not expected (no)"


def test_a_fault_handled_live_loses_nothing():
    log = Log()
    log.steps(1, 1, 13, offset=10.0)
    log.add(23.5, EventType.FAULT_INJECTED, 1, 13, fault="stale_worker", detail="SIGCONT")
    log.add(26.0, EventType.STALE_WRITE_REJECTED, 1, rejected_type="STEP_HEALTHY",
            writer_generation=0)  # fmt: skip
    log.steps(1, 14, 30, offset=10.0)
    expected = FAULTS["stale_worker"].expect(spec_from_mapping(SMALL))
    result = measured(log, expected, comparison(), detected_by=(EventType.STALE_WRITE_REJECTED,))
    assert result.ok, result.mismatches
    assert (result.action, result.lost_steps, result.lost_seconds) == ("reject", 0, 0.0)
    assert result.detected_seconds == pytest.approx(2.5) and result.rto_seconds is None


SMALL = {
    "name": "drill-check",
    "code": {"entrypoint": "module:runwright.train"},
    "training": {"global_batch_samples": 8, "steps": 30},
    "resources": {"devices_per_node": 2},
    "checkpoint": {"interval": {"policy": "steps", "every_steps": 10}},
}


def test_the_policy_decides_what_is_expected():
    nan_fails = spec_from_mapping({**SMALL, "recovery": {"on_nan": "fail"}})
    assert FAULTS["nan_at_step"].expect(nan_fails).model_dump() == {
        "state": "FAILED", "terminal_reason": "FAILED_PERMANENT", "failure_class": "nan_inf",
        "action": "fail", "bitwise": False, "fallback": False,
    }  # fmt: skip
    no_requeue = spec_from_mapping(
        {**SMALL, "recovery": {"policies": {"preemption": {"max_retries": 0}}}}
    )
    stop = FAULTS["sigterm_preemption"].expect(no_requeue)
    assert (stop.state, stop.terminal_reason, stop.action) == ("CANCELLED", "PREEMPTED", "stop")
    no_budget = spec_from_mapping({**SMALL, "recovery": {"max_total_restarts": 0}})
    hang = FAULTS["sigstop_rank"].expect(no_budget)
    assert (hang.state, hang.terminal_reason, hang.action) == (
        "FAILED",
        "FAILED_RECOVERABLE",
        "fail",
    )
    assert FAULTS["sigterm_preemption"].expect(no_budget).state == "SUCCEEDED"  # spends none
    assert FAULTS["corrupt_checkpoint_shard"].expect(spec_from_mapping(SMALL)).fallback


def test_a_drill_that_cannot_run_says_why_before_anything_starts():
    spec = spec_from_mapping(SMALL)
    assert [f.name for f in check_faults(spec, ["nan_at_step", "sigkill_rank"])] == [
        "nan_at_step",
        "sigkill_rank",
    ]
    assert fault_step(spec, FAULTS["sigkill_rank"]) == 13  # after step 10, a third of 10 on
    assert fault_step(spec, FAULTS["corrupt_checkpoint_shard"]) == 23
    with pytest.raises(DrillError, match=r"unknown fault.*no_such.*sigkill_rank"):
        check_faults(spec, ["no_such"])
    script = spec_from_mapping({**SMALL, "code": {"entrypoint": "train.py"}, "training": {
        "global_batch_samples": 8, "steps": 20}})  # fmt: skip
    with pytest.raises(DrillError) as refused:
        check_faults(script, ["collective_block", "corrupt_checkpoint_shard"])
    text = str(refused.value)
    assert "collective_block fires a fault knob of the reference trainer" in text
    assert "set training.steps >= 25" in text
    odd = spec_from_mapping(
        {
            **SMALL,
            "resources": {"devices_per_node": 3},
            "training": {"global_batch_samples": 6, "steps": 30},
        }
    )
    with pytest.raises(DrillError, match="devices_per_node=3 over two nodes"):
        check_faults(odd, ["node_lost"])
    alone = spec_from_mapping({**SMALL, "resources": {"devices_per_node": 1}})
    with pytest.raises(DrillError, match="a world of 1"):
        check_faults(alone, ["sigkill_rank"])


def test_the_cli_lists_the_matrix_and_the_adapted_specs_differ_only_by_the_fault():
    assert list(FAULT_NAMES) == list(FAULTS)
    spec = spec_from_mapping(SMALL)
    knob = FAULTS["collective_block"].adapt(spec, 13, Path("unused"))
    assert knob.code.args == ["--block-at-step", "13", "--block-rank", "1"]
    two = FAULTS["node_lost"].adapt(spec, 13, Path("unused"))
    assert (two.resources.nodes, two.resources.devices_per_node) == (2, 1)
    assert two.resources.world_size == spec.resources.world_size
    assert (
        DRILL_SETTINGS["training"]["steps"]
        >= fault_step(
            spec_from_mapping({**SMALL, "training": {"global_batch_samples": 8, "steps": 30}}),
            FAULTS["corrupt_checkpoint_shard"],
        )
        + 2
    )


def test_the_page_has_the_table_and_a_timeline_per_fault_and_escapes_what_it_shows():
    result = measured(sigkill_log(), RESTART, comparison())
    hostile = result.model_copy(update={"fault": "</script><b>x", "ok": False,
                                        "mismatches": ("<i>why</i>",)})  # fmt: skip
    report = DrillReport(
        drill_id="drill-1", spec_name="drill", spec_hash="a" * 64, reference_run_id="ref",
        reference_wall_seconds=40.0, faults=[result, hostile], ok=False, started_unix_s=T0,
        wall_seconds=200.0, json_path="drill.json", html_path="drill.html",
    )  # fmt: skip
    html = render_page(report)
    assert html.count('class="chart timeline"') == 2
    assert "1 fault(s) did NOT end as expected" in html
    assert "<b>x" not in html and "&lt;i&gt;why&lt;/i&gt;" in html
    block = re.search(r'<script type="application/json" id="drill-data">(.*?)</script>', html)
    data = json.loads(block.group(1))
    assert [f["name"] for f in data["faults"]] == ["sigkill_rank", "</script><b>x"]
    assert data["faults"][0]["steps"][0] == {"seconds": 11.0, "step": 1, "generation": 1}
    assert "Plotly.newPlot" in html and "https://" not in html.split("<script>")[0]
    row = re.search(r"<tr><td>sigkill_rank</td>(.*?)</tr>", html).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[1:10] == ["1.5", "node_lost", "restart", "10", "3", "3.0", "-", "17.5",
                           "SUCCEEDED (COMPLETED)"]  # fmt: skip


# -- the storage and data faults (issue 16) ----------------------------------------------------

STORAGE = ("storage_full", "storage_read_only")
DATA = ("data_shard_corrupt", "data_shard_removed")


def spec(**sections):
    return spec_from_mapping({**SMALL, **sections})


def test_a_refused_save_follows_on_save_failure_and_a_hung_one_always_stops():
    skip = spec(checkpoint={**SMALL["checkpoint"], "on_save_failure": "skip"})
    for name in STORAGE:
        stop = FAULTS[name].expect(spec())
        assert (stop.state, stop.failure_class, stop.action, stop.bitwise) == (
            "SUCCEEDED", "storage", "restart", True,
        )  # fmt: skip
        skipped = FAULTS[name].expect(skip)
        assert (skipped.state, skipped.failure_class, skipped.action, skipped.bitwise) == (
            "SUCCEEDED", None, "skip", True,
        )  # fmt: skip
    # save_timeout_seconds is not skippable (ckpt/checkpointer.py)
    hung = FAULTS["storage_timeout"].expect(skip)
    assert (hung.failure_class, hung.action, hung.bitwise) == ("storage", "restart", True)
    none_left = spec(recovery={"policies": {"storage": {"max_retries": 0}}})
    stopped = FAULTS["storage_full"].expect(none_left)
    assert (stopped.state, stopped.terminal_reason, stopped.action) == (
        "FAILED", "FAILED_RECOVERABLE", "fail",
    )  # fmt: skip


def test_a_damaged_shard_fails_for_good_or_is_quarantined_and_changes_the_run():
    for name in DATA:
        failed = FAULTS[name].expect(spec())
        # data is deterministic (max_retries 1): the restart finds the same damage at open
        assert (failed.state, failed.terminal_reason, failed.failure_class, failed.action) == (
            "FAILED", "FAILED_PERMANENT", "data", "restart",
        )  # fmt: skip
        at_once = FAULTS[name].expect(spec(recovery={"policies": {"data": {"max_retries": 0}}}))
        assert (at_once.terminal_reason, at_once.action) == ("FAILED_PERMANENT", "fail")
        skip = FAULTS[name].expect(spec(data={"on_corrupt_shard": "skip"}))
        assert (skip.state, skip.failure_class, skip.action, skip.bitwise) == (
            "SUCCEEDED", None, "quarantine", False,
        )  # fmt: skip


def test_a_skipped_save_is_detected_and_loses_nothing():
    log = Log()
    log.steps(1, 1, 13, offset=10.0)
    log.add(23.5, EventType.FAULT_INJECTED, 1, 13, fault="storage_full", detail="full armed")
    log.steps(1, 14, 20, offset=10.0)
    log.add(30.4, EventType.CHECKPOINT_FAILED, 1, 20, errno=errno.ENOSPC, error="No space left",
            on_save_failure="skip")  # fmt: skip
    log.steps(1, 21, 30, offset=10.0)
    skip = spec(checkpoint={**SMALL["checkpoint"], "on_save_failure": "skip"})
    detected_by = FAULTS["storage_full"].detected_by
    result = measured(log, FAULTS["storage_full"].expect(skip), comparison(),
                      detected_by=detected_by)  # fmt: skip
    assert result.ok, result.mismatches
    assert (result.action, result.detected_by, result.lost_steps) == (
        "skip", "CHECKPOINT_FAILED", 0,
    )  # fmt: skip
    assert result.detected_seconds == pytest.approx(6.9)
    assert any(m.kind == "save_failed" and "No space left" in m.label for m in result.marks)


def quarantine_log() -> Log:
    log = Log()
    log.steps(1, 1, 13, offset=10.0)
    log.add(23.5, EventType.FAULT_INJECTED, 1, 13, fault="data_shard_corrupt", detail="bytes")
    log.add(24.8, EventType.DATA_SHARD_QUARANTINED, 1, 15, shard="code-train-00001",
            source="code", reason="corrupt", problems=["sha256 differs"])  # fmt: skip
    for step in range(14, 31):
        lost = {"code-train-00001": {"documents": 3 * (step - 13), "tokens": 400 * (step - 13)}}
        log.add(10.0 + step, EventType.STEP_HEALTHY, 1, step, rank=0, loss=1.0, data_lost=lost)
    return log


def test_a_quarantine_differs_from_the_reference_and_the_report_shows_the_tokens_lost():
    expected = FAULTS["data_shard_corrupt"].expect(spec(data={"on_corrupt_shard": "skip"}))
    result = measured(quarantine_log(), expected, comparison("different", "loss:step 15"),
                      detected_by=FAULTS["data_shard_corrupt"].detected_by)  # fmt: skip
    assert result.ok, result.mismatches
    assert (result.action, result.detected_by) == ("quarantine", "DATA_SHARD_QUARANTINED")
    assert result.bitwise == "not expected (no)" and result.tokens_lost == 6800
    assert (
        result.data_lost == "code-train-00001 (corrupt, from step 15): 51 documents, 6,800 tokens"
    )
    # ... and a quarantine nobody asked for (the spec says fail) is named as a difference
    detected_by = FAULTS["data_shard_corrupt"].detected_by
    wrong = measured(quarantine_log(), FAULTS["data_shard_corrupt"].expect(spec()),
                     comparison("different"), detected_by=detected_by)  # fmt: skip
    assert not wrong.ok and "ended SUCCEEDED (done), expected FAILED" in wrong.mismatches
    report = DrillReport(
        drill_id="d", spec_name="s", spec_hash="0" * 64, reference_run_id="ref",
        reference_wall_seconds=1.0, faults=[result], ok=True, started_unix_s=0.0,
        wall_seconds=1.0, json_path="d.json", html_path="d.html",
    )  # fmt: skip
    html = render_page(report)
    assert "<th>data lost tokens</th>" in html and "<td>6,800</td>" in html
    assert "51 documents, 6,800 tokens" in html


def step_event(step: int) -> EventRecord:
    return EventRecord(
        seq=1, event_id="e", run_id="r", generation=1, type=EventType.STEP_HEALTHY, step=step,
        time_unix_s=0.0, attributes={"rank": 0},
    )  # fmt: skip


def target(tmp_path: Path, store: Store, faulted) -> Target:
    return Target(store=store, root=tmp_path, run_id="r", step=13, checkpoints_before=0,
                  folder=tmp_path / "fault", spec=faulted)  # fmt: skip


def test_the_storage_fault_is_armed_for_one_operation_of_generation_one_saves_only(tmp_path):
    store = Store.open(tmp_path)
    faulted = FAULTS["storage_timeout"].adapt(spec(), 13, tmp_path / "fault")
    control = tmp_path / "fault" / "faultfs.json"
    assert faulted.checkpoint.location == f"faulty+file://{tmp_path}/fault/faulty-checkpoints"
    assert faulted.environment.env == {"RUNWRIGHT_FAULTFS_CONTROL": str(control)}
    assert faulted.checkpoint.save_timeout_seconds == 3.0
    injector = FAULTS["storage_timeout"].injector(target(tmp_path, store, faulted))
    injection = injector(step_event(13))
    assert injection is not None and "timeout armed" in injection.detail
    ckpt = f"{tmp_path}/fault/faulty-checkpoints/r"
    assert faultfs.take("write", f"{ckpt}/0000000020-g000002-ab/0.distcp", control) is None
    hung = faultfs.take("write", f"{ckpt}/0000000020-g000001-ab/0.distcp", control)
    assert hung is not None and hung.seconds == 60.0
    assert faultfs.take("write", f"{ckpt}/0000000020-g000001-ab/1.distcp", control) is None
    assert injector.finish() is None  # spent: nothing left to disarm
    store.close()


@pytest.fixture
def dataset(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    docs = {
        name: [rng.integers(1, 200, size=int(rng.integers(10, 40))) for _ in range(count)]
        for name, count in (("code", 30), ("prose", 10))
    }
    folder = tmp_path / "ds"
    write_pretokenized(folder, docs, vocab_size=200, max_tokens_per_shard=300)
    return folder


@pytest.mark.parametrize("name", DATA)
def test_a_shard_is_damaged_in_the_runs_copy_and_never_in_the_shared_dataset(
    tmp_path, dataset, name
):
    store = Store.open(tmp_path)
    mixture = {"sources": [{"name": "code", "weight": 0.7}, {"name": "prose", "weight": 0.3}]}
    drilled = spec(data={"dataset": str(dataset), "mixture": mixture})
    before = {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()}
    faulted = FAULTS[name].adapt(drilled, 13, tmp_path / "fault")
    copy = tmp_path / "fault" / "dataset"
    assert faulted.data.dataset == str(copy)
    shard = target_shard(faulted, copy)
    assert shard.startswith("code-train-")
    injection = FAULTS[name].injector(target(tmp_path, store, faulted))(step_event(13))
    assert injection is not None and shard in injection.detail
    if name == "data_shard_removed":
        assert not (copy / f"{shard}.bin").exists() and not (copy / f"{shard}.idx").exists()
    else:
        assert (copy / f"{shard}.bin").read_bytes()[:16] == b"\xff" * 16
    assert {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()} == before
    store.close()


def test_a_data_fault_needs_a_local_dataset():
    with pytest.raises(DrillError, match=r"data_shard_corrupt damages a shard of data\.dataset"):
        check_faults(spec(), ["data_shard_corrupt"])
    remote = spec(data={"dataset": "s3://bucket/ds"})
    with pytest.raises(DrillError, match=r"data\.dataset is 's3://bucket/ds'"):
        check_faults(remote, ["data_shard_removed"])
