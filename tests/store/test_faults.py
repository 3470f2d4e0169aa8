"""Transient store errors become StoreUnavailableError; faults keep their type and get a message
that says what to change. Against a real SQLite file and real PostgreSQL servers."""

import sqlite3
import subprocess
import sys

import pytest
import sqlalchemy as sa

from runwright.errors import StoreError, StoreUnavailableError
from runwright.store import Store, describe_fault, is_transient
from runwright.store.engine import SQLITE_BUSY_TIMEOUT_MS

# Holds SQLite's exclusive lock, as a backup or a migration in another process would.
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("UPDATE runs SET updated_unix_s = updated_unix_s")
print("locked", flush=True)
sys.stdin.readline()  # until the test lets go
conn.execute("COMMIT")
"""


def hold_lock(path):
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def release(holder):
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.wait(timeout=30) == 0


def test_sqlite_held_lock_is_unavailable_then_recovers(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    holder = hold_lock(tmp_path / "state.db")
    try:
        with pytest.raises(StoreUnavailableError, match="database is locked") as info:
            store.list_runs()
        assert is_transient(info.value)
        with pytest.raises(StoreUnavailableError):
            store.update_run("r", state_detail="x")
    finally:
        release(holder)
    assert store.list_runs() == []
    store.close()


def test_sqlite_busy_timeout_is_the_configured_one(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS
    store.close()


def test_a_missing_table_is_a_fault_not_an_outage(store):
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE events")
    with pytest.raises(sa.exc.DBAPIError) as info:
        store.events("r")
    assert not is_transient(info.value)
    assert "schema is missing or damaged" in describe_fault(info.value)


def test_a_constraint_violation_keeps_its_type_and_reads_as_a_bug(store):
    with pytest.raises(sa.exc.IntegrityError) as info, store.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO events (event_id) VALUES (NULL)"))
    assert not is_transient(info.value)
    assert "runwright bug, not an outage" in describe_fault(info.value)


def test_postgres_down_is_unavailable_and_comes_back(pg_server):
    store = Store(pg_server.url)
    store.list_runs()
    pg_server.stop("fast")
    try:
        with pytest.raises(StoreUnavailableError, match="unavailable"):
            store.list_runs()
        with pytest.raises(StoreUnavailableError):  # connection refused while it is down
            store.list_runs()
    finally:
        pg_server.start()
    # The pool pings before handing out a connection: the dead ones are replaced.
    assert store.list_runs() == []
    store.close()


def test_postgres_wrong_database_or_role_is_a_fault(pg_base_url):
    base = pg_base_url.rsplit("/", 1)[0]
    for url in (f"{base}/no_such_db", pg_base_url.replace("runwright@", "nobody_here@")):
        with pytest.raises(StoreError) as info:
            Store(url)
        assert not isinstance(info.value, StoreUnavailableError)
        assert "does not exist" in str(info.value)


def test_sqlite_error_codes_are_classified():
    def wrapped(message, code):
        orig = sqlite3.OperationalError(message)
        orig.sqlite_errorcode = code
        return sa.exc.OperationalError("SELECT 1", {}, orig)

    assert is_transient(wrapped("database is locked", 5))
    assert is_transient(wrapped("database table is locked", 6))
    assert is_transient(wrapped("database is locked", 517))  # SQLITE_BUSY_SNAPSHOT
    assert not is_transient(wrapped("no such table: runs", 1))
    assert not is_transient(wrapped("unable to open database file", 14))
