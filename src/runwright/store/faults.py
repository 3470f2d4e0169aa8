"""Which store errors are an outage to ride out, and which are faults to report.

A store that is locked (SQLite: another process holds the lock past the busy timeout, as a
backup or a migration does) or unreachable (PostgreSQL restarting, the network down) comes back
by itself. For those the engine raises `StoreUnavailableError`, chained to the driver's error, and
the controller abandons the pass and retries it after a backoff (control/outage.py).

Everything else (schema missing, bad URL, failed authentication, a constraint violation from a
bug) is a fault that retrying will not fix. It keeps its SQLAlchemy type, so the store's own
handling of expected conflicts (an IntegrityError on a duplicate key is ALREADY_APPLIED) still
works, and `describe_fault` turns one that escapes into a message for the user.
"""

import sqlite3

import sqlalchemy as sa

from runwright.errors import StoreUnavailableError

# SQLite primary result codes (https://www.sqlite.org/rescode.html); an extended code such as
# SQLITE_BUSY_SNAPSHOT (517) carries its primary code in the low byte.
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_TRANSIENT_MESSAGES = ("database is locked", "database table is locked", "database is busy")

# PostgreSQL SQLSTATEs (https://www.postgresql.org/docs/current/errcodes-appendix.html): class 08
# is "connection exception"; the others are a server shutting down or starting up, no free
# connection slot, and the conflicts a retried transaction gets past.
PG_TRANSIENT_CLASSES = frozenset({"08"})
PG_TRANSIENT_SQLSTATES = frozenset(
    {
        "57P01",  # admin_shutdown: `pg_ctl stop -m fast` ends every session with it
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: the server is starting up or shutting down
        "53300",  # too_many_connections
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available (lock_timeout)
    }
)
# A connection that fails before the server answers has no SQLSTATE, only libpq's words. Only
# these count as an outage; anything else (authentication, a database or role that does not
# exist, a host name that does not resolve) is a fault in the URL or the server's set-up.
PG_TRANSIENT_MESSAGES = (
    "connection refused",
    "could not connect",
    "timeout expired",
    "timed out",
    "server closed the connection",
    "connection reset",
    "no route to host",
    "network is unreachable",
    "the database system is",  # starting up, shutting down, in recovery mode
    "too many clients",
    "terminating connection",
    "connection is lost",
    "the connection is closed",
    "consuming input failed",
    "could not receive data",
    "could not send data",
    "broken pipe",
)
SCHEMA_SQLSTATES = frozenset({"42P01", "42703"})  # undefined_table, undefined_column
SCHEMA_MESSAGES = ("no such table", "no such column")


def is_transient(exc: BaseException) -> bool:
    """True if retrying later can succeed: the store is locked, busy or unreachable."""
    if isinstance(exc, StoreUnavailableError):
        return True
    if isinstance(exc, sa.exc.TimeoutError):
        return True  # no pooled connection came free in time
    if not isinstance(exc, sa.exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True  # SQLAlchemy saw the connection die (a server restart, a dropped socket)
    orig = exc.orig
    message = str(orig).lower()
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)
        return any(m in message for m in SQLITE_TRANSIENT_MESSAGES)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate:
        return sqlstate[:2] in PG_TRANSIENT_CLASSES or sqlstate in PG_TRANSIENT_SQLSTATES
    if isinstance(exc, sa.exc.InterfaceError):
        return True  # psycopg: the connection is closed or broken under the client
    if isinstance(exc, sa.exc.OperationalError):
        return any(m in message for m in PG_TRANSIENT_MESSAGES)
    return False


def install(engine: sa.Engine) -> None:
    """Make `engine` raise StoreUnavailableError for every transient error, on connect as well as
    on a statement; SQLAlchemy still invalidates a dead connection before the error is raised."""
    where = engine.url.render_as_string(hide_password=True)

    @sa.event.listens_for(engine, "handle_error")
    def _on_error(context: sa.engine.ExceptionContext) -> None:
        error = context.sqlalchemy_exception
        # A failed pre-ping is SQLAlchemy's own cue to replace a dead pooled connection.
        if context.is_pre_ping or error is None or not is_transient(error):
            return
        raise StoreUnavailableError(
            f"the store at {where} is unavailable: {first_line(context.original_exception)}"
        ) from error


def describe_fault(exc: sa.exc.SQLAlchemyError) -> str:
    """What a non-transient store error means and what to change, in one paragraph."""
    orig = getattr(exc, "orig", None) or exc
    detail = f"{type(orig).__name__}: {first_line(orig)}"
    message = str(orig).lower()
    if getattr(orig, "sqlstate", None) in SCHEMA_SQLSTATES or any(
        m in message for m in SCHEMA_MESSAGES
    ):
        return (
            f"the store's schema is missing or damaged ({detail}): the database at the store "
            "URL is not one runwright set up, or its tables were dropped; point --store or "
            "RUNWRIGHT_STORE at the right database, or restore this one from a backup"
        )
    if isinstance(exc, sa.exc.IntegrityError):
        return (
            f"the store refused a write that breaks one of its constraints ({detail}); that is "
            "a runwright bug, not an outage, so it was not retried: please report it with this "
            "message"
        )
    return (
        f"the store failed with an error that retrying will not fix ({detail}); check the "
        "store URL, its credentials and the database server's log"
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
