"""Run leases: which controller drives each run, fenced by an epoch, timed by the database.

Several controllers may share one store (PostgreSQL across hosts; SQLite between the processes of
one host). Each run is driven by at most one of them at a time, the holder of the run's lease (a
row of `run_leases`, created on the first acquire). A lease has
- a holder, `host:pid:suffix` of the controller (control/leasing.py makes it; the random suffix
  tells apart two controllers of one process, or a pid used again), and the holder's node (boot
  id and pid namespace), so a controller on the same node can tell that the holder is gone;
- an epoch, the fencing token of controller writes, raised on every change of holder (a take of
  a free, released or expired lease), kept by a renewal;
- an expiry, `lease_seconds` after the last acquire or renewal, computed by the DATABASE from its
  own clock (PostgreSQL `clock_timestamp()`, SQLite's `julianday('now')`) and stored as unix
  seconds: controllers on hosts whose clocks disagree still agree on when a lease ran out.

`acquire` is a compare-and-set on the locked row (FOR UPDATE on PostgreSQL; SQLite's BEGIN
IMMEDIATE already holds the write lock), so two acquirers are serialised and one wins. `renew`
extends only leases still held by the caller with the epoch it holds, `release` frees them at
once (a controller that stops cleanly hands its runs over without making anyone wait out the
expiry).

Fencing: every store write a controller makes while it drives a run runs `check` first, in the
same transaction (`Store.begin` while `Store.fenced_by(token)` is in force). A write whose epoch
is no longer current raises LeaseLostError before anything is written, so the transaction rolls
back whole. `check` locks the lease row until the write commits, so a takeover waits for a write
in flight and the write can never land after it. The expiry is not part of the check: an expired
lease that nobody took is still its holder's, and a write under it is harmless; what the expiry
bounds is when another controller may take the run, and so when the holder must stop acting on
its workers (control/leasing.py).
"""

import importlib
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from runwright.errors import LeaseLostError, NotFoundError
from runwright.records import Record
from runwright.store.schema import run_leases

if TYPE_CHECKING:
    from runwright.store.store import Store

JULIAN_DAY_OF_UNIX_EPOCH = 2440587.5
"""1970-01-01T00:00Z as a Julian day number (SQLite's date functions count Julian days)."""
SECONDS_PER_DAY = 86400.0
_ID_CHUNK = 500
"""Run ids per IN (...) list: under SQLite's smallest host-parameter limit (999)."""
_PAIR_CHUNK = 250
"""(run id, epoch) pairs per IN (...) list: two parameters each."""


class LeaseOutcome(StrEnum):
    """What an acquire did. Expected cases are values, never exceptions."""

    ACQUIRED = "ACQUIRED"
    """A lease nobody held before (or the caller released) is the caller's, at a new epoch."""
    TAKEN_OVER = "TAKEN_OVER"
    """Another controller's released, expired or gone lease is the caller's, at a new epoch."""
    RENEWED = "RENEWED"
    """The caller held it already: extended, same epoch."""
    HELD = "HELD"
    """Another controller holds a live lease: nothing changed."""


class LeaseToken(Record):
    """What a controller writes under: the run, its holder id and the epoch it holds."""

    run_id: str
    holder: str
    epoch: int


class Lease(Record):
    """A run's lease row. Times are the database's clock, unix seconds."""

    run_id: str
    holder: str | None
    """The controller that holds (or, once released, last held) the lease; None if never held."""
    holder_node: str | None
    """The holder's node (boot id and pid namespace), to tell whether its process is gone."""
    epoch: int
    """Fencing token of controller writes; raised on every change of holder."""
    released: bool
    """Its holder handed it back (stopped cleanly, or the run finished)."""
    lease_seconds: float | None
    """How long each acquire or renewal made it last."""
    acquired_unix_s: float | None
    """When the current holder took it."""
    renewed_unix_s: float | None
    """The holder's last acquire or renewal."""
    expires_unix_s: float
    """When it runs out, unless renewed (its release time, once released)."""

    def live(self, now_unix_s: float) -> bool:
        """Held, not released and not expired at `now_unix_s` (the database's clock)."""
        return self.holder is not None and not self.released and self.expires_unix_s > now_unix_s

    def token(self) -> LeaseToken:
        assert self.holder is not None
        return LeaseToken(run_id=self.run_id, holder=self.holder, epoch=self.epoch)


