"""Failure classification, per-class retry policy and the watchdog, as pure decisions."""

import json

from runwright.control.executors.protocol import EXIT_LOST
from runwright.control.executors.torchrun_logs import evidence_from
from runwright.control.failures import classify
from runwright.control.policy import PastFailure, decide
from runwright.control.watchdog import Watchdog
from runwright.spec import FailureClass, RecoverySpec

TORCHRUN_ROOT = """Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_15:10:44
  host      : localhost
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 17079)
"""


def write_error(log_dir, rank, message, timestamp):
    folder = log_dir / "rdzv" / "attempt_0" / str(rank)
    folder.mkdir(parents=True)
    (folder / "error.json").write_text(
        json.dumps(
            {
                "message": {
                    "message": message,
                    "extraInfo": {
                        "py_callstack": f"Traceback...\n{message}\n",
                        "timestamp": str(timestamp),
                    },
                }
            }
        )
    )


def run_classify(tmp_path, torchrun_log="", lost=None, **kw):
    """classify() on the evidence the local executor reads from a torchrun log folder."""
    args = {
        "exit_code": 1,
        "watchdog_class": None,
        "watchdog_detail": "",
        "watchdog_rank": None,
        "nan_rank_step": None,
        "preempted": False,
        "evidence": evidence_from(tmp_path, torchrun_log, lost),
        "last_step": 7,
        "ranks_started": 2,
        "world_size": 2,
    }
    return classify(**{**args, **kw})


def test_first_failing_rank_wins_over_later_timeouts(tmp_path):
    write_error(tmp_path, 0, "RuntimeError: Gloo connection closed by peer", 200)
    write_error(tmp_path, 1, "KeyError: 'weight'", 100)
    verdict = run_classify(tmp_path)
    assert verdict.failure_class is FailureClass.USER_CODE and verdict.rank == 1
    assert verdict.deterministic


def test_root_cause_signal_means_a_lost_process(tmp_path):
    write_error(tmp_path, 0, "RuntimeError: Connection closed by peer", 100)
    verdict = run_classify(tmp_path, torchrun_log=TORCHRUN_ROOT.format(rank=1, code=-9))
    assert verdict.failure_class is FailureClass.NODE_LOST and verdict.rank == 1


def test_a_sigkilled_rank_beats_the_sigterm_torchrun_sent_its_survivors(tmp_path):
    """torchrun may name a survivor it SIGTERMed as the root cause of a SIGKILLed rank."""
    log = (
        "Failures:\n[1]:\n  host : localhost\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -9 (pid: 14459)  (SIGKILL)\n" + TORCHRUN_ROOT.format(rank=0, code=-15)
    )
    verdict = run_classify(tmp_path, torchrun_log=log)
    assert verdict.failure_class is FailureClass.NODE_LOST and verdict.rank == 1
    only_sigterm = run_classify(tmp_path, torchrun_log=TORCHRUN_ROOT.format(rank=0, code=-15))
    assert only_sigterm.failure_class is FailureClass.PREEMPTION


def test_error_patterns(tmp_path):
    cases = {
        "torch.OutOfMemoryError: CUDA out of memory": FailureClass.OOM,
        "runwright.data.errors.ShardCorruptError: shard 3": FailureClass.DATA,
        "OSError: [Errno 28] No space left on device": FailureClass.STORAGE,
        "torch.distributed.DistNetworkError: connect failed": FailureClass.INFRASTRUCTURE,
        "NonFiniteError: non-finite loss=nan": FailureClass.NAN_INF,
    }
    for i, (message, expected) in enumerate(cases.items()):
        log_dir = tmp_path / str(i)
        write_error(log_dir, 0, message, 1)
        assert run_classify(log_dir).failure_class is expected, message


def test_evidence_order(tmp_path):
    hang = run_classify(
        tmp_path, watchdog_class=FailureClass.HANG, watchdog_rank=1, watchdog_detail="rank 1 silent"
    )
    assert hang.failure_class is FailureClass.HANG and hang.rank == 1
    assert run_classify(tmp_path, preempted=True).failure_class is FailureClass.PREEMPTION
    nan = run_classify(tmp_path, nan_rank_step=(1, 5))
    assert nan.failure_class is FailureClass.NAN_INF and nan.step == 5
    assert run_classify(tmp_path, exit_code=EXIT_LOST).failure_class is FailureClass.NODE_LOST
    early = run_classify(tmp_path, ranks_started=0)
    assert early.failure_class is FailureClass.INFRASTRUCTURE


def past(cls, signature="sig", restored=0, last=5):
    return PastFailure(
        failure_class=cls, signature=signature, restored_step=restored, last_step=last
    )


def test_policy_retries_per_class_with_backoff(tmp_path):
    rec = RecoverySpec()
    hang = run_classify(tmp_path, watchdog_class=FailureClass.HANG, last_step=9)
    first = decide(rec, hang, [], restored_step=4)
    assert first.action == "restart" and first.backoff_seconds == 1.0
    second = decide(rec, hang, [past(FailureClass.HANG, restored=4, last=9)], restored_step=9)
    assert second.action == "restart" and second.backoff_seconds == 2.0
    exhausted = decide(rec, hang, [past(FailureClass.HANG)] * 3, restored_step=0)
    assert exhausted.action == "fail" and exhausted.terminal_reason == "FAILED_RECOVERABLE"


