"""Project quotas per pool, with borrowing of idle quota that its owner can reclaim.

Kueue's model (ClusterQueue nominal quota, borrowing within a cohort, reclaim of borrowed quota
when its owner needs it: https://kueue.sigs.k8s.io/docs/concepts/preemption/), per pool:

  - a gang that fits in its project's nominal headroom (quota - devices its non-borrowed gangs
    hold) is admitted on its own quota;
  - otherwise it may borrow, as a whole gang marked `borrowed`, when the pool's idle quota (the sum
    of all quotas - all devices held in the pool) covers it, its project stays within its
    borrowing limit, and it is preemptible: a borrowed gang is reclaimed by preemption when the
    owner of the quota needs it, so a gang that could not be preempted may not borrow;
  - so a project's non-borrowed devices never exceed its quota, and everything above it is
    borrowed, reclaimable devices.

A pool without any quota is unmetered: every gang is admitted on its own quota.
"""

from dataclasses import dataclass

from runwright.sched import reasons
from runwright.sched.reasons import PendingReason
from runwright.sched.requests import GangRequest, Quotas, RunningGang


@dataclass(frozen=True)
class QuotaVerdict:
    """How a gang may be charged: on its own quota, borrowed, or not at all (with the reason)."""

    allowed: bool
    borrowed: bool = False
    reason: PendingReason | None = None


class QuotaLedger:
    """Devices held per (pool, project), split into nominal and borrowed, updated as a pass
    admits and preempts gangs."""

    def __init__(self, quotas: Quotas, running: tuple[RunningGang, ...]) -> None:
        self._quota: dict[tuple[str, str], int] = {}
        self._limit: dict[tuple[str, str], int | None] = {}
        self._pool_quota: dict[str, int] = {}
        for entry in quotas.projects:
            key = (entry.pool, entry.project)
            self._quota[key] = entry.devices
            self._limit[key] = entry.borrowing_limit_devices
            self._pool_quota[entry.pool] = self._pool_quota.get(entry.pool, 0) + entry.devices
        self.nominal: dict[tuple[str, str], int] = {}
        """Devices held on the project's own quota."""
        self.borrowed: dict[tuple[str, str], int] = {}
        """Devices held on borrowed quota."""
        self.pool_used: dict[str, int] = {}
        for gang in running:
            self.charge(gang.pool, gang.project, gang.devices, gang.borrowed)

    def metered(self, pool: str) -> bool:
        return pool in self._pool_quota

    def quota_of(self, pool: str, project: str) -> int:
        return self._quota.get((pool, project), 0)

    def headroom(self, pool: str, project: str) -> int:
        """Devices the project may still take on its own quota."""
        return self.quota_of(pool, project) - self.nominal.get((pool, project), 0)

    def idle_quota(self, pool: str) -> int:
        """Quota nobody in the pool holds: what borrowing can draw on."""
        return self._pool_quota.get(pool, 0) - self.pool_used.get(pool, 0)

    def verdict(self, request: GangRequest, may_borrow: bool = True) -> QuotaVerdict:
        """How `request` may be charged; `may_borrow=False` for a policy that never borrows."""
        pool, project, asked = request.pool, request.project, request.devices
        if not self.metered(pool) or asked <= self.headroom(pool, project):
            return QuotaVerdict(allowed=True)
        limit = self._limit.get((pool, project))
        borrowed_now = self.borrowed.get((pool, project), 0)
        idle = self.idle_quota(pool)
        why = None
        if not may_borrow:
            why = "this admission policy does not borrow"
        elif not request.preemptible:
            why = "the run is not preemptible, so borrowed devices could not be reclaimed"
        elif limit is not None and borrowed_now + asked > limit:
            why = (
                f"it would borrow {borrowed_now + asked} devices, over the project's borrowing "
                f"limit of {limit}"
            )
        elif asked > idle:
            why = (
                "pool is full"
                if idle <= 0
                else f"the pool's idle quota is {idle} devices, {asked} needed"
            )
        if why is None:
            return QuotaVerdict(allowed=True, borrowed=True)
        used = self.nominal.get((pool, project), 0) + borrowed_now
        reason = reasons.quota(
            project, pool, used, self.quota_of(pool, project), asked, why, max(idle, 0)
        )
        return QuotaVerdict(allowed=False, reason=reason)

    def charge(self, pool: str, project: str, devices: int, borrowed: bool) -> None:
        """Count `devices` more held by the project (negative: released)."""
        book = self.borrowed if borrowed else self.nominal
        book[(pool, project)] = book.get((pool, project), 0) + devices
        self.pool_used[pool] = self.pool_used.get(pool, 0) + devices
