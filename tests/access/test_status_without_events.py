"""`status` without the event log reads only the events the summary is made of, and says the
same as the full summary."""

from runwright.control.summary import run_summary
from runwright.events import EventType
from runwright.store import NewEvent


def test_the_summary_without_events_is_the_summary(running_run):
    store = running_run
    kinds = [EventType.STEP_HEALTHY] * 5 + [
        EventType.STATE_CHANGED,
        EventType.FAILURE_CLASSIFIED,
        EventType.RECOVERY_STARTED,
    ]
    for i, kind in enumerate(kinds):
        attributes = {"to_state": "RECOVERING", "from_state": "RUNNING"} if i == 5 else {}
        store.append_event(
            NewEvent(event_id=f"e{i}", run_id="run-a", generation=1, type=kind, step=i,
                     time_unix_s=float(i), attributes={**attributes, "action": "restart"}),
        )  # fmt: skip
    full = run_summary(store, "run-a")
    brief = run_summary(store, "run-a", with_events=False)
    assert (brief["events"], brief["event_count"]) == ([], None)
    assert full["event_count"] == len(kinds)
    same = {k for k in full if k not in ("events", "event_count", "updated_unix_s")}
    assert {k: brief[k] for k in same} == {k: full[k] for k in same}
    assert brief["pending_recovery"] == {"action": "restart"}
