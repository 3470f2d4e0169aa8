"""Pause and resume: a run stops at a step boundary with a save, gives its resources back and
waits for a person (issue 15; seed 004's loss-spike guard, "pause for a person").

`runwright pause RUN` (or an alert rule whose action is `pause`) asks the live group to stop at its
next step boundary with a save, as a cancel does, but without ending the run: once the group has
stopped, the controller gives the allocation back and moves the run to PAUSED (control/
controller.py), which revokes the generation so no writer of that group publishes afterwards. A
queued run is held at once (QUEUED -> PAUSED). `runwright resume RUN` puts it back in the queue
(PAUSED -> QUEUED): it is placed again like any queued run, as a new generation that restores the
newest committed checkpoint, which is the one saved at the pause. Nothing is kept warm while a
run is paused, so a pause costs its devices nothing, survives every controller, and can last any
time; what it costs is one save and one restart.

Works from any process, with or without a live controller: the request is the stop request in
the run folder plus its STOP_REQUESTED event, and whichever controller drives the group (now or
after a takeover) holds it to `recovery.stop_grace_seconds`.
"""

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.hold import release_hold
from runwright.ckpt.storage import CheckpointStorage
from runwright.control.journal import Journal
from runwright.control.states import RunState, advance
from runwright.events import EventType
from runwright.layout import checkpoint_root, run_paths
from runwright.spec import spec_from_mapping
from runwright.store import NewEvent, Outcome, RunRecord, Store, WriteResult

if TYPE_CHECKING:
    from runwright.control.supervision import Supervision

LIVE = {RunState.STARTING, RunState.RUNNING, RunState.CHECKPOINTING}
PAUSE_REASON = "pause"
"""The stop request's reason (and the alert action's name) that ends in PAUSED."""


def request_pause(
    store: Store, run_id: str, why: str = "paused by the user", *, actor: str | None = None
) -> WriteResult:
    """Hold a queued run now, or ask a live one to stop at its next step boundary with a save
    (the controller then moves it to PAUSED). Outcome APPLIED when asked, ALREADY_APPLIED when it
    is paused or already asked, INVALID_TRANSITION (with the reason in words) otherwise."""
    run = store.get_run(run_id)
    state = RunState(run.state)
    who = {"actor": actor} if actor is not None else {}
    journal = Journal(store)
    if state is RunState.PAUSED:
        return WriteResult(outcome=Outcome.ALREADY_APPLIED, run=run, detail="run is already PAUSED")
    if state is RunState.QUEUED:
        return _move(store, run, RunState.PAUSED, f"held in the queue: {why}", actor)
    if state not in LIVE:
        return WriteResult(
            outcome=Outcome.INVALID_TRANSITION,
            run=run,
            detail=f"the run is {run.state}: only a queued or running run can be paused "
            "(a run that is being placed or recovered can be paused once it runs; cancel "
            "stops it for good)",
        )
    spec = spec_from_mapping(run.spec)
    save = spec.checkpoint.enabled and spec.checkpoint.save_on_stop
    if pause_asked(store, run.run_id, run.generation):
        return WriteResult(
            outcome=Outcome.ALREADY_APPLIED,
            run=run,
            detail=f"generation {run.generation} is already asked to pause",
        )
    journal.ask_to_stop(run, run.generation, PAUSE_REASON, save=save, op="pause", detail=why, **who)
    return WriteResult(outcome=Outcome.APPLIED, run=run)


def request_resume(
    store: Store, run_id: str, why: str = "resumed by the user", *, actor: str | None = None
) -> WriteResult:
    """PAUSED -> QUEUED: the run is placed again and restores its newest checkpoint."""
    run = store.get_run(run_id)
    if RunState(run.state) is not RunState.PAUSED:
        asked = RunState(run.state) in LIVE and pause_asked(store, run.run_id, run.generation)
        return WriteResult(
            outcome=Outcome.INVALID_TRANSITION,
            run=run,
            detail=f"the run is {run.state}, not PAUSED"
            + ("; it is stopping to pause: resume it once it is PAUSED" if asked else ""),
        )
    moved = _move(store, run, RunState.QUEUED, why, actor)
    if moved.outcome is Outcome.APPLIED:
        release_escalation_hold(run)
    return moved


