"""What to do after a classified failure: restart, requeue, or stop for good.

Each failure class has its own bounded retry policy (spec.recovery.policies), so preemptions and
flaky infrastructure never burn the budget of real errors; a deterministic failure that repeats
with the same signature stops at once (FAILED_PERMANENT) instead of a retry storm; and restarts
that never get past their restored step stop the run.
"""

from typing import Literal

from runwright.control.failures import Classification
from runwright.control.states import TerminalReason
from runwright.records import Record
from runwright.spec import FailureClass, RecoverySpec


class PastFailure(Record):
    """A failure already recorded for this run (from its FAILURE_CLASSIFIED events)."""

    failure_class: FailureClass
    signature: str
    restored_step: int
    """Step the failed generation started from."""
    last_step: int
    """Last healthy step the failed generation reached."""


class Decision(Record):
    """The policy's verdict and why."""

    action: Literal["restart", "requeue", "fail", "stop"]
    """restart in place, requeue (give resources back), fail, or stop with a terminal reason."""
    reason: str
    terminal_reason: TerminalReason | None = None
    backoff_seconds: float = 0.0
    skip_steps: tuple[int, int] | None = None
    """Step range whose batches the next generation skips (NaN rollback)."""


def decide(
    recovery: RecoverySpec,
    failure: Classification,
    history: list[PastFailure],
    restored_step: int,
) -> Decision:
    cls = failure.failure_class
    policy = recovery.policy_for(cls)
    same_class = [f for f in history if f.failure_class == cls]
    attempt = len(same_class) + 1
    backoff = min(policy.backoff_seconds * 2 ** (attempt - 1), policy.backoff_max_seconds)

    if failure.deterministic and history and history[-1].signature == failure.signature:
        return Decision(
            action="fail",
            terminal_reason=TerminalReason.FAILED_PERMANENT,
            reason=f"{cls} failed the same way twice ({failure.message!r}); retrying the same "
            "code and data cannot help",
        )
    if cls is FailureClass.NAN_INF and recovery.on_nan == "fail":
        return Decision(
            action="fail",
            terminal_reason=TerminalReason.FAILED_PERMANENT,
            reason="non-finite loss and recovery.on_nan is fail",
        )
    if attempt > policy.max_retries:
        terminal = (
            TerminalReason.PREEMPTED
            if cls is FailureClass.PREEMPTION
            else TerminalReason.FAILED_PERMANENT
            if failure.deterministic
            else TerminalReason.FAILED_RECOVERABLE
        )
        return Decision(
            action="stop" if cls is FailureClass.PREEMPTION else "fail",
            terminal_reason=terminal,
            reason=f"{cls} retries exhausted ({policy.max_retries} allowed)",
        )
    consuming = [f for f in history if recovery.policy_for(f.failure_class).consumes_error_budget]
    if policy.consumes_error_budget and len(consuming) + 1 > recovery.max_total_restarts:
        return Decision(
            action="fail",
            terminal_reason=TerminalReason.FAILED_RECOVERABLE,
            reason=f"{len(consuming) + 1} failures exceed recovery.max_total_restarts="
            f"{recovery.max_total_restarts}",
        )
    # Count trailing failures (this one included) that never got past their restored step.
    stalled = 1 if (failure.step or 0) <= restored_step else 0
    if stalled:
        for past in reversed(history):
            if past.last_step > past.restored_step:
                break
            stalled += 1
    if cls is not FailureClass.PREEMPTION and stalled > recovery.max_restarts_without_progress:
        return Decision(
            action="fail",
            terminal_reason=TerminalReason.FAILED_RECOVERABLE,
            reason=f"{stalled} consecutive attempts made no step past their restored step "
            f"(recovery.max_restarts_without_progress={recovery.max_restarts_without_progress})",
        )
    if cls is FailureClass.PREEMPTION:
        return Decision(
            action="requeue",
            backoff_seconds=backoff,
            reason=f"preempted; requeue {attempt}/{policy.max_retries}",
        )
    skip = None
    if cls is FailureClass.NAN_INF and failure.step is not None:
        skip = (failure.step, failure.step)
    return Decision(
        action="restart",
        backoff_seconds=backoff,
        skip_steps=skip,
        reason=f"{cls} retry {attempt}/{policy.max_retries} after {backoff:g} s",
    )
