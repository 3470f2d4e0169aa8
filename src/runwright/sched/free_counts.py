"""Arithmetic on free device counts per node, shared by a pass's placements
(sched/pass_state.py) and its searches over running gangs (sched/preemption.py)."""

import bisect
from collections.abc import Callable

from runwright.sched.placement import Shape


def capped(free: dict[str, int], limits: list[dict[str, int]]) -> dict[str, int]:
    """Free counts limited by the reservations a backfill must not delay (each `limits` entry:
    reserved node -> devices a gang still running at that reservation's start may take)."""
    if not limits:
        return free
    usable = dict(free)
    for spare in limits:
        for node, most in spare.items():
            if node in usable:
                usable[node] = max(min(usable[node], most), 0)
    return usable


def amount_of(shape: Shape) -> Callable[[int], int]:
    """What a one-node domain with `free` devices offers `shape` (placement.py's amounts)."""
    unit, per = shape.unit, shape.devices_per_node

    def amount(free: int) -> int:
        usable = (per if free >= per else 0) if per else free
        return usable - usable % unit

    return amount


def move_amount(amounts: list[tuple[int, str]], domain: str, old: int, new: int) -> None:
    """Keep the sorted `amounts` right when `domain`'s amount goes from `old` to `new`."""
    if old == new:
        return
    if old > 0:
        del amounts[bisect.bisect_left(amounts, (old, domain))]
    if new > 0:
        bisect.insort(amounts, (new, domain))
