"""Stopping a live worker group for a reason of the controller's, and ending its run.

A group is asked to stop at its next step boundary (a stop request in the run folder, with a
save when the spec says so) when
- its budget runs out (control/budget.py): the run ends CANCELLED, BUDGET_EXCEEDED;
- a stop criterion of its spec is met (control/criteria.py, on rank 0's loss history and the
  budget usage): STOP_CRITERION_MET, and the run ends CANCELLED, STOP_CRITERION;
- another process asked (a scheduler's preemption from any controller's admission pass): this
  controller sees the request in the run folder and holds the group to the same grace.
Whatever the reason, the group gets `recovery.stop_grace_seconds` from when this controller saw
it, then is killed (STOP_GRACE_EXPIRED), so a rank that never reaches a boundary cannot hold its
devices for ever.
"""

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from runwright.control.budget import check as check_budget
from runwright.control.budget import usage_of
from runwright.control.contamination import contaminated_ranges
from runwright.control.criteria import (
    CRITERIA_SECONDS,
    MAX_HISTORY_STEPS,
    CriterionMet,
    evaluable,
    first_met,
)
from runwright.control.journal import Journal
from runwright.control.runlog import RunLogs
from runwright.control.states import RunState, TerminalReason
from runwright.control.supervision import Supervision
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.protocol import ChannelMessage, read_stop_request, write_stop_request
from runwright.spec import JobSpec
from runwright.store import RunRecord, Store

ENDINGS = {
    "budget": (TerminalReason.BUDGET_EXCEEDED, "budget exhausted; stopped at a step boundary"),
    "criterion": (TerminalReason.STOP_CRITERION, "a stop criterion was met"),
    "alert": (TerminalReason.ALERT, "an alert rule's action stopped it"),
}
"""Stop reasons after which the run ends CANCELLED rather than recovers or requeues."""


