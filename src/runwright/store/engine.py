"""Open the durable store: resolve its URL, configure the engine, apply migrations.

SQLite is the embedded default (`<root>/state.db`): WAL so readers never block the writer, a busy
timeout so concurrent writers wait instead of failing, foreign keys on, and every transaction
started with BEGIN IMMEDIATE so a read-then-write can never deadlock on lock upgrade. Any
PostgreSQL URL works the same way for shared deployments; its pool pings a connection before
handing it out, so connections a server restart killed are replaced instead of failing a pass.
Either way a transient error (locked, busy, unreachable) is raised as StoreUnavailableError
(faults.py).
"""

import os
import re
from functools import cache
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from runwright.errors import StoreError
from runwright.layout import store_file
from runwright.store import faults

STORE_ENV = "RUNWRIGHT_STORE"
SQLITE_BUSY_TIMEOUT_MS = 5_000
"""How long a SQLite statement waits for a lock. Writers here hold it for one compare-and-set
(milliseconds), so 5 s rides out any burst of controllers and CLI commands; a longer hold (a
backup, a migration) is an outage, which the controller should see, report and retry with backoff
rather than sit silently inside one statement."""
PG_CONNECT_TIMEOUT_SECONDS = 10
"""A PostgreSQL host that drops packets would otherwise hold a connection attempt (and the
controller's pass) for the kernel's TCP connect timeout, about 2 min on Linux; a connect_timeout
in the URL wins."""
MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def resolve_store_url(store: str | None, root: Path) -> str:
    """`--store`, else RUNWRIGHT_STORE, else the SQLite file `<root>/state.db`."""
    url = store or os.environ.get(STORE_ENV)
    if not url:
        return f"sqlite:///{store_file(root)}"
    if url.startswith(("postgres://", "postgresql://")):
        # The psycopg 3 driver; plain postgresql:// would ask SQLAlchemy for psycopg2.
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith(("sqlite:///", "postgresql+psycopg://")):
        return url
    raise StoreError(
        f"store URL {url!r} is not supported; use sqlite:///PATH/state.db or "
        "postgresql://USER@HOST:PORT/DB (via --store or RUNWRIGHT_STORE)"
    )


def _sqlite_engine(url: str, read_only: bool = False) -> sa.Engine:
    path = Path(url.removeprefix("sqlite:///"))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the store folder {path.parent}: {exc}") from None
    engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide where transactions begin.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.close()

    # A reader's transaction begins DEFERRED: under WAL it reads a snapshot and never waits for
    # the write lock, which IMMEDIATE would take even to read (a server's GETs, issue 14).
    begin = "BEGIN DEFERRED" if read_only else "BEGIN IMMEDIATE"

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql(begin)

    return engine


def create_engine(url: str, read_only: bool = False) -> sa.Engine:
    """`read_only`: for a store only read through (SQLite transactions begin DEFERRED)."""
    if url.startswith("sqlite:///"):
        engine = _sqlite_engine(url, read_only)
    else:
        try:
            timeout = (
                {}
                if "connect_timeout" in sa.make_url(url).query
                else {"connect_timeout": PG_CONNECT_TIMEOUT_SECONDS}
            )
            engine = sa.create_engine(url, pool_pre_ping=True, connect_args=timeout)
        except ModuleNotFoundError as exc:
            raise StoreError(
                f"the PostgreSQL driver is missing ({exc.name}); install it with "
                "`pip install 'psycopg[binary]'`"
            ) from None
    faults.install(engine)
    return engine


_REVISION_LINE = re.compile(r"^(down_revision|revision) = (None|\"[^\"]+\")$", re.MULTILINE)


@cache
def schema_head() -> str:
    """The newest migration's revision id, read from the migration files' `revision` and
    `down_revision` lines: the one no other migration revises. Alembic computes the same
    (tests/store check it), but importing it costs about half a second, which every CLI command
    that opens a store already at the head would pay for nothing."""
    revisions: set[str] = set()
    revised: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"):
        found = dict(_REVISION_LINE.findall(path.read_text()))
        revisions.add(found["revision"].strip('"'))
        if found.get("down_revision", "None") != "None":
            revised.add(found["down_revision"].strip('"'))
    heads = revisions - revised
    if len(heads) != 1:
        raise StoreError(f"the store's migrations have {len(heads)} heads ({sorted(heads)})")
    return heads.pop()


def _current_revision(conn: sa.Connection) -> str | None:
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def migrate(engine: sa.Engine) -> None:
    """Bring the schema to the newest Alembic revision (a no-op when it is there already)."""
    try:
        with engine.begin() as conn:
            if _current_revision(conn) == schema_head():
                return
            from alembic import command
            from alembic.config import Config

            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    except sa.exc.OperationalError as exc:
        raise StoreError(f"cannot open the store at {engine.url!r}: {exc.orig}") from None
