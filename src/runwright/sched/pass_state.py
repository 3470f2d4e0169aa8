"""The working state of one admission pass: free devices per node, the quota ledger, the gangs
still running, and the reservations made so far. admission.py walks the queue; this module
decides one request at a time against that state and updates it; its searches over the running
gangs (preemption victims, reservations) are in preemption.py, which reads and updates it through
`shape_fits`, `place_on`, `take` and `release`.

Free devices are kept as index lists per offered node; an admitted gang takes the lowest free
indices. Eligible node sets are computed once per kind of request (pool, device type, memory
floor) and reused, since a queue of 1,000 gangs has few kinds.
"""

import math
from collections import Counter
from collections.abc import Iterable, Mapping

from runwright.sched import reasons
from runwright.sched.free_counts import amount_of, capped, move_amount
from runwright.sched.inventory import Inventory
from runwright.sched.inventory_index import index_of
from runwright.sched.pass_records import Kind, Outcome, PassOptions, PassReservation
from runwright.sched.placement import (
    Eligible,
    Shape,
    device_type_matches,
    diagnose,
    domain_amounts,
    eligible_nodes,
    labels_match,
    place,
)
from runwright.sched.preemption import preempt, reserve
from runwright.sched.quota import QuotaLedger
from runwright.sched.reasons import PendingReason
from runwright.sched.requests import AdmissionInput, GangRequest, NodeShare, RunningGang


