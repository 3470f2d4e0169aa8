"""Cancel: record the intent and bump the generation first, then ask the workers to stop.

`runwright cancel RUN` works from any process, with or without a live controller: the store
transition to CANCELLED (reason USER_CANCELLED) bumps the generation and, in the same
transaction, raises the checkpoint fence to it (`Store.transition`); then the running group is
asked to stop at its next step boundary. The stop request hands that group the new generation,
so its stop-step checkpoint is the one write still accepted; every older writer is fenced off.
The controller that drives the run (or the next one to start) gives the group the grace period
and then kills it.
"""

from runwright.control.journal import Journal
from runwright.control.states import TERMINAL, RunState, TerminalReason, advance
from runwright.events import EventType
from runwright.spec import spec_from_mapping
from runwright.store import Outcome, Store, WriteResult

ACTIVE = {RunState.STARTING, RunState.RUNNING, RunState.CHECKPOINTING}


def request_cancel(
    store: Store, run_id: str, why: str = "cancelled by the user", *, actor: str | None = None
) -> WriteResult:
    """`actor` (who asked, when known) is written into the run's own log with the cancel, so
    the run report lists the intervention with its actor."""
    run = store.get_run(run_id)
    who = {"actor": actor} if actor is not None else {}
    if RunState(run.state) in TERMINAL:
        return WriteResult(
            outcome=Outcome.ALREADY_APPLIED, run=run, detail=f"run is already {run.state}"
        )
    result = advance(
        store, run.run_id, RunState.CANCELLED, reason=TerminalReason.USER_CANCELLED, detail=why
    )
    if result.outcome is not Outcome.APPLIED or result.run is None:
        return result
    new = result.run
    journal = Journal(store)
    journal.record(
        new,
        EventType.STATE_CHANGED,
        from_state=run.state,
        to_state="CANCELLED",
        reason="USER_CANCELLED",
        detail=why,
        **who,
    )
    if RunState(run.state) in ACTIVE:
        spec = spec_from_mapping(run.spec)
        save = spec.checkpoint.enabled and spec.checkpoint.save_on_stop
        journal.ask_to_stop(
            new,
            run.generation,
            "cancel",
            save=save,
            op="cancel",
            fence_generation=new.generation,
            **who,
        )
    return result
