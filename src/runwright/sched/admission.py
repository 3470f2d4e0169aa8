"""One admission pass: (inventory, pending queue, running gangs, quotas) -> a decision per request.

A pure function (no clock, no I/O, no randomness): the same input gives the same decisions, so
the controller can call it every pass, tests can check its invariants, and benchmarks/scheduler.py
can simulate a week with it. Policies are registered under versioned names; a run records the
one that admitted it.

`gang-bestfit-v1`, in queue order (priority class, higher first; FIFO within a class):
  1. refuse what can never run: a checkpoint that does not reshard at another world size, or a
     gang no state of the inventory (all nodes healthy and empty) could hold (`never_fits`);
  2. charge the project's quota, or borrow idle quota as a reclaimable gang (quota.py);
  3. place the gang whole, best fit, with its topology constraints (placement.py);
  4. if it does not fit and it is on its own quota: look for victims - borrowed gangs of other
     projects (reclaim) and preemptible gangs of lower priority - and admit it with the victims
     named (the controller stops them gracefully first); never a non-preemptible gang;
  5. else the first such blocked request of its kind gets a reservation: when running gangs'
     expected ends free enough devices, and which. Later requests are backfilled only if they
     cannot delay it (EASY backfill, Lifka 1995; Slurm's sched/backfill): they end before the
     reservation starts, or use only devices the reservation does not need;
  6. anything not admitted gets a reason (reasons.py).
"""

from collections.abc import Callable
from typing import Literal, Protocol

from runwright.records import Record
from runwright.sched.inventory import Inventory
from runwright.sched.pass_records import PassOptions
from runwright.sched.pass_state import PassState
from runwright.sched.reasons import PendingReason
from runwright.sched.requests import AdmissionInput, GangRequest, NodeShare


class Decision(Record):
    """What one pass decided for one pending request."""

    run_id: str
    """The request's run."""
    position: int
    """1-based position in the pass's queue order."""
    outcome: Literal["admit", "pending"]
    """`admit`: start it on `placement` (after `preempt` stopped); `pending`: see `reason`."""
    placement: tuple[NodeShare, ...] = ()
    """The devices it gets, node by node; consecutive runs of `tp` ranks in this order lie in
    one fast domain."""
    borrowed: bool = False
    """Admitted on quota borrowed from other projects: reclaimable by preemption."""
    preempt: tuple[str, ...] = ()
    """Runs to stop gracefully (checkpoint, requeue) before this one starts on their devices."""
    reason: PendingReason | None = None
    """Why it is pending (None when admitted)."""


class Reservation(Record):
    """Devices held back for the first blocked request of a kind, from when they free up."""

    run_id: str
    """The run they are held for."""
    start_seconds: float
    """When the running gangs' expected ends free them (inf: a gang of unknown end holds some)."""
    placement: dict[str, int]
    """Node -> devices it would take there then (indices are chosen when it is admitted)."""


class AdmissionResult(Record):
    """One pass's decisions, in queue order."""

    policy: str
    """The registry name of the policy that decided."""
    decisions: tuple[Decision, ...]
    """One per pending request, in queue order."""
    reservations: tuple[Reservation, ...] = ()
    """The reservations backfilling respected."""

    def of(self, run_id: str) -> Decision:
        return next(d for d in self.decisions if d.run_id == run_id)


class AdmissionPolicy(Protocol):
    def __call__(self, inventory: Inventory, state: AdmissionInput) -> AdmissionResult: ...


def _run_pass(
    name: str,
    options: PassOptions,
    inventory: Inventory,
    state: AdmissionInput,
) -> AdmissionResult:
    work = PassState(inventory, state, options)
    decisions = []
    for position, request in enumerate(sorted(state.pending, key=options.order), start=1):
        outcome = work.decide(request)
        decisions.append(
            Decision(
                run_id=request.run_id,
                position=position,
                outcome="pending" if outcome.reason else "admit",
                placement=tuple(
                    NodeShare(node=node, devices=tuple(indices))
                    for node, indices in outcome.placement
                ),
                borrowed=outcome.borrowed,
                preempt=outcome.preempt,
                reason=outcome.reason,
            )
        )
    reservations = tuple(
        Reservation(
            run_id=r.run_id,
            start_seconds=r.start_seconds,
            placement=dict(r.placement),
        )
        for r in work.reservations
    )
    return AdmissionResult(policy=name, decisions=tuple(decisions), reservations=reservations)


def admit_gang_bestfit(inventory: Inventory, state: AdmissionInput) -> AdmissionResult:
    """`gang-bestfit-v1` (the module's docstring)."""
    return _run_pass("gang-bestfit-v1", PassOptions(), inventory, state)


def _fifo_order(request: GangRequest) -> tuple[float, str]:
    return (request.submitted_at_seconds, request.run_id)


def admit_fifo_firstfit(inventory: Inventory, state: AdmissionInput) -> AdmissionResult:
    """`fifo-firstfit-v1`, the baseline: arrival order (priority ignored), first-fit placement
    (domains and nodes by name), quotas without borrowing, no reservation, no preemption. Gangs
    stay whole and topology constraints hold, so it differs only in policy."""
    options = PassOptions(
        order=_fifo_order, placer="first-fit", borrow=False, preempt=False, reserve=False
    )
    return _run_pass("fifo-firstfit-v1", options, inventory, state)


POLICIES: dict[str, Callable[[Inventory, AdmissionInput], AdmissionResult]] = {
    "gang-bestfit-v1": admit_gang_bestfit,
    "fifo-firstfit-v1": admit_fifo_firstfit,
}
DEFAULT_POLICY = "gang-bestfit-v1"


def registered(policy: str) -> Callable[[Inventory, AdmissionInput], AdmissionResult]:
    """The policy registered under `policy`; ValueError naming the registered ones."""
    try:
        return POLICIES[policy]
    except KeyError:
        raise ValueError(
            f"unknown admission policy {policy!r}; registered: {', '.join(sorted(POLICIES))}"
        ) from None


def admit(
    inventory: Inventory, state: AdmissionInput, policy: str = DEFAULT_POLICY
) -> AdmissionResult:
    """One admission pass under the registered `policy`."""
    return registered(policy)(inventory, state)


def never_fits(inventory: Inventory, request: GangRequest) -> PendingReason | None:
    """Why no state of `inventory` can ever run `request` (refuse it at submit), or None."""
    return PassState(inventory, AdmissionInput(), PassOptions()).never_fits(request)
