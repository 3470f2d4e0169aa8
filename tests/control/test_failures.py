"""Failure classification of platform faults: errors raised by runwright's own code are storage or
infrastructure with the exception as evidence, never user_code; the user's errors stay user_code.

The error files and stderr tracebacks are real ones, written by torch's `@record` in a child
process (scripts/error_files.py), not hand-made imitations.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from runwright.control.error_kinds import platform_fault
from runwright.control.executors.protocol import EXIT_LOST, LostSupervisor
from runwright.control.executors.torchrun_logs import evidence_from
from runwright.control.failures import classify
from runwright.spec import FailureClass

SCRIPT = Path(__file__).parent / "scripts" / "error_files.py"
TORCHRUN_ROOT = """Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_15:10:44
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 17079)
"""


@pytest.fixture(scope="module")
def real_errors(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("errors")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def run_classify(log_dir, torchrun_log=TORCHRUN_ROOT, lost=None, **kw):
    """classify() on the evidence the local executor reads from a torchrun log folder."""
    args = {
        "exit_code": 1,
        "watchdog_class": None,
        "watchdog_detail": "",
        "watchdog_rank": None,
        "nan_rank_step": None,
        "preempted": False,
        "evidence": evidence_from(log_dir, torchrun_log, lost),
        "last_step": 7,
        "ranks_started": 2,
        "world_size": 2,
    }
    return classify(**{**args, **kw})


EXPECTED = {
    "unreadable_checkpoint": (FailureClass.STORAGE, "runwright/ckpt/storage.py"),
    "checkpoint_error": (FailureClass.STORAGE, "NoUsableCheckpointError"),
    "store_error": (FailureClass.INFRASTRUCTURE, "runwright/store/engine.py"),
    "user_oserror": (FailureClass.USER_CODE, None),
    "user_sqlite": (FailureClass.USER_CODE, None),
    "user_wraps_platform_error": (FailureClass.USER_CODE, None),
    # An object store still failing after runwright.remote's bounded retries: storage, whether
    # it is a dataset read (DataStorageError, not the data's fault), a listing (RemoteStorageError)
    # or the fence (CheckpointStorageError).
    "unreachable_dataset": (FailureClass.STORAGE, None),
    "unreachable_checkpoint_root": (FailureClass.STORAGE, None),
    "unreachable_fence": (FailureClass.STORAGE, None),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
@pytest.mark.parametrize("source", ["error file", "stderr traceback"])
def test_platform_errors_are_not_user_code(real_errors, case, source):
    expected, evidence = EXPECTED[case]
    log_dir = real_errors / (case if source == "error file" else f"{case}-stderr")
    verdict = run_classify(log_dir)
    assert verdict.failure_class is expected, verdict
    assert verdict.rank == 0
    if evidence is not None:
        # The exception itself, and where runwright raised it, are the evidence.
        assert verdict.message.split(":")[0] in verdict.evidence
        assert evidence in verdict.evidence, verdict.evidence
    # Without torchrun's summary (a root cause), the same files decide the same way.
    assert run_classify(log_dir, torchrun_log="").failure_class is expected


def test_an_oserror_is_the_platforms_only_where_runwright_raised_it():
    runwright_frame = (
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 40, in main\n'
        "    ckpt.restore(state)\n"
        '  File "/opt/venv/lib/python3.11/site-packages/runwright/ckpt/restore.py", line 88, '
        "in restore\n"
        "    names = root.iterdir()\n"
        '  File "/usr/lib/python3.11/pathlib.py", line 931, in iterdir\n'
        "    for name in os.listdir(self):\n"
        "PermissionError: [Errno 13] Permission denied: '/ckpt/run-1'\n"
    )
    message = "PermissionError: [Errno 13] Permission denied: '/ckpt/run-1'"
    assert platform_fault(message, runwright_frame) == (
        FailureClass.STORAGE,
        "raised in runwright/ckpt/restore.py:88",
    )
    # The same error from the user's own code (the trainer built on the public API included).
    trainer = "/opt/venv/lib/python3.11/site-packages/runwright/train/loop.py"
    for path in ("/home/me/train.py", trainer):
        user = (
            "Traceback (most recent call last):\n"
            f'  File "{path}", line 12, in load\n'
            "    open(path)\n"
            f"{message}\n"
        )
        assert platform_fault(message, user) is None, path
    network = runwright_frame.replace(message, "ConnectionResetError: [Errno 104] reset")
    assert platform_fault("ConnectionResetError: reset", network)[0] is FailureClass.INFRASTRUCTURE


def test_a_checkpoint_that_does_not_fit_the_run_is_data_not_storage():
    message = "runwright.ckpt.errors.IncompatibleCheckpointError: tokenizer hash differs"
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/runwright/ckpt/restore.py", line 60, '
        "in restore_newest\n"
        "    raise IncompatibleCheckpointError(problems)\n"
        f"{message}\n"
    )
    found = platform_fault(message, traceback)
    assert found is not None and found[0] is FailureClass.DATA


def lost(node_restarted=False, killed=()):
    return LostSupervisor(
        supervisor_pid=4242,
        cause="was killed by SIGKILL",
        node_restarted=node_restarted,
        killed_pids=tuple(killed),
    )


def test_a_lost_supervisor_is_infrastructure_unless_the_node_restarted(tmp_path):
    verdict = run_classify(tmp_path, exit_code=EXIT_LOST, torchrun_log="", lost=lost(killed=[7]))
    assert verdict.failure_class is FailureClass.INFRASTRUCTURE
    assert "supervisor (pid 4242) was killed by SIGKILL" in verdict.message
    assert "killed 1 process(es)" in verdict.evidence and "[7]" in verdict.evidence
    rebooted = run_classify(
        tmp_path, exit_code=EXIT_LOST, torchrun_log="", lost=lost(node_restarted=True)
    )
    assert rebooted.failure_class is FailureClass.NODE_LOST


def test_a_torchrun_killed_by_a_signal_is_infrastructure(tmp_path):
    verdict = run_classify(tmp_path, exit_code=-9, torchrun_log="")
    assert verdict.failure_class is FailureClass.INFRASTRUCTURE
    assert verdict.message == "torchrun was killed by SIGKILL"


def test_a_rank_silent_after_its_own_nan_is_a_nan_not_a_hang(tmp_path):
    """On a busy machine the watchdog can suspect a hang of the rank that stopped on a NaN (and
    of its peers blocked in the next collective) before torchrun reports the exit."""
    after_nan = run_classify(
        tmp_path,
        watchdog_class=FailureClass.HANG,
        watchdog_detail="rank 1 silent for 4 s",
        watchdog_rank=1,
        nan_rank_step=(1, 6),
    )
    assert after_nan.failure_class is FailureClass.NAN_INF and after_nan.step == 6
    without_nan = run_classify(
        tmp_path,
        watchdog_class=FailureClass.HANG,
        watchdog_detail="rank 1 silent for 4 s",
        watchdog_rank=1,
    )
    assert without_nan.failure_class is FailureClass.HANG


def test_a_spike_rollback_is_named_a_loss_spike_not_a_non_finite_loss(tmp_path):
    """training.loss_spike.action: rollback ends the group like a NaN does (the restart skips the
    step's batch), but the incident says what the guard saw: a finite loss over its threshold."""
    spike = {"loss": 9.5, "mean": 2.0, "threshold_ratio": 4.0, "window_steps": 20}
    rolled = run_classify(tmp_path, exit_code=1, nan_rank_step=(0, 5), spike=spike)
    assert rolled.failure_class is FailureClass.NAN_INF and rolled.step == 5
    assert rolled.message.startswith("loss spike at step 5: loss 9.5 over")
    assert rolled.evidence == "LOSS_SPIKE event"
    nan = run_classify(tmp_path, exit_code=1, nan_rank_step=(0, 5))
    assert nan.message == "non-finite loss or gradient at step 5"