def release_escalation_hold(run: RunRecord) -> None:
    """Resuming is the person's judgement that an escalated run's scene was seen: its retention
    hold (control/escalation.py) goes, and retention rules as before. Storage that cannot be
    reached now leaves the hold in place: it only keeps checkpoints (remove HOLD.json by hand)."""
    spec = spec_from_mapping(run.spec)
    location = checkpoint_root(run_paths(Path(run.root), run.run_id), spec.checkpoint.location)
    with contextlib.suppress(OSError, CheckpointError):
        release_hold(CheckpointStorage(location))


def _move(
    store: Store, run: RunRecord, target: RunState, detail: str, actor: str | None
) -> WriteResult:
    """A person's transition, with its STATE_CHANGED (naming the actor) in the same transaction.
    Its id carries the time: a run held and resumed twice at the same step is two requests."""

    def events(moved: RunRecord) -> list[NewEvent]:
        return [
            Journal.event(
                moved,
                EventType.STATE_CHANGED,
                op=f"{run.state}>{target}:{time.time_ns()}",
                from_state=run.state,
                to_state=str(target),
                detail=detail,
                actor=actor,
            )
        ]

    return advance(store, run.run_id, target, detail=detail, with_events=events)


def pause_asked(store: Store, run_id: str, generation: int) -> bool:
    """Whether `generation`'s group has been asked to pause (its STOP_REQUESTED is recorded)."""
    return any(
        e.attributes.get("reason") == PAUSE_REASON
        and e.attributes.get("stopping_generation") == generation
        for e in store.events(run_id, types=[EventType.STOP_REQUESTED])
    )


class PauseStep:
    """The controller's side: a group asked to pause has stopped (control/controller.py)."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        release: Callable[[RunRecord, str], bool],
        close_alerts: Callable[[RunRecord, str], None],
    ) -> None:
        self.store = store
        self.journal = journal
        self.release = release
        self.close_alerts = close_alerts

    def paused(
        self,
        run: RunRecord,
        sup: "Supervision",
        exit_code: int,
        acknowledged: bool,
        words: str | None = None,
    ) -> bool:
        """Give the allocation back, end the attempt and move the run to PAUSED (`words`: why,
        where no pause was asked for); False while the engine cannot be reached (the next pass
        tries again: the exited group is still there to find, by this controller or one that
        takes the run over)."""
        words = words or self._why(run)
        if not self.release(run, f"paused: {words}"):
            return False
        sup.end_attempt(self.store, run.run_id, exit_code, None)
        saved = self.store.checkpoints.list(run.run_id, status="COMMITTED")
        newest = saved[-1].step if saved else None
        at = f"paused at step {run.last_step}: {words}"
        if not acknowledged:
            at += (
                f"; the group did not stop at a step boundary in time (exit code {exit_code}),"
                " so it resumes from "
                + (f"its checkpoint at step {newest}" if newest is not None else "the start")
            )
        elif newest != run.last_step:
            at += "; nothing was saved at the pause, so it resumes from " + (
                f"its checkpoint at step {newest}" if newest is not None else "the start"
            )
        self.close_alerts(run, "the run paused")
        return self.journal.move(run, RunState.PAUSED, detail=f"{at}; resume with `runwright "
                                 f"resume {run.run_id}`")  # fmt: skip

    def _why(self, run: RunRecord) -> str:
        """Who asked: a person's STOP_REQUESTED for this generation, or the alert rule."""
        for e in reversed(self.store.events(run.run_id, types=[EventType.STOP_REQUESTED])):
            a = e.attributes
            if a.get("reason") == PAUSE_REASON and a.get("stopping_generation") == run.generation:
                who = f" by {a['actor']}" if a.get("actor") else ""
                return f"asked{who} ({a.get('detail') or 'no reason given'})"
        for e in reversed(self.store.events(run.run_id, types=[EventType.ALERT_FIRED])):
            a = e.attributes
            if a.get("action") == PAUSE_REASON and e.generation == run.generation:
                return f"alert {a.get('rule')}: {a.get('summary')}"
        return "asked to pause"
