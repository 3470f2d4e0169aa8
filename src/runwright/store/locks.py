"""Named store locks: one controller at a time does a store-wide job (the admission pass).

A lock is a row of `store_locks`: its name, its holder (a controller's `host:pid:suffix`), an
epoch raised on every change of holder, and an expiry computed by the DATABASE's clock, as run
leases are (store/leases.py). `acquire` is a compare-and-set on the locked row: a free, released
or expired lock is taken at a new epoch, the holder's own is renewed at the same epoch, and a
live lock of another holder is left alone (the result names it, for a reason in words).

A lock fences writes the way a run lease does: within `Store.fenced_by_lock(token)`, every write
transaction first checks that the token is still the lock's (LockLostError otherwise, and
nothing is written), and keeps the row locked until it commits. So a controller that stalled
past its lock's expiry, while another took the lock and admitted runs, cannot then write the
admission it decided on stale figures.
"""

import importlib
from typing import TYPE_CHECKING

import sqlalchemy as sa

from runwright.errors import RunwrightError
from runwright.records import Record
from runwright.store.leases import db_now
from runwright.store.schema import store_locks

if TYPE_CHECKING:
    from runwright.store.store import Store


class LockLostError(RunwrightError):
    """A write under a store lock was refused: another holder took the lock (this one's ran out
    while it could not renew it). The caller drops what it decided and decides again."""


class LockToken(Record):
    """What a holder writes under: the lock's name, its holder id and the epoch it holds."""

    name: str
    holder: str
    epoch: int


class LockResult(Record):
    """An acquire's outcome: whether the caller holds the lock now, and who holds it."""

    held: bool
    """The caller holds it (taken or renewed)."""
    holder: str | None
    """Who holds it now (the caller, when `held`)."""
    epoch: int
    expires_unix_s: float
    """When it runs out unless renewed (the database's clock)."""

    def token(self, name: str) -> LockToken:
        assert self.held and self.holder is not None
        return LockToken(name=name, holder=self.holder, epoch=self.epoch)


class StoreLocks:
    """The store's named locks (`store.locks`); see the module docstring."""

    def __init__(self, store: "Store") -> None:
        self._engine = store.engine
        self._now = db_now(self._engine.dialect.name)

    def acquire(self, name: str, holder: str, seconds: float) -> LockResult:
        """Take lock `name` for `seconds` if it is free, released, expired or already
        `holder`'s (then renewed at the same epoch); otherwise leave it to its holder."""
        if seconds <= 0:
            raise ValueError(f"seconds must be positive, got {seconds}")
        with self._engine.begin() as conn:
            dialect = importlib.import_module(f"sqlalchemy.dialects.{conn.dialect.name}")
            conn.execute(
                dialect.insert(store_locks)
                .values(name=name, holder=None, epoch=0, released=True, expires_unix_s=0.0)
                .on_conflict_do_nothing(index_elements=[store_locks.c.name])
            )
            row = conn.execute(
                store_locks.select().where(store_locks.c.name == name).with_for_update()
            ).one()
            now = float(conn.execute(sa.select(self._now)).scalar_one())
            mine = row.holder == holder and not row.released
            if not mine and not row.released and row.expires_unix_s > now:
                expires = row.expires_unix_s
                return LockResult(
                    held=False, holder=row.holder, epoch=row.epoch, expires_unix_s=expires
                )
            epoch = row.epoch if mine else row.epoch + 1
            conn.execute(
                store_locks.update()
                .where(store_locks.c.name == name, store_locks.c.epoch == row.epoch)
                .values(
                    holder=holder,
                    epoch=epoch,
                    released=False,
                    acquired_unix_s=row.acquired_unix_s if mine else now,
                    expires_unix_s=now + seconds,
                )
            )
        return LockResult(held=True, holder=holder, epoch=epoch, expires_unix_s=now + seconds)

    def release(self, token: LockToken) -> bool:
        """Hand the lock back at once, if `token` still holds it; True if it did."""
        with self._engine.begin() as conn:
            changed = conn.execute(
                store_locks.update()
                .where(
                    store_locks.c.name == token.name,
                    store_locks.c.holder == token.holder,
                    store_locks.c.epoch == token.epoch,
                    store_locks.c.released.is_(False),
                )
                .values(released=True, expires_unix_s=self._now)
            ).rowcount
        return bool(changed)

    def check(self, conn: sa.Connection, token: LockToken) -> None:
        """Inside a write transaction: LockLostError unless `token` still holds its lock. The
        row stays locked until the transaction ends, so no take passes this write."""
        row = conn.execute(
            sa.select(store_locks.c.holder, store_locks.c.epoch, store_locks.c.released)
            .where(store_locks.c.name == token.name)
            .with_for_update()
        ).first()
        if row is not None and (row.holder, row.epoch, row.released) == (
            token.holder,
            token.epoch,
            False,
        ):
            return
        now = "nobody holds it now" if row is None or row.released else f"{row.holder} holds it"
        raise LockLostError(
            f"{token.holder} no longer holds the store lock {token.name!r} (it held epoch "
            f"{token.epoch}; {now}): the write was refused"
        )
