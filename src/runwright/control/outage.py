"""Riding out a store outage: retry with backoff, warn while it lasts, record it when it ends.

The store is the controller's only state, so while it is locked or unreachable the controller can
neither read what to do nor record what it did. It need not: the workers go on training and
append their reports to the file channel, which the ingestor reads from where it stopped once the
store is back (control/ingest.py). So a pass that hits a transient store error (store/faults.py)
is abandoned as a whole and retried after a backoff, for as long as the outage lasts; every pass
is safe to repeat (controller.py). A permanent error is raised as before.

The backoff is exponential from BACKOFF_BASE_SECONDS, capped at BACKOFF_CAP_SECONDS, with "equal
jitter" (half of each delay fixed, half uniformly random; M. Brooker, "Exponential Backoff And
Jitter", AWS Architecture Blog, 2015), so controllers that lost the same server do not come back
in lockstep.
"""

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from runwright.store import is_transient
from runwright.store.faults import first_line

log = logging.getLogger(__name__)
T = TypeVar("T")

BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 10.0
"""The longest wait between two attempts: a store that is back is noticed within 10 s."""
WARN_EVERY_SECONDS = 5.0
"""While the store is away, one warning line at most this often."""


def backoff_seconds(
    attempt: int,
    uniform: float,
    base_seconds: float = BACKOFF_BASE_SECONDS,
    cap_seconds: float = BACKOFF_CAP_SECONDS,
) -> float:
    """The wait after failed attempt number `attempt` (1, 2, ...), for `uniform` in [0, 1):
    ceiling = min(cap, base * 2^(attempt - 1)), i.e. 0.5, 1, 2, 4, 8, 10, 10, ... s, and the wait
    lies in [ceiling / 2, ceiling)."""
    ceiling = min(cap_seconds, base_seconds * 2.0 ** min(attempt - 1, 64))
    return ceiling / 2 * (1.0 + uniform)


@dataclass
class Outage:
    """One stretch of store unavailability, as this controller saw it."""

    started_unix_s: float
    """Start of the first attempt that failed."""
    started_monotonic: float
    attempts: int = 0
    """Attempts that failed so far."""
    error: str = ""
    """The newest error, in one line."""
    warned_monotonic: float | None = None
    """When the last warning line was written."""

    @property
    def op(self) -> str:
        """Operation id of its STORE_UNAVAILABLE events: one per outage and run."""
        return f"{self.started_unix_s:.6f}"

    def seconds(self) -> float:
        return time.monotonic() - self.started_monotonic


class OutageRider:
    """Runs a controller's store work, riding out transient store errors (one per controller)."""

    def __init__(
        self,
        reset: Callable[[], None] = lambda: None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        uniform: Callable[[], float] = random.random,
        warn_every_seconds: float = WARN_EVERY_SECONDS,
    ) -> None:
        self.reset = reset
        """Called after each failed attempt: drops the pool's connections to a server that may
        restart, so the retry connects afresh."""
        self.sleep = sleep
        self.uniform = uniform
        self.warn_every_seconds = warn_every_seconds
        self.outage: Outage | None = None

    def call(self, work: Callable[[], T], report: Callable[[Outage], None] | None = None) -> T:
        """`work()`, retried after a backoff for as long as the store is unavailable. Once the
        store answers again, `report(outage)` runs before `work`, so the outage is recorded ahead
        of what the retried work writes; a store that flaps may run it twice for one outage, so
        it must be idempotent."""
        while True:
            started_unix_s, started_monotonic = time.time(), time.monotonic()
            try:
                if self.outage is not None and report is not None:
                    report(self.outage)
                result = work()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._failed(exc, started_unix_s, started_monotonic)
                continue
            if self.outage is not None:
                log.warning(
                    "the store is back after %.1f s (%d failed attempts); the controller "
                    "carries on from the workers' channel",
                    self.outage.seconds(),
                    self.outage.attempts,
                )
                self.outage = None
            return result

    def _failed(self, exc: Exception, started_unix_s: float, started_monotonic: float) -> None:
        if self.outage is None:
            self.outage = Outage(started_unix_s=started_unix_s, started_monotonic=started_monotonic)
        outage = self.outage
        outage.attempts += 1
        outage.error = first_line(exc)
        delay = backoff_seconds(outage.attempts, self.uniform())
        now = time.monotonic()
        if (
            outage.warned_monotonic is None
            or now - outage.warned_monotonic >= self.warn_every_seconds
        ):
            outage.warned_monotonic = now
            log.warning(
                "%s; down for %.1f s, %d failed attempts, retrying in %.1f s (the workers keep "
                "running and their reports wait in the run's channel)",
                outage.error,
                outage.seconds(),
                outage.attempts,
                delay,
            )
        self.reset()
        self.sleep(delay)
