"""The working state of one admission pass: free devices per node, the quota ledger, the gangs
still running, and the reservations made so far. admission.py walks the queue; this module
decides one request at a time against that state and updates it.

Free devices are kept as index lists per offered node; an admitted gang takes the lowest free
indices. Eligible node sets are computed once per kind of request (pool, device type, memory
floor) and reused, since a queue of 1,000 gangs has few kinds.
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from runwright.sched import reasons
from runwright.sched.inventory import Inventory
from runwright.sched.placement import Eligible, Shape, diagnose, eligible_nodes, place
from runwright.sched.quota import QuotaLedger
from runwright.sched.reasons import PendingReason
from runwright.sched.requests import AdmissionInput, GangRequest, NodeShare, RunningGang

MAX_PREEMPTION_TRIES = 64
"""Placements tried while adding victims one by one: bounds a pass where a large high-priority
gang meets many small preemptible ones."""

Kind = tuple[str, str | None, int | None]
"""What selects a request's nodes: (pool, device type, memory floor)."""


def _priority_order(request: GangRequest) -> tuple[int, float, str]:
    return request.order_key


@dataclass(frozen=True)
class PassOptions:
    """What a policy switches on (gang-bestfit-v1: everything; the FIFO baseline: nothing)."""

    order: Callable[[GangRequest], tuple] = _priority_order
    placer: Literal["best-fit", "first-fit"] = "best-fit"
    borrow: bool = True
    preempt: bool = True
    reserve: bool = True


@dataclass
class Outcome:
    placement: list[tuple[str, list[int]]] = field(default_factory=list)
    borrowed: bool = False
    preempt: tuple[str, ...] = ()
    reason: PendingReason | None = None


@dataclass
class PassReservation:
    run_id: str
    priority: int
    start_seconds: float
    placement: list[tuple[str, int]]
    spare: dict[str, int]
    """Reserved node -> devices a gang still running at the start may take there."""


class _Capped(Mapping[str, int]):
    """Free counts limited by the reservations a backfill must not delay."""

    def __init__(self, free: dict[str, int], limits: list[dict[str, int]]) -> None:
        self.free, self.limits = free, limits

    def get(self, key: str, default: int = 0) -> int:  # type: ignore[override]
        value = self.free.get(key, default)
        for spare in self.limits:
            if key in spare:
                value = min(value, spare[key])
        return max(value, 0)

    def __getitem__(self, key: str) -> int:
        return self.get(key)

    def __iter__(self):
        return iter(self.free)

    def __len__(self) -> int:
        return len(self.free)


