"""Named store locks on SQLite and PostgreSQL alike: one holder at a time, renewal at the same
epoch, expiry on the database's clock, a race with one winner, and writes fenced by the lock
refused inside their own transaction once another holder took it."""

import threading
import time

import pytest

from runwright.store import Store
from runwright.store.locks import LockLostError

A, B = "host-a:101:aaaaaa", "host-b:202:bbbbbb"


def test_one_holder_renewal_release_and_a_new_epoch_for_the_next(store):
    first = store.locks.acquire("admission", A, 30.0)
    assert first.held and first.holder == A and first.epoch == 1
    other = store.locks.acquire("admission", B, 30.0)
    assert not other.held and other.holder == A  # a reason can name who holds it
    again = store.locks.acquire("admission", A, 30.0)
    assert again.held and again.epoch == 1 and again.expires_unix_s >= first.expires_unix_s
    assert store.locks.acquire("another", B, 30.0).held  # names are independent
    assert store.locks.release(first.token("admission"))
    assert not store.locks.release(first.token("admission"))  # once
    taken = store.locks.acquire("admission", B, 30.0)
    assert taken.held and taken.epoch == 2


def test_an_expired_lock_is_taken_and_the_old_holders_writes_are_refused(store, time_bound):
    first = store.locks.acquire("admission", A, 0.3)
    token = first.token("admission")
    with store.fenced_by_lock(token):
        store.datasets  # noqa: B018 - nothing written yet
    with time_bound(30):
        while not store.locks.acquire("admission", B, 30.0).held:
            time.sleep(0.05)
    store.create_run(
        run_id="r1", name="t", spec={}, spec_hash="h" * 64, plan={}, workdir="/w", root="/w",
        state="QUEUED",
    )  # fmt: skip
    with store.fenced_by_lock(token), pytest.raises(LockLostError, match="no longer holds"):
        store.update_run("r1", state_detail="decided on stale figures")
    assert store.get_run("r1").state_detail != "decided on stale figures"
    assert not store.locks.release(token)  # it is not A's to release any more


def test_two_acquirers_race_and_exactly_one_wins(store_url):
    stores = [Store(store_url) for _ in range(2)]
    try:
        for i in range(8):
            barrier = threading.Barrier(2)
            held: dict[str, bool] = {}

            def take(s, holder, name=f"race-{i}", barrier=barrier, held=held):
                barrier.wait()
                held[holder] = s.locks.acquire(name, holder, 30.0).held

            threads = [
                threading.Thread(target=take, args=p) for p in zip(stores, (A, B), strict=True)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert sorted(held.values()) == [False, True]
    finally:
        for s in stores:
            s.close()
