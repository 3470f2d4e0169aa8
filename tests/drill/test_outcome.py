"""A fault's figures from a recorded event log (drill/outcome.py), on a fake clock so each one
can be worked out by hand, and the matrix's own checks (drill/faults.py, drill/runner.py).

The SIGKILL log: generation 1 reports steps 1-13 at 10 + step seconds, commits step 10 at 20.2,
rank 1 is killed at 23.5 (after step 13), the controller classifies it at 25.0 and restarts;
generation 2 restores step 10 at 40.0 and reports steps 11-30 at 30 + step seconds.
  detected 25.0 - 23.5 = 1.5 s; lost 13 - 10 = 3 steps, 23.0 - 20.0 = 3.0 s of training;
  RTO: step 11 of generation 2 at 41.0 - 23.5 = 17.5 s.
"""

import json
import re

import pytest

from runwright.cli.drill import FAULT_NAMES
from runwright.drill.faults import FAULTS, Expected, after_failure
from runwright.drill.outcome import measure
from runwright.drill.page import render_page
from runwright.drill.runner import DRILL_SETTINGS, DrillReport, check_faults, fault_step
from runwright.errors import DrillError
from runwright.events import EventType
from runwright.govern.compare import Comparison
from runwright.spec import FailureClass, spec_from_mapping
from runwright.store import EventRecord, RunRecord

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
    knob = FAULTS["collective_block"].adapt(spec, 13)
    assert knob.code.args == ["--block-at-step", "13", "--block-rank", "1"]
    two = FAULTS["node_lost"].adapt(spec, 13)
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
    assert cells[1:9] == ["1.5", "node_lost", "restart", "10", "3", "3.0", "17.5",
                          "SUCCEEDED (COMPLETED)"]  # fmt: skip
