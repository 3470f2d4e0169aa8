"""The controller's writes to the run record and event log, each with an operation id.

An event id `<run>:g<generation>:<TYPE>:<op>[@<step>]` names the action, so the same action taken
again by a restarted (or a second) controller is one event, not two. A state change is guarded by
the store's compare-and-set instead, so its op carries the time the move stamped on the record:
every applied move is its own STATE_CHANGED, even one repeated in the same generation and step.
"""

import time
from collections.abc import Callable
from pathlib import Path

from runwright.control.outage import Outage
from runwright.control.states import RunState, TerminalReason, advance
from runwright.events import EventType
from runwright.layout import run_paths
from runwright.protocol import write_stop_request
from runwright.store import NewEvent, Outcome, RunRecord, Store


class Journal:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.before_finished: Callable[[RunRecord], object] | None = None
        """Called with the final run before its RUN_FINISHED is written (the controller gives
        the run's allocation back there, so RUN_FINISHED stays the last event)."""

    def record(
        self, run: RunRecord, type_: str, op: str = "", per_step: bool = True, **attributes: object
    ) -> None:
        """Append one controller event (unfenced: the controller owns the run)."""
        self.store.append_event(self.event(run, type_, op, per_step, **attributes), fenced=False)

    def ask_to_stop(
        self,
        run: RunRecord,
        generation: int,
        reason: str,
        *,
        save: bool,
        op: str,
        per_step: bool = True,
        fence_generation: int | None = None,
        **attributes: object,
    ) -> None:
        """Ask `generation`'s workers to stop at their next step boundary (the run folder's stop
        request, `protocol.write_stop_request`) and record it as STOP_REQUESTED on `run`. The
        file and the event id are the same each time, so asking again changes nothing."""
        write_stop_request(
            run_paths(Path(run.root), run.run_id).folder,
            generation,
            reason,
            save=save,
            fence_generation=fence_generation,
        )
        self.record(
            run,
            EventType.STOP_REQUESTED,
            op=op,
            per_step=per_step,
            reason=reason,
            save=save,
            stopping_generation=generation,
            **attributes,
        )

    @staticmethod
    def event(
        run: RunRecord, type_: str, op: str = "", per_step: bool = True, **attributes: object
    ) -> NewEvent:
        """The controller event `record` appends, with its operation id."""
        key = op or f"{attributes.get('from_state', '')}>{attributes.get('to_state', '')}"
        at = f"@{run.last_step}" if per_step else ""
        return NewEvent(
            event_id=f"{run.run_id}:g{run.generation}:{type_}:{key}{at}",
            run_id=run.run_id,
            generation=run.generation,
            type=type_,
            step=run.last_step,
            time_unix_s=time.time(),
            attributes={k: v for k, v in attributes.items() if v is not None},
        )

    def move(
        self,
        run: RunRecord,
        target: RunState,
        event_type: str | None = None,
        reason: TerminalReason | None = None,
        detail: str | None = None,
    ) -> bool:
        """One state transition through the store's compare-and-set, with its STATE_CHANGED
        (and `event_type`) in the same transaction: a controller killed right after the move
        cannot leave it unrecorded, and a retried move (ALREADY_APPLIED) writes nothing."""

        def events(moved: RunRecord) -> list[NewEvent]:
            # The compare-and-set makes each applied move write once; its id names this move
            # by the time the transaction stamped on the record, so a move repeated in one
            # generation and step (RUNNING <-> CHECKPOINTING for a second save, a second
            # QUEUED -> ALLOCATING) is a second event, never folded into the first one's id.
            changed = self.event(
                moved,
                EventType.STATE_CHANGED,
                op=f"{run.state}>{target}:t{round(moved.updated_unix_s * 1e6)}",
                from_state=run.state,
                to_state=str(target),
                reason=str(reason) if reason else None,
                detail=detail,
            )
            return [changed, *([self.event(moved, event_type)] if event_type else [])]

        result = advance(
            self.store, run.run_id, target, reason=reason, detail=detail, with_events=events
        )
        return result.outcome is Outcome.APPLIED and result.run is not None

    def finished(self, run: RunRecord, **attributes: object) -> None:
        """RUN_FINISHED, once per run: the last event of its log."""
        final = self.store.get_run(run.run_id)
        if self.before_finished is not None:
            self.before_finished(final)
            final = self.store.get_run(run.run_id)
        self.record(
            final,
            EventType.RUN_FINISHED,
            per_step=False,
            state=final.state,
            reason=final.terminal_reason,
            last_step=final.last_step,
            **attributes,
        )

    def store_unavailable(self, run: RunRecord, outage: Outage) -> None:
        """STORE_UNAVAILABLE, once per outage, written as the store's first write when it is back:
        how long this controller could not drive the run, and why."""
        self.record(
            run,
            EventType.STORE_UNAVAILABLE,
            op=outage.op,
            per_step=False,
            outage_seconds=round(outage.seconds(), 3),
            attempts=outage.attempts,
            error=outage.error,
            started_unix_s=outage.started_unix_s,
            recovered_unix_s=time.time(),
        )

    def finish(
        self, run: RunRecord, target: RunState, reason: TerminalReason | None, detail: str | None
    ) -> None:
        """Move to a terminal state (the move fences the generation off) and close the log."""
        self.move(run, target, reason=reason, detail=detail)
        self.finished(run, detail=detail)