def test_repeated_deterministic_failure_is_permanent(tmp_path):
    write_error(tmp_path, 0, "ValueError: bad", 1)
    failure = run_classify(tmp_path)
    history = [past(FailureClass.USER_CODE, signature=failure.signature)]
    decision = decide(RecoverySpec(), failure, history, restored_step=0)
    assert decision.action == "fail" and decision.terminal_reason == "FAILED_PERMANENT"
    assert "same way twice" in decision.reason


def test_preemptions_do_not_spend_the_error_budget(tmp_path):
    rec = RecoverySpec(max_total_restarts=1)
    preempted = run_classify(tmp_path, preempted=True)
    history = [past(FailureClass.PREEMPTION, restored=i, last=i + 1) for i in range(10)]
    assert decide(rec, preempted, history, restored_step=10).action == "requeue"
    lost = run_classify(tmp_path, exit_code=EXIT_LOST, last_step=12)
    assert decide(rec, lost, history, restored_step=10).action == "restart"
    more = [*history, past(FailureClass.NODE_LOST, restored=10, last=12)]
    assert decide(rec, lost, more, restored_step=12).action == "fail"


def test_restarts_without_progress_stop_the_run(tmp_path):
    rec = RecoverySpec(max_restarts_without_progress=2)
    lost = run_classify(tmp_path, exit_code=EXIT_LOST, last_step=4)
    stalled = [past(FailureClass.NODE_LOST, restored=4, last=4)] * 2
    decision = decide(rec, lost, stalled, restored_step=4)
    assert decision.action == "fail" and "no step past" in decision.reason


def test_nan_restart_skips_the_offending_step(tmp_path):
    nan = run_classify(tmp_path, nan_rank_step=(0, 6))
    decision = decide(RecoverySpec(), nan, [], restored_step=4)
    assert decision.action == "restart" and decision.skip_steps == (6, 6)
    fail = decide(RecoverySpec(on_nan="fail"), nan, [], restored_step=4)
    assert fail.terminal_reason == "FAILED_PERMANENT"


def test_watchdog_hang_and_no_progress():
    rec = RecoverySpec(
        heartbeat_interval_seconds=1,
        heartbeat_timeout_seconds=5,
        progress_timeout_seconds=20,
        warmup_steps=1,
    )
    dog = Watchdog(rec, world_size=2, started_monotonic=0.0, last_advance=0.0)
    assert dog.check(now=10.0) is None  # start-up allowance: progress timeout
    verdict = dog.check(now=21.0)
    assert verdict.failure_class is FailureClass.HANG and verdict.rank == 0
    dog.beats = {0: 30.0, 1: 30.0}
    dog.last_step, dog.last_advance = 3, 30.0
    assert dog.check(now=34.0) is None
    dog.beats = {0: 40.0, 1: 33.0}
    hung = dog.check(now=40.0)
    assert hung.failure_class is FailureClass.HANG and hung.rank == 1
    dog.beats = {0: 60.0, 1: 60.0}
    stuck = dog.check(now=60.0)
    assert stuck.failure_class is FailureClass.NO_PROGRESS
    dog.paused = True
    assert dog.check(now=60.0) is None


def test_a_save_in_flight_defers_no_progress_until_its_own_timeout_has_passed():
    """A hung save is the worker's to report as `storage` at checkpoint.save_timeout_seconds;
    the no-progress clock starts no earlier than that after the last save event."""
    rec = RecoverySpec(heartbeat_timeout_seconds=5, progress_timeout_seconds=20, warmup_steps=0)
    dog = Watchdog(rec, world_size=1, save_timeout_seconds=100.0)
    dog.beats, dog.last_step, dog.last_advance = {0: 0.0}, 3, 0.0
    dog.saves_changed(True, now=10.0)  # staged at 10 s, never ends
    dog.beats = {0: 115.0}
    assert dog.check(now=115.0) is None  # 20 s after the last step, but within the save's 100 s
    dog.beats = {0: 131.0}
    stuck = dog.check(now=131.0)  # 10 + 100 + 20 s: the worker should have said why by now
    assert stuck is not None and stuck.failure_class is FailureClass.NO_PROGRESS
    dog.saves_changed(False)
    assert dog.check(now=131.0).failure_class is FailureClass.NO_PROGRESS


def test_a_rank_past_its_last_step_is_judged_by_the_progress_timeout():
    """A rank that reported the plan's last step exits and stops beating while its peer saves
    and the launcher collects them: on a busy machine that outlasts a heartbeat timeout, and it
    is not a hang (it was, on an oversubscribed run: FAILURE_CLASSIFIED hang at the last step)."""
    rec = RecoverySpec(heartbeat_timeout_seconds=4, progress_timeout_seconds=60)
    dog = Watchdog(rec, world_size=2, total_steps=8)
    dog.step(0, 8)
    dog.step(1, 7)
    dog.beats = {0: 0.0, 1: 0.0}
    dog.last_advance = 0.0
    hung = dog.check(now=10.0)
    assert hung is not None and hung.rank == 1  # rank 1 is still training: a hang at 4 s
    dog.beats[1] = 10.0
    assert dog.check(now=10.0) is None  # rank 0 finished: 10 s of silence is within 60 s
    late = dog.check(now=61.0)
    assert late is not None and late.rank == 0 and "after its last step" in late.detail
