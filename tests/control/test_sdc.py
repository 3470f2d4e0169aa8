"""The controller's side of silent data corruption, without processes (the run itself is
tests/control/test_sdc_recovery.py): the group's SDC_DETECTED makes the classification `sdc` with
the suspects' hosts, their hosts join the allocation's exclusion, the error file alone still
classifies `sdc`, and the replay check takes no corrupted generation as its reference."""

from runwright.control.allocation import lost_hosts
from runwright.control.executors.protocol import FailureEvidence
from runwright.control.failures import classify
from runwright.control.policy import decide
from runwright.control.replay_check import RunReplays
from runwright.control.sdc import classify_sdc, detection, known_good_step
from runwright.events import EventType
from runwright.protocol import ChannelMessage
from runwright.spec import FailureClass, RecoverySpec
from runwright.store import EventRecord


def record(type_: str, generation: int = 1, step: int | None = None, **attributes) -> EventRecord:
    return EventRecord(
        seq=1, event_id=f"{type_}-{generation}", run_id="r", generation=generation, type=type_,
        step=step, time_unix_s=1.0, attributes=attributes,
    )  # fmt: skip


FOUND = record(
    EventType.SDC_DETECTED, step=8, kind="replica_digest", ranks=[1], hosts=["node-b"],
    detail="replica digests differ: rank 1 differs from ranks 0,2 (majority)",
    known_good_step=4, suspect_checkpoints=["0000000006-g000001-ab"],
)  # fmt: skip


def error_file_failure(message: str):
    evidence = FailureEvidence(
        launcher_log="Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)"
        "\n  exitcode  : 1",
        rank_tracebacks={0: f"Traceback (most recent call last):\n{message}"},
    )
    return classify(
        exit_code=1, watchdog_class=None, watchdog_detail="", watchdog_rank=None,
        nan_rank_step=None, preempted=False, evidence=evidence, last_step=7,
        ranks_started=3, world_size=3,
    )  # fmt: skip


def test_the_groups_own_detection_classifies_sdc_and_names_the_suspect():
    plain = error_file_failure(
        "runwright.runtime.integrity.SilentDataCorruptionError: silent data corruption "
        "(invariant) at step 8: ranks 1 hold a non-finite parameter"
    )
    assert plain.failure_class is FailureClass.SDC  # the error file alone, not nan_inf
    assert detection([FOUND], 1) is FOUND and detection([FOUND], 2) is None
    failure = classify_sdc(FOUND, plain, 7)
    assert failure.failure_class is FailureClass.SDC and failure.rank == 1
    assert failure.host == "node-b" and known_good_step(FOUND) == 4
    assert "rolling back to the checkpoint at or before step 4" in failure.message
    decision = decide(RecoverySpec(), failure, [], restored_step=0)
    assert decision.action == "restart" and decision.skip_steps is None
    assert RecoverySpec().policy_for(FailureClass.SDC).max_retries == 2


def test_quarantined_hosts_are_excluded_like_lost_ones():
    events = [
        record(EventType.FAILURE_CLASSIFIED, lost_hosts=["node-a"]),
        record(EventType.FAILURE_CLASSIFIED, generation=2, quarantined_hosts=["node-b"]),
    ]
    assert lost_hosts(events) == ("node-a", "node-b")


def message(type_: str, generation: int, rank: int, step: int, **attributes) -> ChannelMessage:
    return ChannelMessage(
        event_id=f"{type_}-{generation}-{rank}-{step}", type=type_, generation=generation,
        rank=rank, step=step, world_size=2, time_unix_s=0.0, attributes=attributes,
    )  # fmt: skip


def test_a_replay_of_a_corrupted_generation_is_unverified_not_diverged():
    replays = RunReplays(2)
    for generation, steps, corrupt_from in ((1, range(1, 8), 6), (2, range(5, 9), None)):
        for number in steps:
            for rank in range(2):
                loss = 1.0 / number + (0.5 if corrupt_from and number >= corrupt_from else 0)
                replays.observe(
                    message(
                        EventType.STEP_HEALTHY,
                        generation,
                        rank,
                        number,
                        loss=loss,
                        samples=[number * 4, number * 4 + 2],
                    )
                )
        if corrupt_from:
            replays.observe(message(EventType.SDC_DETECTED, 1, 0, 8, known_good_step=4))
    ((gen, kind, attrs),) = replays.verdicts(ended=True)
    assert gen.generation == 2 and kind == EventType.RECOVERY_UNVERIFIED
    assert "corruption check" in attrs["reason"]