class GroupStops:
    """The controller's stop decisions for its live groups (module docstring)."""

    def __init__(self, store: Store, journal: Journal, logs: RunLogs) -> None:
        self.store = store
        self.journal = journal
        self.logs = logs
        self._losses: dict[str, LossHistory] = {}
        """run id -> rank 0's training and eval losses by step, for runs with stop criteria
        (rebuilt from the channel files by a restarted controller's ingest)."""
        self._checked: dict[str, tuple[tuple[int, int], float]] = {}
        """run id -> (the history's size and newest step, monotonic time) at the last
        evaluation of its criteria."""

    def history(self, run_id: str, spec: JobSpec) -> "LossHistory | None":
        """The loss history to feed from the run's STEP_HEALTHY and EVALUATED messages
        (`note_loss`); None when its spec has no criterion to evaluate."""
        return self._losses.setdefault(run_id, LossHistory()) if evaluable(spec) else None

    def asked_elsewhere(self, run: RunRecord, spec: JobSpec, sup: Supervision) -> None:
        """Hold the group to its grace once a stop request for it is in the run folder."""
        if sup.stop_deadline is not None:
            return
        paths = run_paths(Path(run.root), run.run_id)
        asked = read_stop_request(paths.stop_file(sup.group.generation))
        if asked is not None:
            sup.stop_reason = asked.reason
            sup.stop_by(spec.recovery.stop_grace_seconds)

    def grace_over(self, run: RunRecord, spec: JobSpec, sup: Supervision) -> bool:
        """Whether a stopping group's grace has run out (recorded once): kill it now."""
        if sup.stop_deadline is None or time.monotonic() <= sup.stop_deadline:
            return False
        self.grace_expired(run, spec, sup.group.generation, sup.stop_reason)
        return True

    def grace_expired(
        self, run: RunRecord, spec: JobSpec, generation: int, reason: str | None
    ) -> None:
        """STOP_GRACE_EXPIRED, once per generation."""
        if self.logs.of(run.run_id).finished:
            return  # RUN_FINISHED stays the last event of a finished run's log
        self.journal.record(
            run,
            EventType.STOP_GRACE_EXPIRED,
            op=f"g{generation}",
            per_step=False,
            reason=reason,
            stopping_generation=generation,
            grace_seconds=spec.recovery.stop_grace_seconds,
        )

    def check(self, run: RunRecord, spec: JobSpec, sup: Supervision) -> None:
        """Budget warnings; a budget run out or a met criterion asks the group to stop."""
        budget = check_budget(spec, usage_of(spec, run, self.store.attempts(run.run_id)))
        usage = budget.usage.model_dump()
        for kind in budget.warnings:
            self.journal.record(
                run, EventType.BUDGET_WARNING, op=kind, per_step=False, kind=kind, **usage
            )
        if budget.exceeded:
            self.journal.record(
                run, EventType.BUDGET_EXCEEDED, per_step=False, detail=budget.exceeded, **usage
            )
            self._ask(run, spec, sup, "budget")
            return
        met = self._criterion_met(run.run_id, spec, budget.usage)
        if met is not None:
            self.journal.record(
                run,
                EventType.STOP_CRITERION_MET,
                op=f"criterion{met.index}",
                per_step=False,
                criterion=met.index,
                kind=met.kind,
                evidence=met.evidence,
            )
            self._ask(run, spec, sup, "criterion")

    def end(self, run: RunRecord, reason: str) -> None:
        """End the run of a group that stopped for `reason` (one of ENDINGS)."""
        terminal, words = ENDINGS[reason]
        if reason == "criterion":
            met = self.store.events(run.run_id, types=[EventType.STOP_CRITERION_MET])
            why = met[-1].attributes.get("evidence", "") if met else ""
            words = f"a stop criterion was met ({why}); stopped at a step boundary"
        elif reason == "alert":
            fired = self.store.events(run.run_id, types=[EventType.ALERT_FIRED])
            why = [e.attributes for e in fired if e.attributes.get("action") == "stop"]
            said = f"{why[-1].get('rule')}: {why[-1].get('summary')}" if why else "an alert"
            words = f"alert {said}; stopped at a step boundary with a save"
        self.journal.finish(run, RunState.CANCELLED, terminal, words)

    def forget(self, run_id: str) -> None:
        self._losses.pop(run_id, None)
        self._checked.pop(run_id, None)

    def on_alert(self, run: RunRecord, spec: JobSpec, sup: Supervision, action: str) -> None:
        """An alert's `stop` (with a save; the run ends ALERT), `pause` (with a save; the run
        waits in PAUSED for a person, control/pause.py) or `rollback` (no save; the run restarts
        from its newest committed checkpoint)."""
        if sup.stop_deadline is None:
            reason = {"stop": "alert", "pause": "pause"}.get(action, "rollback")
            self._ask(run, spec, sup, reason, save=action != "rollback")

    def _ask(
        self, run: RunRecord, spec: JobSpec, sup: Supervision, reason: str, save: bool = True
    ) -> None:
        write_stop_request(
            run_paths(Path(run.root), run.run_id).folder,
            run.generation,
            reason,
            save=save and spec.checkpoint.save_on_stop and spec.checkpoint.enabled,
        )
        sup.stop_reason = reason
        sup.stop_by(spec.recovery.stop_grace_seconds)

    def _criterion_met(self, run_id: str, spec: JobSpec, usage: object) -> CriterionMet | None:
        """The first met criterion, evaluated when a new step arrived, or every
        CRITERIA_SECONDS (a budget share grows with time too), not on every pass."""
        history = self._losses.get(run_id)
        if history is None:
            return None
        losses = history.train
        seen = (len(losses) + len(history.evals), max(losses, default=0))
        last = self._checked.get(run_id)
        now = time.monotonic()
        if last is not None and last[0] == seen and now - last[1] < CRITERIA_SECONDS:
            return None
        self._checked[run_id] = (seen, now)
        marks = contaminated_ranges(self.store.events(run_id, types=[EventType.STEPS_CONTAMINATED]))
        return first_met(spec, losses, usage, history.evals, marks)  # type: ignore[arg-type]


@dataclass
class LossHistory:
    """Rank 0's losses by step: training (STEP_HEALTHY `loss`) and eval split (EVALUATED)."""

    train: dict[int, float] = field(default_factory=dict)
    evals: dict[int, float] = field(default_factory=dict)


def note_loss(history: LossHistory, message: ChannelMessage) -> None:
    """Rank 0's loss of a healthy step, or an evaluation's, into a run's history (a replayed
    step replaces it), keeping at most MAX_HISTORY_STEPS steps of each."""
    if message.type == EventType.STEP_HEALTHY:
        losses, loss = history.train, message.attributes.get("loss")
    elif message.type == EventType.EVALUATED:
        losses, loss = history.evals, message.attributes.get("eval_loss")
    else:
        return
    if message.rank != 0 or message.step is None:
        return
    if isinstance(loss, bool) or not isinstance(loss, int | float) or not math.isfinite(loss):
        return
    losses[message.step] = float(loss)
    if len(losses) > MAX_HISTORY_STEPS:
        del losses[min(losses)]
