"""`status` counts the writes a fenced generation made after its fence instead of listing each
one (issue 19: a cancelled run's status printed ~44,000 STALE_WRITE_REJECTED lines)."""

from runwright.control.summary import describe_run, run_summary
from runwright.events import EventType
from runwright.store import NewEvent, Store


def _event(event_id: str, generation: int, step: int, kind: str) -> NewEvent:
    return NewEvent(
        event_id=event_id,
        run_id="run-a",
        generation=generation,
        type=kind,
        step=step,
        time_unix_s=1.0,
        attributes={},
    )


def test_status_summarises_a_flood_of_stale_writes(tmp_path):
    store = Store.open(tmp_path)
    store.create_run(
        run_id="run-a",
        name="t",
        spec={"name": "t"},
        spec_hash="h" * 64,
        plan={},
        workdir="/w",
        root=str(tmp_path),
        state="CREATED",
    )
    store.transition("run-a", "STARTING", allowed_from=["CREATED"], bump_generation=True)
    store.transition("run-a", "RUNNING", allowed_from=["STARTING"], bump_generation=True)
    # generation 1 goes on reporting after generation 2 fenced it: 2 ranks x steps 10-509
    batch = [
        _event(f"g1-r{rank}-step{step}", 1, step, EventType.STEP_HEALTHY)
        for step in range(10, 510)
        for rank in (0, 1)
    ]
    batch.append(_event("g1-ckpt-500", 1, 500, EventType.CHECKPOINT_COMMITTED))
    store.append_events(batch)
    summary = run_summary(store, "run-a", with_events=False)
    assert not any(i["type"] == EventType.STALE_WRITE_REJECTED for i in summary["incidents"])
    (group,) = summary["stale_writes"]
    assert group["count"] == 1001 and group["writer_generation"] == 1
    assert group["run_generation"] == 2
    assert group["types"] == {"STEP_HEALTHY": 1000, "CHECKPOINT_COMMITTED": 1}
    assert (group["first_step"], group["last_step"]) == (10, 509)
    text = describe_run(summary)
    stale_lines = [line for line in text.splitlines() if "fenced generation" in line]
    assert len(stale_lines) == 1, text
    assert "1001 write(s) of fenced generation 1 rejected at steps 10-509" in stale_lines[0]
    assert "STEP_HEALTHY 1000, CHECKPOINT_COMMITTED 1" in stale_lines[0]
