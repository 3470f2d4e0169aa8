"""The admission step: a QUEUED run moves to ALLOCATING only once the scheduler admits its gang.

With an inventory (`Controller(inventory=...)`, `runwright controller --inventory FILE`), each
pass over a QUEUED run runs one admission pass (sched.admit, a pure function) over the store's
queue: every QUEUED run is a pending request, and every run from ALLOCATING to RECOVERING holds
the devices its newest RUN_ADMITTED event names. For the run at hand:

- admitted: RUN_ADMITTED (policy, position, placement node by node, borrowed), then ALLOCATING,
  where its executor is asked for the gang as before; a CUDA gang the local executor starts is
  held to the placement's device indices (CUDA_VISIBLE_DEVICES, `pinned_devices`);
- pending: the reason in words becomes the run's `state_detail` (what `runwright status` and
  `runwright queue` print) and, when its code or words change, an ADMISSION_PENDING event;
- a request no state of the inventory can hold fails the run FAILED_PERMANENT at once (submit
  refuses it first, `refusal`).

Preemption takes the graceful path: a request the policy admits only by stopping victims
(preemptible runs of a lower priority class, or borrowed quota reclaimed) waits, with a reason
that names them, while each victim's current generation gets a stop request with the reason
`preemption` (STOP_REQUESTED, `preempted_by`). Its ranks save at the next step boundary and
exit; the exit is classified PREEMPTION and the run requeues (policy.py), so it is admitted again
behind the run that preempted it and resumes from that save. A victim in CHECKPOINTING is never
chosen (no preemption mid-save). Whichever controller supervises a victim sees the stop request
and kills the group after its stop grace if it never reaches a step boundary.

The inventory is a fixed one (an inventory file) or a cluster read live
(control/cluster_inventory.py: a Slurm cluster's nodes with its partitions as pools); on a live
cluster, what its scheduler allocated beyond runwright's own gangs holds devices too
(`_other_jobs`). The admitted placement's nodes go to the executor (`placed_hosts`: Slurm's
`--nodelist`). A run whose pool no node of the inventory serves is admitted at once, as without
an inventory: its pool's executor places it. Without an inventory every run is admitted at once,
as before: ranks under gloo on CPU share the host's cores rather than hold devices.

Controllers sharing a store take turns: a pass runs only under the store lock `admission`
(store/locks.py), taken at a controller's first queued run of a sweep and handed back at the
sweep's end (`release`), and every admission write is fenced by it. So a pass always reads the
holders every earlier admission left, and two controllers never admit two runs onto the same
free devices; a controller that stalled past the lock's expiry while another took it has its
write refused (LockLostError) and decides again on its next pass. A run whose controller does
not hold the lock keeps the reason it was last given.
"""

import time
from collections.abc import Callable

from runwright.control.allocation import request_number
from runwright.control.gangs import gang_request, running_gang
from runwright.control.journal import Journal
from runwright.control.states import RunState, TerminalReason
from runwright.events import EventType
from runwright.sched import admission as sched_admission
from runwright.sched.admission import AdmissionResult
from runwright.sched.inventory import ClusterView, Inventory
from runwright.sched.requests import AdmissionInput, GangRequest, NodeShare, Quotas, RunningGang
from runwright.spec import JobSpec
from runwright.store import EventRecord, RunRecord, Store
from runwright.store.locks import LockLostError, LockToken

HOLDING = (
    RunState.ALLOCATING,
    RunState.STARTING,
    RunState.RUNNING,
    RunState.CHECKPOINTING,
    RunState.RECOVERING,
)
"""States in which an admitted run holds its gang."""
QUEUE_LIMIT = 100_000
"""Runs read per state in one pass: far above any queue one controller serves."""
LOCK = "admission"
"""The store lock a pass runs under."""
OTHER_JOBS = "other-jobs"
"""The project (and run id prefix) of devices jobs outside runwright's queue hold."""


