"""The per-run event-log view: what it folds in from new events equals what a full read says."""

from runwright.control.journal import Journal
from runwright.control.recovery import open_recovery, skip_ranges
from runwright.control.runlog import LOOKBACK_SEQ, RunLogs
from runwright.store import Store


def new_run(store, run_id="r1"):
    run, _ = store.create_run(
        run_id=run_id,
        name="t",
        spec={},
        spec_hash="h",
        plan={},
        workdir="/",
        root="/",
        state="CREATED",
    )
    return run


def test_the_view_reads_only_new_events_and_matches_a_full_read(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    journal = Journal(store)
    run = new_run(store)
    logs = RunLogs(store)
    journal.record(run, "WORKER_STARTED", op="0", pid=11, rank=0)
    journal.record(run, "STEP_HEALTHY", op="1")
    assert logs.of(run.run_id).rank_pids == {run.generation: {11}}
    seen = logs.of(run.run_id).after_seq
    journal.record(run, "STOP_ACKNOWLEDGED", op="a", reason="budget")
    journal.record(run, "STOP_ACKNOWLEDGED", op="b", reason="preemption")
    journal.record(run, "RECOVERY_STARTED", op="x", skip_steps=[3, 4])
    journal.record(run, "WORKER_STARTED", op="1", pid=12, rank=1)

    calls = []
    events = store.events

    def counting(run_id, **kw):
        calls.append(kw)
        return events(run_id, **kw)

    store.events = counting  # type: ignore[method-assign]
    log = logs.of(run.run_id)
    # Only events after the last one folded in, less the look-back window.
    assert calls[0]["after_seq"] == max(0, seen - LOOKBACK_SEQ)
    assert log.stop_acks[run.generation].attributes["reason"] == "budget"  # the first ack
    assert log.rank_pids[run.generation] == {11, 12}
    full = events(run.run_id)
    assert skip_ranges(log.events) == skip_ranges(full) == [(3, 4)]
    assert open_recovery(log.events) == open_recovery(full)
    assert "STEP_HEALTHY" not in {e.type for e in log.events}
    assert not log.finished
    journal.record(run, "RUN_FINISHED")
    assert logs.of(run.run_id).finished
    logs.forget(run.run_id)
    assert logs.of(run.run_id).rank_pids == {run.generation: {11, 12}}  # rebuilt from the log


def test_an_event_committed_late_with_a_lower_sequence_number_is_still_folded_once(tmp_path):
    """PostgreSQL may make a lower sequence number visible after a higher one was read."""
    from runwright.store.schema import events as events_table

    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    journal = Journal(store)
    run = new_run(store)
    for k in range(5):
        journal.record(run, "STEP_HEALTHY", op=str(k))
    logs = RunLogs(store)
    journal.record(run, "WORKER_STARTED", op="0", pid=11, rank=0)
    assert logs.of(run.run_id).rank_pids == {run.generation: {11}}
    # A kept event whose transaction took sequence number 2 but became visible only now.
    with store.engine.begin() as conn:
        conn.execute(events_table.delete().where(events_table.c.seq == 2))
        conn.execute(
            events_table.insert().values(
                seq=2,
                event_id=f"{run.run_id}:late-ack",
                run_id=run.run_id,
                generation=run.generation,
                type="STOP_ACKNOWLEDGED",
                time_unix_s=0.0,
                attributes={"reason": "preemption"},
            )
        )
    log = logs.of(run.run_id)
    assert log.stop_acks[run.generation].attributes["reason"] == "preemption"
    assert [e.type for e in log.events].count("WORKER_STARTED") == 1
