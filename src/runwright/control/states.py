"""The run state machine of ARCHITECTURE.md as an explicit transition table.

Every transition is applied by the store as one compare-and-set on the source state (and, for
worker-driven moves, the generation), so a late message from an old generation can never move a
run and a terminal run never moves again.
"""

from collections.abc import Callable
from enum import StrEnum

from runwright.store import NewEvent, Outcome, RunRecord, Store, WriteResult


class RunState(StrEnum):
    CREATED = "CREATED"
    QUEUED = "QUEUED"
    ALLOCATING = "ALLOCATING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    CHECKPOINTING = "CHECKPOINTING"
    RECOVERING = "RECOVERING"
    PAUSED = "PAUSED"
    """Stopped at a step boundary with a save and holding no resources, until someone resumes
    it (control/pause.py): asked by a person or by an alert rule whose action is `pause`."""
    SUCCEEDED = "SUCCEEDED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"


class TerminalReason(StrEnum):
    COMPLETED = "COMPLETED"
    USER_CANCELLED = "USER_CANCELLED"
    PREEMPTED = "PREEMPTED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    STOP_CRITERION = "STOP_CRITERION"
    ALERT = "ALERT"
    """An alert rule whose action is `stop` fired (control/alerts.py)."""
    FAILED_RECOVERABLE = "FAILED_RECOVERABLE"
    FAILED_PERMANENT = "FAILED_PERMANENT"


S = RunState
TERMINAL: frozenset[RunState] = frozenset({S.SUCCEEDED, S.CANCELLED, S.FAILED})
AT_REST: frozenset[RunState] = TERMINAL | {S.PAUSED}
"""States in which no worker of the run is left and no controller has anything to do until a
person acts: a command that waits for a run returns in them."""

# source -> allowed targets. Everything not listed is forbidden.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    S.CREATED: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
    # A queued run can be held (paused) before it gets anything.
    S.QUEUED: frozenset({S.ALLOCATING, S.PAUSED, S.CANCELLED, S.FAILED}),
    # An allocation that falls through sends the run back to the queue.
    S.ALLOCATING: frozenset({S.STARTING, S.QUEUED, S.CANCELLED, S.FAILED}),
    # A launch that fails before the group is healthy is recovered like a runtime failure.
    # PAUSED from a live state once the group asked to pause has stopped and its allocation is
    # given back.
    S.STARTING: frozenset({S.RUNNING, S.RECOVERING, S.PAUSED, S.CANCELLED, S.FAILED}),
    S.RUNNING: frozenset(
        {S.CHECKPOINTING, S.RECOVERING, S.PAUSED, S.SUCCEEDED, S.CANCELLED, S.FAILED}
    ),
    S.CHECKPOINTING: frozenset({S.RUNNING, S.RECOVERING, S.PAUSED, S.CANCELLED, S.FAILED}),
    # Restart in place (new generation), give the resources back and requeue (preemption), or
    # escalate to a person (recovery.on_exhausted: pause, control/escalation.py).
    S.RECOVERING: frozenset({S.STARTING, S.QUEUED, S.PAUSED, S.CANCELLED, S.FAILED}),
    # Resume: back to the queue, to be placed again and restored from the newest checkpoint.
    S.PAUSED: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.CANCELLED: frozenset(),
    S.FAILED: frozenset(),
}

# Which terminal reasons each terminal state may carry.
TERMINAL_REASONS: dict[RunState, frozenset[TerminalReason]] = {
    S.SUCCEEDED: frozenset({TerminalReason.COMPLETED}),
    S.CANCELLED: frozenset(
        {
            TerminalReason.USER_CANCELLED,
            TerminalReason.PREEMPTED,
            TerminalReason.BUDGET_EXCEEDED,
            TerminalReason.STOP_CRITERION,
            TerminalReason.ALERT,
        }
    ),
    S.FAILED: frozenset({TerminalReason.FAILED_RECOVERABLE, TerminalReason.FAILED_PERMANENT}),
}

# Entering these starts a new worker group or revokes the current one: the generation is bumped
# in the same statement, fencing every writer of the previous generation. The store raises the
# run's checkpoint fence in that transaction (`Store.transition`), so no caller has a step to add.
BUMPS_GENERATION: frozenset[RunState] = frozenset({S.STARTING, S.CANCELLED})
# Entering these ends the current group without starting another: its checkpoint writers are
# fenced off (the fence goes one past the generation), while the generation itself stays, so the
# events it already sent are still ingested and classified as its own.
REVOKES_GENERATION: frozenset[RunState] = frozenset({S.RECOVERING, S.PAUSED, S.SUCCEEDED, S.FAILED})


def is_allowed(source: RunState, target: RunState) -> bool:
    return target in TRANSITIONS[source]


def sources_of(target: RunState) -> frozenset[RunState]:
    return frozenset(s for s, targets in TRANSITIONS.items() if target in targets)


def advance(
    store: Store,
    run_id: str,
    target: RunState,
    *,
    generation: int | None = None,
    reason: TerminalReason | None = None,
    detail: str | None = None,
    with_events: Callable[[RunRecord], list[NewEvent]] | None = None,
) -> WriteResult:
    """Apply one transition through the store's compare-and-set (with `with_events(moved run)`
    appended in its transaction).

    `generation`, when given, fences the move to that generation (a worker-driven move such as
    STARTING -> RUNNING). Terminal targets need a reason from TERMINAL_REASONS.
    """
    if target in TERMINAL:
        if reason is None or reason not in TERMINAL_REASONS[target]:
            return WriteResult(
                outcome=Outcome.INVALID_TRANSITION,
                detail=f"{target} needs a terminal reason among "
                f"{sorted(TERMINAL_REASONS[target])}, got {reason}",
            )
    elif reason is not None:
        return WriteResult(
            outcome=Outcome.INVALID_TRANSITION,
            detail=f"{target} is not terminal and takes no terminal reason",
        )
    return store.transition(
        run_id,
        target,
        allowed_from=[str(s) for s in sources_of(target)],
        generation=generation,
        bump_generation=target in BUMPS_GENERATION,
        revoke_generation=target in REVOKES_GENERATION,
        terminal_reason=str(reason) if reason else None,
        detail=detail,
        with_events=with_events,
    )
