"""Run leases on SQLite and PostgreSQL alike: acquire, renew, release and expiry on the database's
clock, a race of acquirers with one winner, and controller writes refused inside their own
transaction once the writer's epoch is no longer current."""

import threading
import time
from pathlib import Path

import pytest

import runwright.store as store_module
import runwright.store.leases as leases_module
from runwright.errors import LeaseLostError, NotFoundError
from runwright.store import NewEvent, Outcome, Store
from runwright.store.fence import fence_generation
from runwright.store.leases import LeaseOutcome
from runwright.store.schema import runs

A, B = "host-a:101:aaaaaa", "host-b:202:bbbbbb"


def make_run(store, root, run_id="run-a", state="RUNNING"):
    store.create_run(
        run_id=run_id,
        name="t",
        spec={"name": "t"},
        spec_hash="h" * 64,
        plan={},
        workdir=str(root),
        root=str(root),
        state=state,
    )
    return run_id


def wait_past(store, expires_unix_s, time_bound):
    """Wait until the DATABASE's clock has passed `expires_unix_s` (the lease ran out)."""
    with time_bound(30):
        while store.leases.now_unix_s() <= expires_unix_s:
            time.sleep(0.05)


def event(run_id, event_id="c1", generation=0):
    return NewEvent(
        event_id=event_id, run_id=run_id, generation=generation, type="STATE_CHANGED",
        time_unix_s=1.0,
    )  # fmt: skip


def test_acquire_renew_release_and_the_epoch(store, tmp_path):
    run = make_run(store, tmp_path)
    first = store.leases.acquire(run, A, 30.0, holder_node="n1")
    assert first.outcome is LeaseOutcome.ACQUIRED and first.lease.epoch == 1
    assert first.lease.holder == A and first.lease.holder_node == "n1"
    # The expiry is the database's clock plus the lease, nothing of the caller's clock.
    assert first.lease.expires_unix_s == pytest.approx(first.db_now_unix_s + 30.0)
    assert abs(first.db_now_unix_s - store.leases.now_unix_s()) < 5.0

    again = store.leases.acquire(run, A, 30.0)
    assert again.outcome is LeaseOutcome.RENEWED and again.lease.epoch == 1
    assert again.lease.acquired_unix_s == first.lease.acquired_unix_s

    held = store.leases.acquire(run, B, 30.0)
    assert held.outcome is LeaseOutcome.HELD and held.lease.holder == A
    assert store.leases.get(run)[0].holder == A  # nothing changed

    before = store.leases.get(run)[0]
    renewed = store.leases.renew(A, {run: 1}, 60.0)
    assert renewed[run].epoch == 1 and renewed[run].expires_unix_s > before.expires_unix_s
    assert renewed[run].lease_seconds == 60.0
    assert store.leases.renew(B, {run: 1}, 60.0) == {}  # not B's
    assert store.leases.renew(A, {run: 2}, 60.0) == {}  # not at that epoch

    assert store.leases.release(B, {run: 1}) == []
    assert store.leases.release(A, {run: 1}) == [run]
    lease, now = store.leases.get(run)
    assert lease.released and not lease.live(now) and lease.holder == A
    assert store.leases.renew(A, {run: 1}, 60.0) == {}  # released is released

    # A released lease is free at once, at a new epoch, and says whom it came from.
    taken = store.leases.acquire(run, B, 30.0)
    assert taken.outcome is LeaseOutcome.TAKEN_OVER and taken.lease.epoch == 2
    assert taken.previous.holder == A and taken.previous.released


def test_an_expired_lease_is_taken_at_a_new_epoch_and_the_old_holder_cannot_renew(
    store, tmp_path, time_bound
):
    run = make_run(store, tmp_path)
    first = store.leases.acquire(run, A, 0.5)
    assert store.leases.acquire(run, B, 30.0).outcome is LeaseOutcome.HELD
    wait_past(store, first.lease.expires_unix_s, time_bound)
    lease, now = store.leases.get(run)
    assert not lease.live(now)
    taken = store.leases.acquire(run, B, 30.0)
    assert taken.outcome is LeaseOutcome.TAKEN_OVER and taken.lease.epoch == 2
    assert taken.previous.holder == A and taken.previous.expires_unix_s <= taken.db_now_unix_s
    assert store.leases.renew(A, {run: 1}, 30.0) == {}
    assert store.leases.acquire(run, A, 30.0).outcome is LeaseOutcome.HELD


