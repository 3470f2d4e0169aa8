"""How a controller drives runs when it shares the store with others: under leases.

Each run is driven by the holder of its lease (leasing.py). `drive` and `drive_all` pass over a
run only under its lease; every store write of the pass is refused once the lease is no longer
this controller's (LeaseLostError: the run is dropped, and whoever drives it next starts from the
records); a run whose lease another live controller holds is left to it, and this one stands by
and takes it over, recording the takeover, once that lease is released or runs out. A store
outage is ridden out (outage.py) and recorded in each driven run's log once the store is back.

`LeasedDriving` is the controller's base: it knows nothing of what a pass does (`reconcile`) nor
what the controller caches of a run (`_let_go`, `_forget`).
"""

import gc
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from typing import TypeVar

from runwright.control.admission import AdmissionStep
from runwright.control.journal import Journal
from runwright.control.leasing import ControllerLeases, PassOutcome, describe_lease
from runwright.control.outage import Outage, OutageRider
from runwright.control.runlog import RunLogs
from runwright.control.states import AT_REST, TERMINAL, RunState
from runwright.errors import LeaseLostError
from runwright.events import EventType
from runwright.store import RunRecord, Store, is_transient
from runwright.store.leases import Lease, LeaseOutcome, LeaseResult

log = logging.getLogger("runwright.control.controller")
"""The controller's own logger: what it says of leases is said by the controller."""
T = TypeVar("T")
DRIVEN = [s for s in RunState if s not in AT_REST]
"""The states a controller's sweep picks runs up in (a paused run waits for `resume`)."""


def freeze_start_up_heap() -> None:
    """Put every object the process holds once it is set up (modules, classes, the store's and
    pydantic's schemas: ~310,000 with the CLI imported) into the collector's permanent
    generation (`gc.freeze`). They live as long as the process, yet each full collector pass
    walked them all, a pause of 0.4-1.2 s on this machine in the middle of a pass that times
    heartbeats; frozen, a full pass walks only what the controller made since. Cyclic garbage
    of the set-up (little) is kept for the process's life. Once per process: what a later
    drive finds was made since, and is the collector's to walk."""
    global _heap_frozen
    if not _heap_frozen:
        _heap_frozen = True
        gc.freeze()


_heap_frozen = False


