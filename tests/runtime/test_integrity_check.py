"""The checks of one process (runtime/integrity.py) without a group: the recomputation check
compares bits, the bounds and the finiteness invariant stop the step, each with SDC_DETECTED
naming the kind, the last passing step and the checkpoints it suspects. The replica vote across
processes is tests/train/test_integrity.py's."""

from types import SimpleNamespace

import pytest
import torch

from runwright.events import EventType
from runwright.runtime import IntegrityCheck, SilentDataCorruptionError
from runwright.spec import IntegritySpec


class Checkpoints:
    """The checkpointer's two corruption hooks (the real ones: tests/ckpt/test_suspect.py)."""

    def __init__(self) -> None:
        self.known_good_step: int | None = None
        self.reasons: list[str] = []

    def mark_suspect(self, after_step: int, reason: str) -> list[str]:
        self.reasons.append(reason)
        return ["0000000006-g000001-ab"]


class Recorder:
    def __init__(self) -> None:
        self.checkpointer = Checkpoints()
        self.events: list[tuple[str, dict]] = []

    def ctx(self, level: str = "bitwise") -> SimpleNamespace:
        return SimpleNamespace(
            spec=SimpleNamespace(reproducibility=SimpleNamespace(level=level)),
            rank=0,
            world_size=1,
            report=lambda type_, **attributes: self.events.append((type_, attributes)),
        )


def check_of(recorder: Recorder, level: str = "bitwise", **spec) -> IntegrityCheck:
    model = torch.nn.Linear(4, 2)
    return IntegrityCheck(
        recorder.ctx(level), model=model, optimizer=None, replica_ranks=(),
        checkpointer=recorder.checkpointer, start_step=2, spec=IntegritySpec(**spec),
    )  # fmt: skip


def test_a_recomputation_that_differs_by_one_bit_stops_the_step():
    recorder = Recorder()
    check = check_of(recorder, every_steps=4)
    assert recorder.checkpointer.known_good_step == 2  # the restored state is the baseline
    trained = torch.tensor(1.5)
    check.recompute(4, lambda _batch: torch.tensor(1.5), None, trained)
    check.check(4)  # equal bits: passes, and step 4 becomes the known-good step
    assert recorder.checkpointer.known_good_step == 4 and not recorder.events
    check.recompute(8, lambda _batch: torch.nextafter(trained, torch.tensor(2.0)), None, trained)
    with pytest.raises(SilentDataCorruptionError, match=r"\(recompute\) at step 8"):
        check.check(8)
    ((kind, facts),) = recorder.events
    assert kind == EventType.SDC_DETECTED and facts["kind"] == "recompute"
    assert facts["ranks"] == [0] and facts["known_good_step"] == 4
    assert facts["suspect_checkpoints"] == ["0000000006-g000001-ab"]


def test_no_recomputation_outside_bitwise_mode_or_between_checks():
    recorder = Recorder()
    check = check_of(recorder, level="statistical", every_steps=4)
    check.recompute(4, lambda _batch: torch.tensor(9.0), None, torch.tensor(1.0))
    check.check(4)
    check = check_of(recorder, every_steps=4)
    check.recompute(3, lambda _batch: torch.tensor(9.0), None, torch.tensor(1.0))
    check.check(4)
    assert not recorder.events


def test_the_bounds_and_a_non_finite_parameter_are_invariants():
    recorder = Recorder()
    check = check_of(recorder, every_steps=0, max_loss=10.0, max_grad_norm=5.0)
    check.bounds(1, 9.0, torch.tensor(4.0))
    check.bounds(1, float("nan"), None)  # non-finite: the NaN guard's, not this check's
    with pytest.raises(SilentDataCorruptionError, match="max_grad_norm 5"):
        check.bounds(2, 9.0, torch.tensor(6.0))
    check = check_of(recorder, every_steps=1)
    check.model.weight.data[0, 0] = float("inf")
    with pytest.raises(SilentDataCorruptionError, match=r"non-finite .*\(weight\)"):
        check.check(3)
    assert [facts["kind"] for _, facts in recorder.events] == ["invariant", "invariant"]


def test_retention_keeps_a_rollback_target_only_while_a_check_can_still_come():
    recorder = Recorder()
    model = torch.nn.Linear(4, 2)

    def made(every: int, start: int, end: int | None) -> int | None:
        IntegrityCheck(
            recorder.ctx(), model=model, optimizer=None, replica_ranks=(),
            checkpointer=recorder.checkpointer, start_step=start, end_step=end,
            spec=IntegritySpec(every_steps=every),
        )  # fmt: skip
        return recorder.checkpointer.known_good_step

    assert made(4, 2, 8) == 2  # the check at 4 may still fail: keep the restored step
    assert made(4, 6, 7) is None  # the next check (8) lies past the end: retention as usual
    assert made(0, 2, 100) is None  # checks off