class AdmissionStep:
    """One QUEUED pass of one run (controller.py calls `advance`)."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        inventory: Inventory | Callable[[], ClusterView],
        spec_of: Callable[[RunRecord], JobSpec],
        policy: str = sched_admission.DEFAULT_POLICY,
        *,
        quotas: Quotas | None = None,
        holder: str = "controller",
        lock_seconds: float = 15.0,
    ) -> None:
        self._admit = sched_admission.registered(policy)
        self.quotas = quotas or Quotas()
        self.holder = holder
        """This controller's id, the admission lock's holder while it runs a pass."""
        self.lock_seconds = lock_seconds
        self._lock: tuple[LockToken, float] | None = None
        """The admission lock while this controller holds it, and when (monotonic) to renew it."""
        self.store = store
        self.journal = journal
        fixed = ClusterView(inventory) if isinstance(inventory, Inventory) else None
        self._source: Callable[[], ClusterView] = (
            (lambda: fixed) if fixed is not None else inventory  # type: ignore[assignment]
        )
        """The nodes and what other jobs use there: a fixed inventory file, or a cluster read
        live (control/cluster_inventory.py)."""
        self.policy = policy
        self._view: ClusterView | None = None
        self._readings = 0
        """How many different views this step has used: part of a pass's basis."""
        self.inventory = Inventory()
        self.pools: frozenset[str] = frozenset()
        """Pools the inventory serves: runs of other pools are not admitted here."""
        self.sized: frozenset[str] = frozenset()
        """Pools whose accelerators all declare their memory: runs there are held to devices
        their memory ledger fits (a node of unknown memory would never fit a floor)."""
        self._spec_of = spec_of
        self._look()
        self._held: dict[str, RunningGang | None] = {}
        """Holding run -> the gang its newest RUN_ADMITTED names (None: admitted before an
        inventory was configured), read from its events once. A run seen back in the queue is
        dropped, so a later admission is read (or written, `advance`) afresh."""
        self._pass: (
            tuple[tuple[frozenset[str], frozenset[tuple[str, str]], int], AdmissionResult] | None
        ) = None
        """The last pass's (pending ids, holders with their states, view read) and its result.
        Each queued run's turn of a controller sweep reuses it while the queue, the holders and
        the view are what it decided on (with the runs it admitted since moved to the holders):
        one pass per change, not one per queued run."""

    def _look(self) -> None:
        """Take the source's current view, and what follows from it when it changed."""
        view = self._source()
        if view is self._view:
            return
        self._view, self._readings = view, self._readings + 1
        self.inventory = view.inventory
        nodes = view.inventory.nodes
        self.pools = frozenset(pool for node in nodes for pool in node.pools)
        self.sized = frozenset(
            pool
            for pool in self.pools
            if all(
                node.device_memory_bytes > 0
                for node in nodes
                if pool in node.pools and node.device_type != "cpu"
            )
        )

    def refusal(self, spec: JobSpec, project: str = "default") -> str | None:
        """Why no state of the inventory can ever hold a run of `spec` (submit refuses it)."""
        self._look()
        if spec.resources.pool not in self.pools:
            return None
        reason = sched_admission.never_fits(
            self.inventory, self._request("submitted", project, 0.0, spec)
        )
        return None if reason is None else reason.words

    def advance(self, run: RunRecord, events: list[EventRecord]) -> None:
        """Admit `run` (RUN_ADMITTED, ALLOCATING) or say why it waits. `events` are the run's
        kept events (runlog.py)."""
        self._look()
        if self._spec_of(run).resources.pool not in self.pools:
            self.journal.move(run, RunState.ALLOCATING)
            return
        token = self._hold_lock()
        if token is None:
            return  # another controller's pass: it sees this run in the queue too
        try:
            with self.store.fenced_by_lock(token):
                self._decide(run, events)
        except LockLostError:
            self._lock = None  # another controller took the lock: decide again next pass

    def release(self) -> None:
        """Hand the admission lock back (the end of a sweep, or of a controller)."""
        if self._lock is not None:
            self.store.locks.release(self._lock[0])
            self._lock = None

    def _hold_lock(self) -> LockToken | None:
        """The admission lock's token, taken (or renewed a third of the way into its time) for
        this controller; None while another controller holds it."""
        now = time.monotonic()
        if self._lock is not None and now < self._lock[1]:
            return self._lock[0]
        taken = self.store.locks.acquire(LOCK, self.holder, self.lock_seconds)
        if not taken.held:
            self._lock = None
            return None
        self._lock = (taken.token(LOCK), now + self.lock_seconds / 3)
        return self._lock[0]

    def _decide(self, run: RunRecord, events: list[EventRecord]) -> None:
        """One pass's decision for `run`, written under the admission lock."""
        queued = self.store.list_runs(QUEUE_LIMIT, [RunState.QUEUED.value])
        holding = self.store.list_runs(QUEUE_LIMIT, [s.value for s in HOLDING])
        for r in queued:
            self._held.pop(r.run_id, None)  # back in the queue: it holds nothing now
        requests = (
            self._request(r.run_id, r.project, r.created_unix_s, self._spec_of(r)) for r in queued
        )
        pending = tuple(request for request in requests if request.pool in self.pools)
        if run.run_id not in {p.run_id for p in pending}:
            return  # it left the queue since this pass read it
        # A holder's state counts: one in CHECKPOINTING may not be preempted.
        basis = (
            frozenset(p.run_id for p in pending),
            frozenset((r.run_id, r.state) for r in holding),
            self._readings,
        )
        if self._pass is not None and self._pass[0] == basis:
            result = self._pass[1]
        else:
            running = tuple(g for g in map(self._gang_of, holding) if g is not None)
            running += self._other_jobs(running)
            result = self._admit(
                self.inventory,
                AdmissionInput(
                    now_seconds=time.time(), pending=pending, running=running, quotas=self.quotas
                ),
            )
            self._pass = (basis, result)
        decision = result.of(run.run_id)
        request = request_number(events)
        if decision.outcome == "admit" and not decision.preempt:
            # Numbered: an admission whose move was refused (its lock lost) or cut short by a
            # crash is superseded by the next one, never taken for it (the newest one counts).
            earlier = self.store.events(run.run_id, types=[EventType.RUN_ADMITTED])
            tries = sum(1 for e in earlier if e.attributes.get("request") == request)
            request_gang = next(p for p in pending if p.run_id == run.run_id)
            self.journal.record(
                run,
                EventType.RUN_ADMITTED,
                op=f"req{request}" + (f"-{tries + 1}" if tries else ""),
                per_step=False,
                request=request,
                policy=result.policy,
                position=decision.position,
                placement=[share.model_dump(mode="json") for share in decision.placement],
                borrowed=decision.borrowed,
            )
            self.journal.move(run, RunState.ALLOCATING)
            self._held[run.run_id] = RunningGang.admitted(
                request_gang,
                decision.placement,
                decision.borrowed,
                expected_end_seconds=time.time() + request_gang.expected_duration_seconds,
            )
            # The pass already placed it: later runs' decisions stand with it holding.
            pending_ids, holding_ids, readings = basis
            moved = (run.run_id, RunState.ALLOCATING.value)
            self._pass = ((pending_ids - {run.run_id}, holding_ids | {moved}, readings), result)
            return
        if decision.outcome == "admit":  # only by stopping victims first
            stopping = [self._preempt(victim, run) for victim in decision.preempt]
            words = (
                f"stopping {', '.join(stopping)} (preemptible, lower priority or on borrowed "
                "quota) at its next step boundary to make room; starts once they have left"
            )
            self._wait(
                run, request, "preemption", f"#{decision.position} in the queue: {words}", events
            )
            return
        if decision.reason is not None and decision.reason.never_fits:
            self.journal.finish(
                run, RunState.FAILED, TerminalReason.FAILED_PERMANENT, decision.reason.words
            )
            return
        assert decision.reason is not None  # pending always says why
        reason = decision.reason
        self._wait(
            run, request, reason.code, f"#{decision.position} in the queue: {reason.words}", events
        )

    def _preempt(self, victim_id: str, by: RunRecord) -> str:
        """Ask the victim's current generation to stop at its next step boundary, saving, with
        the reason `preemption` (once per generation: the event id and the file are the same
        every pass). Returns its run id."""
        victim = self.store.get_run(victim_id)
        spec = self._spec_of(victim)
        self.journal.ask_to_stop(
            victim,
            victim.generation,
            "preemption",
            save=spec.checkpoint.enabled and spec.checkpoint.save_on_stop,
            op=f"preempt-g{victim.generation}",
            per_step=False,
            preempted_by=by.run_id,
        )
        return victim.run_id

    def _wait(
        self, run: RunRecord, request: int, code: str, words: str, events: list[EventRecord]
    ) -> None:
        said = [
            e
            for e in events
            if e.type == EventType.ADMISSION_PENDING and e.attributes.get("request") == request
        ]
        if run.state_detail != words:
            self.store.update_run(run.run_id, state_detail=words)
        newest = said[-1].attributes if said else None
        if newest is None or (newest.get("code"), newest.get("reason")) != (code, words):
            self.journal.record(
                run,
                EventType.ADMISSION_PENDING,
                op=f"req{request}-{len(said) + 1}",
                per_step=False,
                request=request,
                code=code,
                reason=words,
                policy=self.policy,
            )

    def _request(self, run_id: str, project: str, submitted: float, spec: JobSpec) -> GangRequest:
        return gang_request(
            run_id, project, submitted, spec, sized=spec.resources.pool in self.sized
        )

    def _other_jobs(self, ours: tuple[RunningGang, ...]) -> tuple[RunningGang, ...]:
        """What the cluster reports allocated on each node beyond runwright's own gangs there
        (other users' jobs, outside runwright's queue) as gangs that hold those devices and
        are never preempted. An admitted gang Slurm has not started yet still counts as ours,
        so for that moment the other jobs may look smaller: Slurm, holding the job to its
        nodes, then keeps it pending with its own reason."""
        assert self._view is not None
        if not self._view.allocated:
            return ()
        taken: dict[str, set[int]] = {}
        for gang in ours:
            for share in gang.placement:
                taken.setdefault(share.node, set()).update(share.devices)
        others = []
        for node in self._view.inventory.nodes:
            mine = taken.get(node.name, set())
            extra = self._view.allocated.get(node.name, 0) - len(mine)
            if extra <= 0 or not node.pools:
                continue
            devices = tuple(i for i in range(node.device_count) if i not in mine)[:extra]
            others.append(
                RunningGang(
                    run_id=f"{OTHER_JOBS}@{node.name}",
                    project=OTHER_JOBS,
                    pool=node.pools[0],
                    placement=(NodeShare(node=node.name, devices=devices),),
                )
            )
        return tuple(others)

    def _gang_of(self, run: RunRecord) -> RunningGang | None:
        gang = self._admitted_gang(run)
        if gang is not None and gang.preemptible and run.state == RunState.CHECKPOINTING:
            return gang.model_copy(update={"preemptible": False})  # no preemption mid-save
        return gang

    def _admitted_gang(self, run: RunRecord) -> RunningGang | None:
        key = run.run_id
        if key not in self._held:
            admitted = self.store.events(run.run_id, types=[EventType.RUN_ADMITTED])
            # None: admitted before an inventory was configured, so it names no devices.
            self._held[key] = (
                running_gang(
                    self._request(run.run_id, run.project, run.created_unix_s, self._spec_of(run)),
                    admitted[-1],
                )
                if admitted
                else None
            )
        return self._held[key]