def test_an_expired_lease_of_ones_own_is_renewed_at_the_same_epoch(store, tmp_path, time_bound):
    run = make_run(store, tmp_path)
    first = store.leases.acquire(run, A, 0.3)
    wait_past(store, first.lease.expires_unix_s, time_bound)
    assert store.leases.renew(A, {run: 1}, 30.0)[run].epoch == 1


def test_a_gone_holder_is_taken_over_only_at_its_own_epoch(store, tmp_path):
    run = make_run(store, tmp_path)
    first = store.leases.acquire(run, A, 30.0)
    stale = first.lease.token().model_copy(update={"epoch": 7})
    assert store.leases.acquire(run, B, 30.0, gone=stale).outcome is LeaseOutcome.HELD
    taken = store.leases.acquire(run, B, 30.0, gone=first.lease.token())
    assert taken.outcome is LeaseOutcome.TAKEN_OVER and taken.lease.epoch == 2


def test_the_expiry_is_the_databases_clock_not_the_callers(store, tmp_path, monkeypatch):
    """Controllers on hosts whose clocks are an hour apart agree on the expiry: no lease time
    comes from the caller's clock."""
    run = make_run(store, tmp_path)
    true_now = store.leases.now_unix_s()
    monkeypatch.setattr(time, "time", lambda: true_now + 3600.0)
    taken = store.leases.acquire(run, A, 30.0)
    assert abs(taken.lease.expires_unix_s - (true_now + 30.0)) < 10.0
    monkeypatch.setattr(time, "time", lambda: true_now - 3600.0)
    assert store.leases.acquire(run, B, 30.0).outcome is LeaseOutcome.HELD


def test_acquire_of_an_unknown_run_is_a_clear_error(store):
    with pytest.raises(NotFoundError, match="no run 'nope'"):
        store.leases.acquire("nope", A, 30.0)