class PassState:
    def __init__(self, inventory: Inventory, state: AdmissionInput, options: PassOptions) -> None:
        self.inventory = inventory
        self.options = options
        self.now = state.now_seconds
        self.kind_word = inventory.fast_interconnect
        self.nodes = {node.name: node for node in inventory.nodes}
        self.offered = [node for node in inventory.nodes if node.offered]
        self.free: dict[str, list[int]] = {
            n.name: list(range(n.device_count)) for n in self.offered
        }
        self.running: dict[str, RunningGang] = {}
        self.admitted_here: set[str] = set()
        for gang in state.running:
            self._hold(gang)
        self.count = {name: len(indices) for name, indices in self.free.items()}
        self.ledger = QuotaLedger(state.quotas, state.running)
        self.reservations: list[PassReservation] = []
        self._reserved_kinds: dict[Kind, PassReservation] = {}
        self._eligible: dict[tuple[Kind, bool], Eligible] = {}
        self._static: dict[tuple, PendingReason | None] = {}

    # -- state ------------------------------------------------------------------------------

    def _hold(self, gang: RunningGang) -> None:
        self.running[gang.run_id] = gang
        for share in gang.placement:
            free = self.free.get(share.node)
            if free is not None:  # a gang on a node no longer offered holds nothing offered
                taken = set(share.devices)
                free[:] = [i for i in free if i not in taken]

    def _release(self, gang: RunningGang) -> None:
        del self.running[gang.run_id]
        self.ledger.charge(gang.pool, gang.project, -gang.devices, gang.borrowed)
        for share in gang.placement:
            if share.node in self.free:
                self.free[share.node] = sorted({*self.free[share.node], *share.devices})
                self.count[share.node] = len(self.free[share.node])

    def _take(
        self, request: GangRequest, counts: list[tuple[str, int]], borrowed: bool
    ) -> list[tuple[str, list[int]]]:
        placement = []
        for node, k in counts:
            indices, self.free[node] = self.free[node][:k], self.free[node][k:]
            self.count[node] = len(self.free[node])
            placement.append((node, indices))
        gang = RunningGang(
            run_id=request.run_id,
            project=request.project,
            pool=request.pool,
            priority=request.priority,
            preemptible=request.preemptible,
            borrowed=borrowed,
            placement=tuple(NodeShare(node=n, devices=tuple(i)) for n, i in placement),
            expected_end_seconds=self.now + request.expected_duration_seconds,
        )
        self.running[gang.run_id] = gang
        self.admitted_here.add(gang.run_id)
        self.ledger.charge(request.pool, request.project, request.devices, borrowed)
        ends = gang.expected_end_seconds
        for reservation in self.reservations:
            if not ends <= reservation.start_seconds:
                for node, k in counts:
                    if node in reservation.spare:
                        reservation.spare[node] -= k
        return placement

    # -- lookups ----------------------------------------------------------------------------

    def eligible(self, request: GangRequest, offered_only: bool = True) -> Eligible:
        kind = self.kind_of(request)
        key = (kind, offered_only)
        if key not in self._eligible:
            nodes = self.offered if offered_only else list(self.inventory.nodes)
            self._eligible[key] = eligible_nodes(nodes, *kind)
        return self._eligible[key]

    @staticmethod
    def kind_of(request: GangRequest) -> Kind:
        wanted = request.device_type.casefold() if request.device_type else None
        return (request.pool, wanted, request.min_device_memory_bytes)

    @staticmethod
    def shape_of(request: GangRequest) -> Shape:
        return Shape(
            request.devices, request.devices_per_node, request.tp, request.same_network_domain
        )

    def _place(self, shape: Shape, eligible: Eligible, usable: Mapping[str, int]):
        if self.options.placer == "first-fit":
            from runwright.sched.baseline import place_first_fit

            return place_first_fit(shape, eligible, usable)
        return place(shape, eligible, usable)

    # -- the decision -----------------------------------------------------------------------

    def never_fits(self, request: GangRequest) -> PendingReason | None:
        """Why no state of the inventory can run `request`, or None (cached per kind+shape)."""
        rws = request.required_world_size
        if rws is not None and rws != request.devices:
            return reasons.restore_world_size(request.checkpoint_step, rws, request.devices)
        key = (self.kind_of(request), self.shape_of(request))
        if key not in self._static:
            self._static[key] = self._never_fits(request)
        return self._static[key]

    def _never_fits(self, request: GangRequest) -> PendingReason | None:
        pool, wanted = request.pool, request.device_type
        in_pool = [n for n in self.inventory.nodes if pool in n.pools and n.device_count]
        if not in_pool:
            return reasons.never_fits(f"pool {pool} has no nodes with devices", pool=pool)
        typed = [n for n in in_pool if eligible_nodes([n], pool, wanted, None).nodes]
        if not typed:
            have = sorted({n.device_type for n in in_pool})
            return reasons.never_fits(
                f"pool {pool} has no devices of type {wanted} (it has {', '.join(have)})",
                pool=pool,
                device_type=wanted,
            )
        floor = request.min_device_memory_bytes
        if floor and not any(n.device_memory_bytes >= floor for n in typed):
            largest = max(n.device_memory_bytes for n in typed)
            return reasons.never_fits(
                f"needs at least {floor / 2**30:.0f} GiB per device (memory ledger); the "
                f"largest devices{f' of type {wanted}' if wanted else ''} in pool {pool} have "
                f"{largest / 2**30:.0f} GiB",
                min_device_memory_bytes=floor,
                largest_device_memory_bytes=largest,
            )
        every = self.eligible(request, offered_only=False)
        whole = {name: self.nodes[name].device_count for name in every.nodes}
        shape = self.shape_of(request)
        if self._place(shape, every, whole):
            return None
        why = diagnose(shape, every, whole, wanted, self.kind_word, pool)
        return why.model_copy(
            update={
                "never_fits": True,
                "words": f"never fits, even on an empty and healthy inventory: {why.words}",
            }
        )

    def decide(self, request: GangRequest) -> Outcome:
        static = self.never_fits(request)
        if static is not None:
            return Outcome(reason=static)
        verdict = self.ledger.verdict(request)
        if verdict.borrowed and not self.options.borrow:
            verdict = self.ledger.verdict(request.model_copy(update={"preemptible": False}))
        if not verdict.allowed:
            return Outcome(reason=verdict.reason)
        eligible = self.eligible(request)
        shape = self.shape_of(request)
        ends = self.now + request.expected_duration_seconds
        limits = [
            r.spare
            for r in self.reservations
            if not (math.isfinite(r.start_seconds) and ends <= r.start_seconds)
        ]
        usable: Mapping[str, int] = _Capped(self.count, limits) if limits else self.count
        counts = self._place(shape, eligible, usable)
        if counts:
            return Outcome(self._take(request, counts, verdict.borrowed), verdict.borrowed)
        kind = self.kind_of(request)
        held = self._reserved_kinds.get(kind)
        if held is None and not verdict.borrowed and self.options.preempt:
            preempted = self._preempt(request, shape, eligible, limits)
            if preempted is not None:
                return preempted
        if limits and self._place(shape, eligible, self.count):
            blocker = next(r for r in self.reservations if r.spare in limits)
            return Outcome(
                reason=reasons.reserved(
                    blocker.run_id, blocker.priority, blocker.start_seconds - self.now
                )
            )
        if held is None and self.options.reserve:
            self._reserve(request, shape, eligible, kind)
        return Outcome(reason=self._why(request, shape, eligible))

    def _why(self, request: GangRequest, shape: Shape, eligible: Eligible) -> PendingReason:
        every = self.eligible(request, offered_only=False)
        out = sum(self.nodes[n].device_count for n in every.nodes if not self.nodes[n].offered)
        why = diagnose(
            shape, eligible, self.count, request.device_type, self.kind_word, request.pool, out
        )
        floor = request.min_device_memory_bytes
        if floor and why.code == "capacity":
            largest = max(self.nodes[n].device_memory_bytes for n in every.nodes)
            return reasons.device_memory(
                floor, request.devices, request.device_type, why.fields["free"] or 0, largest
            )
        return why

    # -- preemption and reservation ----------------------------------------------------------

    def _preempt(
        self, request: GangRequest, shape: Shape, eligible: Eligible, limits: list[dict[str, int]]
    ) -> Outcome | None:
        """Admit `request` on the devices of the fewest safe victims, or None. Victims' devices
        are capped by the reservations it must not delay (`limits`), like free ones."""
        members = set(eligible.nodes)
        candidates = [
            gang
            for gang in self.running.values()
            if gang.preemptible
            and gang.run_id not in self.admitted_here
            and (
                gang.priority < request.priority
                or (gang.borrowed and gang.project != request.project and gang.pool == request.pool)
            )
            and any(share.node in members for share in gang.placement)
        ]
        if not candidates:
            return None
        candidates.sort(key=lambda g: (g.priority, not g.borrowed, -g.expected_end_seconds,
                                       g.run_id))  # fmt: skip
        usable = {n: self.count.get(n, 0) for n in eligible.nodes}
        total = sum(usable.values())
        reach = total + sum(
            len(s.devices) for g in candidates for s in g.placement if s.node in usable
        )
        if reach < shape.devices:
            return None
        victims: list[RunningGang] = []
        tries = 0
        counts: list[tuple[str, int]] = []
        for gang in candidates:
            victims.append(gang)
            for share in gang.placement:
                if share.node in usable:
                    usable[share.node] += len(share.devices)
                    total += len(share.devices)
            if total < shape.devices:
                continue
            tries += 1
            counts = self._place(shape, eligible, _Capped(usable, limits))
            if counts or tries >= MAX_PREEMPTION_TRIES:
                break
        if not counts:
            return None
        for gang in reversed(list(victims)):  # drop victims the placement does not need
            trial = dict(usable)
            for share in gang.placement:
                if share.node in trial:
                    trial[share.node] -= len(share.devices)
            fewer = self._place(shape, eligible, _Capped(trial, limits))
            if fewer:
                victims.remove(gang)
                usable, counts = trial, fewer
        for gang in victims:
            self._release(gang)
        placement = self._take(request, counts, borrowed=False)
        return Outcome(placement, preempt=tuple(sorted(g.run_id for g in victims)))

    def _reserve(self, request: GangRequest, shape: Shape, eligible: Eligible, kind: Kind) -> None:
        """Reserve for `request` the devices that free up first (by running gangs' expected
        ends, binary-searched: more released devices never make a placement impossible)."""
        members = set(eligible.nodes)
        ends = sorted(
            (g for g in self.running.values()
             if any(s.node in members for s in g.placement)),
            key=lambda g: (g.expected_end_seconds, g.run_id),
        )  # fmt: skip

        def future(k: int) -> dict[str, int]:
            usable = {n: self.count.get(n, 0) for n in eligible.nodes}
            for gang in ends[:k]:
                for share in gang.placement:
                    if share.node in usable:
                        usable[share.node] += len(share.devices)
            return usable

        if not self._place(shape, eligible, future(len(ends))):
            return  # not even every running gang's end frees a place (drained nodes): none
        low, high = 0, len(ends)  # placeable at high, not at 0 (decide() tried)
        while high - low > 1:
            middle = (low + high) // 2
            if self._place(shape, eligible, future(middle)):
                high = middle
            else:
                low = middle
        usable = future(high)
        counts = self._place(shape, eligible, usable)
        spare = {node: usable[node] - k for node, k in counts}
        reservation = PassReservation(
            request.run_id, request.priority, ends[high - 1].expected_end_seconds, counts, spare
        )
        self.reservations.append(reservation)
        self._reserved_kinds[kind] = reservation
