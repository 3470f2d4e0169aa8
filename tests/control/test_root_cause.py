"""The cause of a failure is where the user looks: the classified failure carries the root-cause
rank's last error lines, and `status`, `submit`'s event lines and the report show them."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.controller import Controller
from runwright.control.executors.protocol import FailureEvidence
from runwright.control.failures import classify, error_lines
from runwright.control.summary import describe_run, event_line, run_summary
from runwright.govern.report import collect_report
from runwright.spec import FailureClass, spec_from_mapping
from runwright.store import Store

runner = CliRunner()
SCRIPT = Path(__file__).parent / "scripts" / "exits_with_a_message.py"
TORCHRUN_FAILED = """\
[ERROR] failed (exitcode: 1) local_rank: 0 (pid: 11) of binary: python
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_05:00:00
  host      : vm
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 11)
"""


def test_a_message_the_rank_printed_is_the_cause():
    said = "model.vocab_size=2048 is smaller than the tokenizer's 4096 ids; raise it"
    evidence = FailureEvidence(
        launcher_log=TORCHRUN_FAILED,
        log_tails={
            "rank0/stderr.log": f"W1202 05:00:00.000000 1 torch/distributed/x.py:1] x\n{said}\n",
            "rank1/stderr.log": "unrelated\n",
        },
    )
    verdict = classify(
        exit_code=1,
        watchdog_class=None,
        watchdog_detail="",
        watchdog_rank=None,
        nan_rank_step=None,
        preempted=False,
        evidence=evidence,
        last_step=1,
        ranks_started=2,
        world_size=2,
    )
    assert verdict.failure_class is FailureClass.USER_CODE and verdict.rank == 0
    assert verdict.message == f"rank 0 exited with code 1: {said}"
    assert verdict.error_lines == (said,)  # torchrun's own log line is not the rank's
    assert error_lines(evidence, 11) == ()


def test_rank_keys_do_not_match_a_longer_rank_number():
    evidence = FailureEvidence(log_tails={"node00001/rank11/stderr.log": "eleven\n"})
    assert error_lines(evidence, 1) == ()
    assert error_lines(evidence, 11) == ("eleven",)


@pytest.mark.integration
def test_status_and_the_report_show_what_the_rank_said(tmp_path):
    spec = spec_from_mapping(
        {
            "name": "says-why",
            "code": {"entrypoint": str(SCRIPT)},
            "training": {"global_batch_samples": 2, "steps": 5},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"enabled": False},
            "recovery": {"policies": {"user_code": {"max_retries": 0}}},
        }
    )
    store = Store.open(tmp_path)
    lines: list[str] = []
    controller = Controller(store, tmp_path, poll_seconds=0.1, on_event=lambda e: lines.append(
        event_line(e)))  # fmt: skip
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "FAILED"
    said = "model.vocab_size=2048 is smaller than the tokenizer's 4096 ids; raise it"
    status = describe_run(run_summary(store, run.run_id))
    assert said in status, status
    printed = "\n".join(lines)
    assert "FAILURE_CLASSIFIED" in printed and said in printed
    report, _ = collect_report(store, run.run_id)
    assert any(said in line for i in report.incidents for line in i.error_lines)
    # `runwright logs` prints each rank's own output under its global rank.
    shown = runner.invoke(app, ["logs", run.run_id[:12], "--root", str(tmp_path), "--rank", "1"])
    assert shown.exit_code == 0, shown.output
    assert "rank 1 (node 0) stderr" in shown.output and f"{said} (rank 1 of 2)" in shown.output
    assert "rank 0 (node 0)" not in shown.output
    missing = runner.invoke(app, ["logs", run.run_id, "--root", str(tmp_path), "-g", "7"])
    assert missing.exit_code == 2 and "no generation 7" in missing.output


@pytest.mark.integration
def test_a_rank_that_raises_before_a_collective_is_the_cause_not_the_peer_left_waiting(tmp_path):
    """Rank 0 raises after step 3 (tests/control/scripts/small_train.py --raise-at-step), so
    rank 1 enters step 4's gradient all-reduce alone and waits in it: the failure names rank 0
    and its error, never rank 1 or a collective timeout (seed 000, 8.7)."""
    train = Path(__file__).parent / "scripts" / "small_train.py"
    spec = spec_from_mapping(
        {
            "name": "raises-first",
            "code": {"entrypoint": str(train), "args": ["--raise-at-step", "3"]},
            "training": {"global_batch_samples": 8, "steps": 6, "optimizer": {"lr": 0.01}},
            "resources": {"devices_per_node": 2},
            "checkpoint": {"enabled": False},
            "recovery": {"policies": {"user_code": {"max_retries": 0}}},
        }
    )
    store = Store.open(tmp_path)
    controller = Controller(store, tmp_path, poll_seconds=0.1)
    run, _ = controller.submit(spec, tmp_path)
    final = controller.drive(run.run_id)
    assert final.state == "FAILED"
    (failure,) = store.events(run.run_id, types=["FAILURE_CLASSIFIED"])
    facts = failure.attributes
    assert facts["failure_class"] == FailureClass.USER_CODE and facts["rank"] == 0, facts
    assert "deterministic bug at step 3" in facts["message"], facts
    assert "timeout" not in facts["message"].lower() and not facts.get("attribution"), facts
    store.close()