def test_two_acquirers_race_and_exactly_one_wins(store_url, tmp_path):
    """Each round, two threads with stores of their own acquire one free lease at the same
    moment (a barrier): one takes it, the other is told it is held."""
    stores = [Store(store_url) for _ in range(2)]
    rounds = 12
    try:
        for i in range(rounds):
            run = make_run(stores[0], tmp_path, f"race-{i}")
            barrier = threading.Barrier(2)
            outcomes: dict[str, LeaseOutcome] = {}

            def acquire(s, holder, run=run, barrier=barrier, outcomes=outcomes):
                barrier.wait()
                outcomes[holder] = s.leases.acquire(run, holder, 30.0).outcome

            threads = [
                threading.Thread(target=acquire, args=(s, h))
                for s, h in zip(stores, (A, B), strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert sorted(outcomes.values()) == [LeaseOutcome.ACQUIRED, LeaseOutcome.HELD]
            lease = stores[0].leases.get(run)[0]
            winner = next(h for h, o in outcomes.items() if o is LeaseOutcome.ACQUIRED)
            assert lease.holder == winner and lease.epoch == 1
    finally:
        for s in stores:
            s.close()


def test_every_controller_write_is_refused_once_its_epoch_is_stale(store, tmp_path, time_bound):
    run = make_run(store, tmp_path)
    first = store.leases.acquire(run, A, 0.5)
    token = first.lease.token()
    with store.fenced_by(token):  # while A's lease is current, its writes go through
        assert store.update_run(run, state_detail="by A").applied
        assert store.append_event(event(run, "a1"), fenced=False) is Outcome.APPLIED
    wait_past(store, first.lease.expires_unix_s, time_bound)
    assert store.leases.acquire(run, B, 30.0).lease.epoch == 2

    before = (store.get_run(run), store.events(run), store.attempts(run))
    writes = {
        "update_run": lambda: store.update_run(run, state_detail="by stale A"),
        "append_event": lambda: store.append_event(event(run, "a2"), fenced=False),
        "append_events": lambda: store.append_events([event(run, "a3")], fenced=False),
        "transition": lambda: store.transition(
            run, "RECOVERING", allowed_from=["RUNNING"], revoke_generation=True
        ),
        "revoke_generation": lambda: store.revoke_generation(run, 0),
        "start_attempt": lambda: store.start_attempt(run, 0, 1),
        "end_attempt": lambda: store.end_attempt(run, 0, 0),
        "fenced_update": lambda: store.fenced_update(run, 0, last_step=9),
        "record_staged": lambda: store.checkpoints.record_staged(
            run_id=run, checkpoint_id="c", step=1, generation=0, path="/p"
        ),
        "mark_deleted": lambda: store.checkpoints.mark_deleted(run, "/p"),
    }
    with store.fenced_by(token):
        for name, write in writes.items():
            with pytest.raises(LeaseLostError, match=f"{B}.*epoch 2"):
                write()
            assert (store.get_run(run), store.events(run), store.attempts(run)) == before, name
    assert store.checkpoints.list(run) == []
    # The fence file was never raised by the refused revoke and transition.
    assert fence_generation(store.get_run(run)) == 0
    # B's writes, under its own token, go through.
    with store.fenced_by(store.leases.get(run)[0].token()):
        assert store.update_run(run, state_detail="by B").applied


def test_a_takeover_waits_for_a_write_in_flight(store_url, tmp_path, time_bound):
    """The check locks the lease row for the write's whole transaction: a takeover that comes
    while the old holder's write is in flight waits for it, so the write lands before the
    takeover, never after it. (The check judges the epoch, not the expiry: an expired lease
    nobody took is still its holder's.)"""
    holder, taker = Store(store_url), Store(store_url)
    try:
        run = make_run(holder, tmp_path)
        first = holder.leases.acquire(run, A, 0.5)
        wait_past(taker, first.lease.expires_unix_s, time_bound)
        inside, finish, taking_started = threading.Event(), threading.Event(), threading.Event()

        def write_slowly():
            with holder.fenced_by(first.lease.token()), holder.begin() as conn:
                inside.set()  # the lease check has run and holds the lease row
                finish.wait(30)
                conn.execute(runs.update().values(state_detail="written in flight"))

        def take():
            taking_started.set()
            result.append(taker.leases.acquire(run, B, 30.0))

        result: list = []
        writer = threading.Thread(target=write_slowly)
        taking = threading.Thread(target=take)
        with time_bound(60):
            writer.start()
            assert inside.wait(30)
            taking.start()
            assert taking_started.wait(30)
            taking.join(timeout=1.0)
            assert taking.is_alive(), "the takeover did not wait for the write in flight"
            finish.set()
            writer.join(timeout=30)
            taking.join(timeout=30)
        assert result[0].outcome is LeaseOutcome.TAKEN_OVER and result[0].lease.epoch == 2
        assert taker.get_run(run).state_detail == "written in flight"
    finally:
        holder.close()
        taker.close()


def test_a_run_submitted_with_its_lease_is_held_from_its_first_moment(store, tmp_path):
    store.create_run(
        run_id="run-l",
        name="t",
        spec={"name": "t"},
        spec_hash="h" * 64,
        plan={},
        workdir=str(tmp_path),
        root=str(tmp_path),
        state="CREATED",
        lease=(A, "n1", 30.0),
    )
    lease, now = store.leases.get("run-l")
    assert lease.holder == A and lease.epoch == 1 and lease.live(now)
    assert store.leases.acquire("run-l", B, 30.0).outcome is LeaseOutcome.HELD


def test_every_write_transaction_of_the_store_goes_through_store_begin():
    """`Store.begin` is where controller writes are fenced: a write path opening a transaction
    of its own would pass the lease check by. Only `Store.begin` itself, the lease operations
    (acquire, renew, release), the store locks' (acquire, release), the migrations, and the
    server's identity and audit tables (API requests write them, never a controller) open one
    on the engine."""
    opened = {
        path.name: path.read_text().count("engine.begin()")
        for path in Path(store_module.__file__).parent.glob("*.py")
    }
    assert {name: n for name, n in opened.items() if n} == {
        "store.py": 1,
        "leases.py": 3,
        "locks.py": 2,
        "engine.py": 1,
        "identity.py": 1,
        "audit.py": 1,
    }


def test_renew_covers_many_runs_and_only_at_the_epoch_held(store, tmp_path, monkeypatch):
    monkeypatch.setattr(leases_module, "_PAIR_CHUNK", 2)  # several statements for five runs
    runs = [make_run(store, tmp_path, f"run-{i}") for i in range(5)]
    for run in runs:
        store.leases.acquire(run, A, 30.0)
    epochs = {run: 1 for run in runs}
    epochs["run-3"] = 9  # not the epoch A holds
    renewed = store.leases.renew(A, epochs, 60.0)
    assert sorted(renewed) == ["run-0", "run-1", "run-2", "run-4"]
    assert all(lease.lease_seconds == 60.0 for lease in renewed.values())
    assert store.leases.get("run-3")[0].lease_seconds == 30.0