class PassState:
    def __init__(self, inventory: Inventory, state: AdmissionInput, options: PassOptions) -> None:
        self.inventory = inventory
        self.options = options
        self.now = state.now_seconds
        self.kind_word = inventory.fast_interconnect
        self.index = index_of(inventory)
        self.nodes = self.index.nodes
        self.offered = self.index.offered
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
        self.reserved_kinds: dict[Kind, PassReservation] = {}
        self._eligible = self.index.eligible
        self._members: dict[Kind, set[str]] = {}
        """Kind -> its offered nodes."""
        self._kind_free: dict[Kind, int] = {}
        """Kind -> free devices on its offered nodes: a gang larger than that is not placed
        (checked before any placement, so a long queue on a full pool costs little)."""
        self._out_of_service = self.index.out_of_service
        self._histogram: dict[Kind, Counter[int]] = {}
        """Kind -> how many of its offered nodes have each free count, for kinds whose fast
        domains are single nodes (the usual HGX machine): whether a gang's shape can be placed
        is then a sum over a few counts instead of a walk over every node (`shape_fits`)."""
        self._amounts: dict[tuple[Kind, int, int | None], list[tuple[int, str]]] = {}
        """(kind, unit, devices_per_node) -> its one-node domains' amounts, sorted, kept as
        counts change: a placement then starts from them instead of walking every node."""
        self._kind_by_eligible: dict[int, Kind] = {}
        self._static = self.index.static

    # -- state ------------------------------------------------------------------------------

    def _set_count(self, node: str) -> None:
        delta = len(self.free[node]) - self.count[node]
        self.count[node] += delta
        for kind, members in self._members.items():
            if node in members:
                self._kind_free[kind] += delta
                histogram = self._histogram.get(kind)
                if histogram is not None:
                    histogram[self.count[node] - delta] -= 1
                    histogram[self.count[node]] += 1
        for (kind, unit, per), amounts in self._amounts.items():
            if node in self._members[kind]:
                amount = amount_of(Shape(unit, per, unit))
                move_amount(amounts, self.nodes[node].fast_domain, amount(self.count[node] - delta),
                      amount(self.count[node]))  # fmt: skip

    def _hold(self, gang: RunningGang) -> None:
        self.running[gang.run_id] = gang
        for share in gang.placement:
            free = self.free.get(share.node)
            if free is not None:  # a gang on a node no longer offered holds nothing offered
                taken = set(share.devices)
                free[:] = [i for i in free if i not in taken]

    def release(self, gang: RunningGang) -> None:
        del self.running[gang.run_id]
        self.ledger.charge(gang.pool, gang.project, -gang.devices, gang.borrowed)
        for share in gang.placement:
            if share.node in self.free:
                self.free[share.node] = sorted({*self.free[share.node], *share.devices})
                self._set_count(share.node)

    def take(
        self, request: GangRequest, counts: list[tuple[str, int]], borrowed: bool
    ) -> list[tuple[str, list[int]]]:
        placement = []
        for node, k in counts:
            indices, self.free[node] = self.free[node][:k], self.free[node][k:]
            self._set_count(node)
            placement.append((node, indices))
        gang = RunningGang.admitted(
            request,
            tuple(NodeShare(node=n, devices=tuple(i)) for n, i in placement),
            borrowed,
            self.now + request.expected_duration_seconds,
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
        found = self._eligible[key]
        if offered_only:
            self._kind_by_eligible[id(found)] = kind
        if offered_only and kind not in self._members:
            self._members[kind] = self.index.members(kind, found)
            self._kind_free[kind] = sum(self.count[n] for n in found.nodes)
            if len(found.fast) == len(found.nodes):
                self._histogram[kind] = Counter(self.count[n] for n in found.nodes)
        return found

    @staticmethod
    def kind_of(request: GangRequest) -> Kind:
        wanted = request.device_type.casefold() if request.device_type else None
        return (request.pool, wanted, request.min_device_memory_bytes, request.node_labels)

    @staticmethod
    def shape_of(request: GangRequest) -> Shape:
        return Shape(
            request.devices, request.devices_per_node, request.tp, request.same_network_domain
        )

    def shape_fits(
        self,
        kind: Kind,
        shape: Shape,
        limits: list[dict[str, int]],
        extra: Mapping[str, int] | None = None,
    ) -> bool:
        """False when the free devices of `kind` (plus `extra` per node, capped by `limits`)
        certainly cannot hold `shape`; True when they might (a placement then decides). Exact
        for one-node domains without a network-domain constraint: such a placement exists iff
        the domains' usable amounts add up to the gang (placement.py), and those depend only on
        the nodes' free counts, which a histogram holds."""
        histogram = self._histogram.get(kind)
        if histogram is None or shape.same_network_domain:
            return True
        amount = amount_of(shape)
        total = sum(amount(free) * nodes for free, nodes in histogram.items() if nodes)
        members = self._members[kind]
        touched = {n for spare in limits for n in spare if n in members}
        touched.update(n for n in extra or () if n in members)
        for node in touched:
            now = self.count[node]
            usable = now + (extra or {}).get(node, 0)
            for spare in limits:
                if node in spare:
                    usable = max(min(usable, spare[node]), 0)
            total += amount(usable) - amount(now)
        return total >= shape.devices

    def place_on(
        self,
        shape: Shape,
        eligible: Eligible,
        usable: Mapping[str, int],
        touched: Iterable[str] | None = None,
    ) -> list[tuple[str, int]]:
        """A placement on `usable`; `touched`: the only nodes where it differs from the free
        counts, when the caller knows (else every eligible node is compared)."""
        if self.options.placer == "first-fit":
            from runwright.sched.baseline import place_first_fit

            return place_first_fit(shape, eligible, usable)
        kind = self._kind_by_eligible.get(id(eligible))
        if kind is None or kind not in self._histogram or shape.same_network_domain:
            return place(shape, eligible, usable)
        key = (kind, shape.unit, shape.devices_per_node)
        if key not in self._amounts:
            self._amounts[key] = domain_amounts(shape, eligible.fast, self.count)
        domains = self._amounts[key]
        if usable is not self.count:
            domains = list(domains)
            amount = amount_of(shape)
            members = self._members[kind]
            for node in eligible.nodes if touched is None else set(touched) & members:
                if usable.get(node, 0) != self.count[node]:
                    move_amount(domains, self.nodes[node].fast_domain, amount(self.count[node]),
                          amount(usable.get(node, 0)))  # fmt: skip
        return place(shape, eligible, usable, domains=list(domains))

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
        typed = [n for n in in_pool if device_type_matches(n.device_type, wanted)]
        if not typed:
            have = sorted({n.device_type for n in in_pool})
            return reasons.never_fits(
                f"pool {pool} has no devices of type {wanted} (it has {', '.join(have)})",
                pool=pool,
                device_type=wanted,
            )
        if request.node_labels and not any(labels_match(n, request.node_labels) for n in typed):
            wanted_labels = ", ".join(f"{k}={v}" for k, v in request.node_labels)
            return reasons.never_fits(
                f"no node{f' of type {wanted}' if wanted else ''} in pool {pool} carries the "
                f"labels {wanted_labels} (resources.node_labels); drop or change them, or label "
                "the nodes in the inventory",
                pool=pool,
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
        if len(every.fast) == len(every.nodes) and not shape.same_network_domain:
            amount = amount_of(shape)  # one-node domains: the sum decides (shape_fits)
            if sum(amount(count) for count in whole.values()) >= shape.devices:
                return None
        elif self.place_on(shape, every, whole):
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
        verdict = self.ledger.verdict(request, may_borrow=self.options.borrow)
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
        usable = capped(self.count, limits)
        kind = self.kind_of(request)
        enough = self._kind_free[kind] >= request.devices
        fits = enough and self.shape_fits(kind, shape, limits)
        limited = {node for spare in limits for node in spare}
        counts = self.place_on(shape, eligible, usable, limited) if fits else []
        if counts:
            return Outcome(self.take(request, counts, verdict.borrowed), verdict.borrowed)
        held = self.reserved_kinds.get(kind)
        if held is None and not verdict.borrowed and self.options.preempt:
            preempted = preempt(self, request, shape, eligible, limits)
            if preempted is not None:
                return preempted
        if (
            limits
            and enough
            and self.shape_fits(kind, shape, [])
            and self.place_on(shape, eligible, self.count, ())
        ):  # it would fit but for a reservation: name the first one in its way
            blocker = next(r for r in self.reservations if any(r.spare is s for s in limits))
            return Outcome(
                reason=reasons.reserved(
                    blocker.run_id, blocker.priority, blocker.start_seconds - self.now
                )
            )
        if held is None and self.options.reserve:
            reserve(self, request, shape, eligible, kind)
        return Outcome(reason=self._why(request, shape, eligible))

    def _why(self, request: GangRequest, shape: Shape, eligible: Eligible) -> PendingReason:
        every = self.eligible(request, offered_only=False)
        kind = self.kind_of(request)
        if kind not in self._out_of_service:
            self._out_of_service[kind] = sum(
                self.nodes[n].device_count for n in every.nodes if not self.nodes[n].offered
            )
        out = self._out_of_service[kind]
        free = self._kind_free[kind]
        if free < request.devices:  # the common case on a full pool, without a walk
            why = reasons.capacity(request.devices, request.device_type, request.pool, free, out)
        else:
            why = diagnose(
                shape, eligible, self.count, request.device_type, self.kind_word, request.pool, out
            )
        if why.code == "capacity" and out:
            down = [self.nodes[n] for n in sorted(every.nodes) if not self.nodes[n].offered]
            why = reasons.out_of_service_named(why, [(n.name, n.health) for n in down])
        floor = request.min_device_memory_bytes
        if floor and why.code == "capacity":
            largest = max(self.nodes[n].device_memory_bytes for n in every.nodes)
            return reasons.device_memory(
                floor, request.devices, request.device_type, why.fields["free"] or 0, largest
            )
        return why