class LeasedDriving(ABC):
    """The drive loops of a controller (module docstring)."""

    store: Store
    leases: ControllerLeases
    journal: Journal
    logs: RunLogs
    outage: OutageRider
    admission: AdmissionStep | None
    poll_seconds: float
    _takeovers: dict[str, LeaseResult]
    _standing_by: dict[str, tuple[str | None, int]]

    @abstractmethod
    def reconcile(self, run_id: str) -> bool:
        """One pass; True once nothing of the run is left to drive."""

    @abstractmethod
    def _emit(self, run_id: str) -> None:
        """Hand the run's new events to whoever watches this controller."""

    @abstractmethod
    def _let_go(self, run_id: str) -> None:
        """Forget everything this controller holds of a run it no longer drives."""

    def drive(self, run_id: str) -> RunRecord:
        """Reconcile until the run is terminal and its workers are gone (`run_id` may be a unique
        prefix). Ctrl-C cancels. A store outage is ridden out, however long it lasts. While
        another live controller holds the run's lease, this one says so, shows the run's events
        and stands by: it takes the run over if that lease is released or runs out, and returns
        once the run is finished, by whichever controller. Leaving hands the lease back."""
        freeze_start_up_heap()
        # get_run takes the prefix too, so an outage before the id is resolved is still recorded.
        run_id = self._riding(lambda: self.store.get_run(run_id).run_id, [run_id])
        runs = [run_id]
        try:
            try:
                while not self._riding(lambda: self._drive_pass(run_id), runs):
                    self._riding(self._end_admission, runs)
                    time.sleep(self.poll_seconds)
            except KeyboardInterrupt:
                from runwright.control.cancel import request_cancel

                why = "interrupted by the user (Ctrl-C)"
                self._riding(lambda: request_cancel(self.store, run_id, why), runs)
                while not self._riding(lambda: self._drive_pass(run_id), runs):
                    time.sleep(self.poll_seconds)
            self._riding(lambda: self._emit(run_id), runs)
            return self._riding(lambda: self.store.get_run(run_id), runs)
        finally:
            self._release_leases()

    def drive_all(self, *, until_idle: bool = True) -> list[str]:
        """Pick up every unfinished run in the store where its records say it is, and reconcile
        them all until none is left (or forever, as a daemon). Runs another live controller
        holds the lease of are left to it; this one takes each over if its lease is released or
        runs out. Stopping this controller leaves the workers running and hands its leases back,
        so the next controller adopts them at once. A store outage is ridden out."""
        freeze_start_up_heap()
        active: set[str] = set()
        finished: list[str] = []
        try:
            while True:
                self._riding(lambda: self._sweep(active, finished), active)
                if not active and until_idle:
                    return finished
                time.sleep(self.poll_seconds)
        finally:
            self._release_leases()

    def _sweep(self, active: set[str], finished: list[str]) -> None:
        """One pass over every unfinished run, each under its lease. `active` and `finished`
        change run by run, so a sweep the store breaks off keeps what it did."""
        listed = {r.run_id for r in self.store.list_runs(limit=100_000, states=DRIVEN)}
        active.update(listed)
        for lost in self.leases.renew():
            self._drop(lost)
        others, now = self.store.leases.snapshot([r for r in active if not self.leases.holds(r)])
        for run_id in sorted(active):
            if not self.leases.holds(run_id) and not self._take(run_id, others.get(run_id), now):
                if run_id not in listed:
                    active.discard(run_id)  # terminal: its holder winds it down
                continue
            if self._leased_pass(run_id) is PassOutcome.FINISHED:
                active.discard(run_id)
                finished.append(run_id)
        self._end_admission()

    # -- store outages --------------------------------------------------------------------------

    def _riding(self, work: Callable[[], T], run_ids: Collection[str] = ()) -> T:
        """`work()`, riding out a store outage; once the store is back, the outage is recorded in
        the log of every run in `run_ids` (read then) before anything else is written."""
        return self.outage.call(work, lambda outage: self._record_outage(run_ids, outage))

    def _record_outage(self, run_ids: Collection[str], outage: Outage) -> None:
        for run_id in sorted(run_ids):
            if not self.leases.holds(run_id):
                continue  # another controller drives it, and records its own view
            try:
                with self.leases.fenced(run_id):
                    run = self.store.get_run(run_id)
                    if RunState(run.state) in TERMINAL and self.logs.of(run_id).finished:
                        continue  # RUN_FINISHED stays the last event of a finished run's log
                    self.journal.store_unavailable(run, outage)
            except LeaseLostError as exc:
                self._drop(run_id, exc)

    # -- leases (leasing.py) --------------------------------------------------------------------

    def _drive_pass(self, run_id: str) -> bool:
        """`drive`'s pass: renew or take the run's lease and reconcile under it, or stand by.
        True once the run is finished (by this controller or the one that holds it)."""
        for lost in self.leases.renew():
            self._drop(lost)
        if not self.leases.holds(run_id):
            lease, now = self.store.leases.get(run_id)
            if not self._take(run_id, lease, now):
                self._emit(run_id)
                run = self.store.get_run(run_id)
                return RunState(run.state) is RunState.PAUSED or (
                    RunState(run.state) in TERMINAL and self.logs.of(run_id).finished
                )
        return self._leased_pass(run_id) is PassOutcome.FINISHED

    def _take(self, run_id: str, lease: Lease | None, now_unix_s: float) -> bool:
        """Take the run's lease unless another live controller holds it (then say so, once per
        holder, and stand by). A takeover is recorded in the run's log."""
        result = self.leases.take_if_free(run_id, lease, now_unix_s)
        if result is None or result.outcome is LeaseOutcome.HELD:
            held = result.lease if result is not None else lease
            assert held is not None
            if self._standing_by.get(run_id) != (held.holder, held.epoch):
                self._standing_by[run_id] = (held.holder, held.epoch)
                log.warning(
                    "run %s is %s; this controller stands by and takes it over if that lease "
                    "is handed back or runs out",
                    run_id,
                    describe_lease(held, result.db_now_unix_s if result else now_unix_s),
                )
            return False
        self._standing_by.pop(run_id, None)
        if result.outcome is LeaseOutcome.TAKEN_OVER:
            reason, uncontrolled_seconds = _takeover_reason(result)
            log.warning(
                "took run %s over from controller %s (%s; %.1f s without a controller), epoch %d",
                run_id,
                result.previous.holder,
                reason,
                uncontrolled_seconds,
                result.lease.epoch,
            )
            self._takeovers[run_id] = result  # recorded by the next pass, under the new lease
        return self.leases.holds(run_id)

    def _record_takeover(self, result: LeaseResult) -> None:
        """CONTROLLER_TAKEOVER: who held the run, why it was free, how long it went without a
        controller (database clock). The pass then adopts the run where its records say."""
        run = self.store.get_run(result.lease.run_id)
        if RunState(run.state) in TERMINAL and self.logs.of(run.run_id).finished:
            return  # RUN_FINISHED stays the last event of a finished run's log
        reason, uncontrolled_seconds = _takeover_reason(result)
        self.journal.record(
            run,
            EventType.CONTROLLER_TAKEOVER,
            op=f"epoch{result.lease.epoch}",
            per_step=False,
            old_holder=result.previous.holder,
            new_holder=result.lease.holder,
            epoch=result.lease.epoch,
            reason=reason,
            uncontrolled_seconds=round(uncontrolled_seconds, 3),
            old_lease_seconds=result.previous.lease_seconds,
        )

    def _leased_pass(self, run_id: str) -> PassOutcome:
        """One reconcile pass under the run's lease. A write or act the lease no longer allows
        is refused before it happens (LeaseLostError): the run is dropped, nothing of the pass
        is written after that, and its workers are left to the lease's holder."""
        for lost in self.leases.renew_if_due():
            self._drop(lost)
        if not self.leases.holds(run_id):
            return PassOutcome.LOST
        try:
            with self.leases.fenced(run_id):
                if run_id in self._takeovers:
                    self._record_takeover(self._takeovers[run_id])
                    del self._takeovers[run_id]
                done = self.reconcile(run_id)
        except LeaseLostError as exc:
            self._drop(run_id, exc)
            return PassOutcome.LOST
        if not done:
            return PassOutcome.PASSED
        self.leases.release([run_id])
        return PassOutcome.FINISHED

    def _drop(self, run_id: str, why: Exception | None = None) -> None:
        """Forget what this controller knew of a run whose lease it lost: whoever drives it
        next (this one included, after a new take) starts from the records."""
        log.warning("%s", why or f"controller {self.leases.holder} lost the lease of run {run_id}")
        self.leases.forget(run_id)
        self._takeovers.pop(run_id, None)
        self._let_go(run_id)

    def _end_admission(self) -> None:
        """Hand the admission lock back between sweeps: other controllers' queued runs are
        decided by their own passes (control/admission.py)."""
        if self.admission is not None:
            self.admission.release()

    def _release_leases(self) -> None:
        """Hand back every lease held (and the admission lock), so other controllers take the
        runs at once; if the store cannot be reached, they run out by themselves."""
        try:
            self._end_admission()
            self.leases.release()
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("could not hand the leases back (%s); they run out by themselves", exc)


def _takeover_reason(result: LeaseResult) -> tuple[str, float]:
    """Why a taken lease was free (released, expired, holder_gone) and how long the run had gone
    without a controller: since the old holder's release or its last renewal (database clock)."""
    old, now = result.previous, result.db_now_unix_s
    if old.released:
        return "released", now - old.expires_unix_s
    reason = "expired" if old.expires_unix_s <= now else "holder_gone"
    return reason, now - (old.renewed_unix_s or old.expires_unix_s)
