"""The records of one admission pass (sched/pass_state.py): what a policy switches on, what a
decision comes to, and a reservation for a gang that waits."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from runwright.sched.reasons import PendingReason
from runwright.sched.requests import GangRequest

Kind = tuple[str, str | None, int | None, tuple[tuple[str, str], ...]]
"""What selects a request's nodes: (pool, device type, memory floor)."""


def priority_order(request: GangRequest) -> tuple[int, float, str]:
    return request.order_key


@dataclass(frozen=True)
class PassOptions:
    """What a policy switches on (gang-bestfit-v1: everything; the FIFO baseline: nothing)."""

    order: Callable[[GangRequest], tuple] = priority_order
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