class LeaseResult(Record):
    """The outcome of an acquire, the lease as it stands, and the lease before it."""

    outcome: LeaseOutcome
    lease: Lease
    previous: Lease
    """The row before the acquire (for a takeover: whom it was taken from, and when that lease
    was last renewed and ran out)."""
    db_now_unix_s: float
    """The database's clock when the acquire decided."""


def db_now(dialect: str) -> sa.ColumnElement[Any]:
    """The database's own time, unix seconds, as an SQL expression. PostgreSQL's
    `clock_timestamp()` is the time of the statement (unlike `now()`, the transaction's start);
    SQLite's 'now' is fixed within one statement, with millisecond resolution."""
    if dialect == "postgresql":
        return sa.cast(sa.extract("epoch", sa.func.clock_timestamp()), sa.Float)
    return (sa.func.julianday("now") - JULIAN_DAY_OF_UNIX_EPOCH) * SECONDS_PER_DAY


class RunLeases:
    """The store's leases (`store.leases`); see the module docstring."""

    def __init__(self, store: "Store") -> None:
        self._engine = store.engine
        self._now = db_now(self._engine.dialect.name)

    def now_unix_s(self) -> float:
        """The database's clock."""
        with self._engine.connect() as conn:
            return float(conn.execute(sa.select(self._now)).scalar_one())

    def snapshot(self, run_ids: Collection[str]) -> tuple[dict[str, Lease], float]:
        """The leases of `run_ids` that have a row, and the database's clock, in one read."""
        ids = sorted(run_ids)
        found: dict[str, Lease] = {}
        with self._engine.connect() as conn:
            now = float(conn.execute(sa.select(self._now)).scalar_one())
            for start in range(0, len(ids), _ID_CHUNK):
                chunk = ids[start : start + _ID_CHUNK]
                for row in conn.execute(run_leases.select().where(run_leases.c.run_id.in_(chunk))):
                    found[row.run_id] = Lease.model_validate(row._asdict())
        return found, now

    def get(self, run_id: str) -> tuple[Lease | None, float]:
        """The run's lease (None if no controller ever took it) and the database's clock."""
        found, now = self.snapshot([run_id])
        return found.get(run_id), now

    def acquire(
        self,
        run_id: str,
        holder: str,
        lease_seconds: float,
        *,
        holder_node: str | None = None,
        gone: LeaseToken | None = None,
    ) -> LeaseResult:
        """Take the run's lease if it is free (never held, released, expired) or already
        `holder`'s; a renewal keeps the epoch, any other take raises it. `gone` names a live
        lease whose holder the caller has seen gone (its process has ended on the caller's own
        node): it is taken too, if it still has that holder and epoch. NotFoundError if there is
        no such run."""
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
        try:
            with self._engine.begin() as conn:
                conn.execute(_insert_free(conn.dialect.name, run_id))
                row = conn.execute(
                    run_leases.select().where(run_leases.c.run_id == run_id).with_for_update()
                ).one()
                # Read after the lock is held: a take that waited for another must judge the
                # expiry at the time it decides, not when it started waiting.
                now = float(conn.execute(sa.select(self._now)).scalar_one())
                before = Lease.model_validate(row._asdict())
                mine = before.holder == holder and not before.released
                holder_gone = gone is not None and (gone.holder, gone.epoch) == (
                    before.holder,
                    before.epoch,
                )
                if before.live(now) and not mine and not holder_gone:
                    return LeaseResult(
                        outcome=LeaseOutcome.HELD, lease=before, previous=before, db_now_unix_s=now
                    )
                after = before.model_copy(
                    update={
                        "holder": holder,
                        "holder_node": holder_node,
                        "epoch": before.epoch if mine else before.epoch + 1,
                        "released": False,
                        "lease_seconds": lease_seconds,
                        "acquired_unix_s": before.acquired_unix_s if mine else now,
                        "renewed_unix_s": now,
                        "expires_unix_s": now + lease_seconds,
                    }
                )
                conn.execute(
                    run_leases.update()
                    .where(run_leases.c.run_id == run_id, run_leases.c.epoch == before.epoch)
                    .values(**after.model_dump(exclude={"run_id"}))
                )
        except sa.exc.IntegrityError:
            raise NotFoundError(f"no run {run_id!r} to take the lease of") from None
        if mine:
            outcome = LeaseOutcome.RENEWED
        elif before.holder in (None, holder):
            outcome = LeaseOutcome.ACQUIRED
        else:
            outcome = LeaseOutcome.TAKEN_OVER
        return LeaseResult(outcome=outcome, lease=after, previous=before, db_now_unix_s=now)

    def renew(
        self, holder: str, epochs: Mapping[str, int], lease_seconds: float
    ) -> dict[str, Lease]:
        """Extend every lease in `epochs` (run id -> the epoch held) that `holder` still holds at
        that epoch, in one transaction; returns those renewed (the rest are lost)."""
        renewed: dict[str, Lease] = {}
        pairs = sorted(epochs.items())
        with self._engine.begin() as conn:
            for start in range(0, len(pairs), _PAIR_CHUNK):
                rows = conn.execute(
                    run_leases.update()
                    .where(
                        sa.tuple_(run_leases.c.run_id, run_leases.c.epoch).in_(
                            pairs[start : start + _PAIR_CHUNK]
                        ),
                        run_leases.c.holder == holder,
                        run_leases.c.released.is_(False),
                    )
                    .values(
                        renewed_unix_s=self._now,
                        expires_unix_s=self._now + lease_seconds,
                        lease_seconds=lease_seconds,
                    )
                    .returning(*run_leases.c)
                )
                for row in rows:
                    renewed[row.run_id] = Lease.model_validate(row._asdict())
        return renewed

    def release(self, holder: str, epochs: Mapping[str, int]) -> list[str]:
        """Hand back the leases in `epochs` that `holder` still holds at that epoch: they are
        free at once. The holder stays on the row, for the record. Returns those released."""
        released: list[str] = []
        with self._engine.begin() as conn:
            for run_id, epoch in sorted(epochs.items()):
                changed = conn.execute(
                    run_leases.update()
                    .where(
                        run_leases.c.run_id == run_id,
                        run_leases.c.holder == holder,
                        run_leases.c.epoch == epoch,
                        run_leases.c.released.is_(False),
                    )
                    .values(released=True, expires_unix_s=self._now)
                ).rowcount
                if changed:
                    released.append(run_id)
        return released

    def check(self, conn: sa.Connection, token: LeaseToken) -> None:
        """Inside a write transaction: LeaseLostError unless `token` is the run's current lease.
        The row stays locked until the transaction ends, so no takeover passes this write."""
        row = conn.execute(
            sa.select(run_leases.c.holder, run_leases.c.epoch, run_leases.c.released)
            .where(run_leases.c.run_id == token.run_id)
            .with_for_update()
        ).first()
        if row is not None and (row.holder, row.epoch, row.released) == (
            token.holder,
            token.epoch,
            False,
        ):
            return
        now_held = (
            "nobody holds it now"
            if row is None or row.released
            else f"controller {row.holder} holds it now, at epoch {row.epoch}"
        )
        raise LeaseLostError(
            f"controller {token.holder} no longer holds the lease of run {token.run_id} "
            f"(it held epoch {token.epoch}; {now_held}): the write was refused and the run is "
            "left to the lease's holder"
        )

    def insert_held(
        self,
        conn: sa.Connection,
        run_id: str,
        holder: str,
        lease_seconds: float,
        holder_node: str | None = None,
    ) -> None:
        """Inside the transaction that creates run `run_id`: its lease, held by `holder` at epoch
        1, so no other controller can take a run between its submit and its first pass."""
        conn.execute(
            run_leases.insert().values(
                run_id=run_id,
                holder=holder,
                holder_node=holder_node,
                epoch=1,
                released=False,
                lease_seconds=lease_seconds,
                acquired_unix_s=self._now,
                renewed_unix_s=self._now,
                expires_unix_s=self._now + lease_seconds,
            )
        )


def _insert_free(dialect: str, run_id: str) -> sa.Insert:
    """The row of a lease nobody holds, unless the run has one already (ON CONFLICT DO NOTHING,
    which SQLite and PostgreSQL both speak)."""
    # Imported on first use, as store/appends.py does: PostgreSQL's module costs a quarter of a
    # second at a CLI command's start.
    insert = importlib.import_module(f"sqlalchemy.dialects.{dialect}").insert
    return (
        insert(run_leases)
        .values(run_id=run_id, holder=None, epoch=0, released=False, expires_unix_s=0.0)
        .on_conflict_do_nothing(index_elements=[run_leases.c.run_id])
    )
