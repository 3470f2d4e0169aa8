"""A pass's searches over the gangs still running (sched/pass_state.py): the fewest victims whose
devices admit a request now (`preempt`), and the earliest point at which running gangs' ends free
a place for one that waits (`reserve`). Both binary-search: more devices never make a placement
impossible."""

from typing import TYPE_CHECKING

from runwright.sched.free_counts import capped
from runwright.sched.pass_records import Kind, Outcome, PassReservation
from runwright.sched.placement import Eligible, Shape
from runwright.sched.requests import GangRequest, RunningGang

if TYPE_CHECKING:
    from runwright.sched.pass_state import PassState

MAX_PRUNED_VICTIMS = 8
"""Victims of one preemption checked one by one for whether the placement needs them: a
placement each, so a large gang over many small victims keeps its pass short."""


def preempt(
    state: "PassState",
    request: GangRequest,
    shape: Shape,
    eligible: Eligible,
    limits: list[dict[str, int]],
) -> Outcome | None:
    """Admit `request` on the devices of the fewest safe victims, or None. Victims' devices
    are capped by the reservations it must not delay (`limits`), like free ones."""
    members = set(eligible.nodes)
    candidates = [
        gang
        for gang in state.running.values()
        if gang.preemptible
        and gang.run_id not in state.admitted_here
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
    usable = {n: state.count.get(n, 0) for n in eligible.nodes}
    total = sum(usable.values())
    reach = total + sum(len(s.devices) for g in candidates for s in g.placement if s.node in usable)
    if reach < shape.devices:
        return None

    kind = state.kind_of(request)

    def extra_of(gangs: list[RunningGang]) -> dict[str, int]:
        extra: dict[str, int] = {}
        for gang in gangs:
            for share in gang.placement:
                if share.node in usable:
                    extra[share.node] = extra.get(share.node, 0) + len(share.devices)
        return extra

    def grown_by(gangs: list[RunningGang]) -> dict[str, int]:
        grown = dict(usable)
        for node, more in extra_of(gangs).items():
            grown[node] += more
        return capped(grown, limits)

    limited = {node for spare in limits for node in spare}

    def fits(k: int) -> bool:
        extra = extra_of(candidates[:k])
        if not state.shape_fits(kind, shape, limits, extra):
            return False
        return bool(state.place_on(shape, eligible, grown_by(candidates[:k]), limited | set(extra)))

    # The shortest prefix of the candidates whose devices (with the free ones) hold the
    # gang: first the prefix that reaches its size, then doubling, then a binary search
    # back (more devices never make a placement impossible): O(log n) placements.
    reached, k = total, 0
    while reached < shape.devices:
        reached += sum(len(s.devices) for s in candidates[k].placement if s.node in usable)
        k += 1
    high = max(k, 1)  # k = 0: enough devices are free, but not in a shape that fits
    low = high - 1
    while not fits(high):
        if high == len(candidates):
            return None
        low, high = high, min(2 * high, len(candidates))
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle
    victims = list(candidates[:high])
    for gang in reversed(victims[-MAX_PRUNED_VICTIMS:]):  # drop victims not needed
        fewer = [v for v in victims if v is not gang]
        if state.shape_fits(kind, shape, limits, extra_of(fewer)) and state.place_on(
            shape, eligible, grown_by(fewer), limited | set(extra_of(fewer))
        ):
            victims = fewer
    counts = state.place_on(shape, eligible, grown_by(victims), limited | set(extra_of(victims)))
    for gang in victims:
        state.release(gang)
    placement = state.take(request, counts, borrowed=False)
    return Outcome(placement, preempt=tuple(sorted(g.run_id for g in victims)))


def reserve(
    state: "PassState", request: GangRequest, shape: Shape, eligible: Eligible, kind: Kind
) -> None:
    """Reserve for `request` the devices that free up first (by running gangs' expected
    ends, binary-searched: more released devices never make a placement impossible)."""
    members = set(eligible.nodes)
    ends = sorted(
        (g for g in state.running.values()
         if any(s.node in members for s in g.placement)),
        key=lambda g: (g.expected_end_seconds, g.run_id),
    )  # fmt: skip

    def future(k: int) -> dict[str, int]:
        usable = {n: state.count.get(n, 0) for n in eligible.nodes}
        for gang in ends[:k]:
            for share in gang.placement:
                if share.node in usable:
                    usable[share.node] += len(share.devices)
        return usable

    if not state.place_on(shape, eligible, future(len(ends))):
        return  # not even every running gang's end frees a place (drained nodes): none
    low, high = 0, len(ends)  # placeable at high, not at 0 (decide() tried)
    while high - low > 1:
        middle = (low + high) // 2
        if state.place_on(shape, eligible, future(middle)):
            high = middle
        else:
            low = middle
    usable = future(high)
    counts = state.place_on(shape, eligible, usable)
    spare = {node: usable[node] - k for node, k in counts}
    reservation = PassReservation(
        request.run_id, request.priority, ends[high - 1].expected_end_seconds, counts, spare
    )
    state.reservations.append(reservation)
    state.reserved_kinds[kind] = reservation
