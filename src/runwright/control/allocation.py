"""The allocation step: ALLOCATING as a real, non-blocking wait on the run's executor.

Each time a run enters ALLOCATING it makes one request, numbered by how many times it has
entered ALLOCATING (`request_number`, from its event log, so every controller names it the
same), and asks
its executor for the whole gang (`Executor.request_allocation`, idempotent per request). Later
passes follow the request without waiting:

- pending: the engine's reason in words becomes the run's `state_detail` (what `runwright status`
  prints) and, when it changes, an ALLOCATION_PENDING event;
- granted: ALLOCATION_READY with the hosts and the engine's id, the rank manifest from the
  granted hosts, STARTING;
- failed: the allocation is released and the run goes back to QUEUED, or FAILED when asking again
  cannot help (`Allocation.permanent`: the spec does not fit, the run folder is not shared).

A spec the executor can never place (`Executor.refusal`) fails the run at once with the reason
(the same check refuses it at submit). The request excludes the nodes the run lost before
(`lost_hosts` of its FAILURE_CLASSIFIED and ALLOCATION_FAILED events); the executor drops the
exclusion when too few other nodes are left, and the run waits for them instead.

Admission (which run goes first) is not decided here: the scheduler sits before ALLOCATING.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.control.executors.protocol import Allocation, AllocationState, Executor
from runwright.control.states import RunState, TerminalReason
from runwright.errors import LaunchError
from runwright.events import EventType
from runwright.protocol import RankEntry, build_rank_manifest
from runwright.spec import JobSpec
from runwright.store import EventRecord, RunRecord, Store

if TYPE_CHECKING:
    from runwright.control.journal import Journal

MAX_ALLOCATION_FAILURES = 5
"""Requests of one run that may fail (a job cancelled from outside, a node lost before the first
launch) before the run fails FAILED_RECOVERABLE instead of queueing again."""


def request_number(events: list[EventRecord]) -> int:
    """The current request's number: one more than the newest request the run gave back
    (ALLOCATION_FAILED or ALLOCATION_RELEASED, each written before the run leaves for the queue
    again). So it counts the times the run entered ALLOCATING, and every controller reading the
    log agrees on it."""
    given_back = [
        int(e.attributes["request"])
        for e in events
        if e.type in (EventType.ALLOCATION_FAILED, EventType.ALLOCATION_RELEASED)
        and e.attributes.get("request")
    ]
    return 1 + max(given_back, default=0)


def lost_hosts(events: list[EventRecord]) -> tuple[str, ...]:
    """Every node the run lost so far, and every node a corruption check quarantined
    (control/sdc.py), oldest first: the next request avoids them."""
    found: dict[str, None] = {}
    for e in events:
        if e.type in (EventType.FAILURE_CLASSIFIED, EventType.ALLOCATION_FAILED):
            found.update(dict.fromkeys(e.attributes.get("lost_hosts") or ()))
            found.update(dict.fromkeys(e.attributes.get("quarantined_hosts") or ()))
    return tuple(found)


def placed_hosts(events: list[EventRecord], request: int) -> tuple[str, ...]:
    """The nodes the scheduler's admission of request `request` placed the gang on, in node
    order (its newest RUN_ADMITTED of that request); () when it was admitted without one."""
    admitted = [
        e
        for e in events
        if e.type == EventType.RUN_ADMITTED and e.attributes.get("request") == request
    ]
    if not admitted:
        return ()
    return tuple(str(share["node"]) for share in admitted[-1].attributes.get("placement") or ())


def last_pending(events: list[EventRecord], request: int) -> tuple[int, EventRecord | None]:
    """(how many ALLOCATION_PENDING request `request` has, the newest of them)."""
    pending = [
        e
        for e in events
        if e.type == EventType.ALLOCATION_PENDING and e.attributes.get("request") == request
    ]
    return len(pending), (pending[-1] if pending else None)


class AllocationStep:
    """One ALLOCATING pass of one run (controller.py calls `advance`)."""

    def __init__(self, store: Store, journal: "Journal") -> None:
        self.store = store
        self.journal = journal

    def advance(
        self,
        run: RunRecord,
        spec: JobSpec,
        executor: Executor,
        events: list[EventRecord],
        pool: dict[str, Any],
    ) -> None:
        """`events` are the run's kept events (runlog.py); `pool` is what the allocation keeps
        of the run's pool (pools.pool_record)."""
        request = request_number(events)
        asked = any(
            e.type == EventType.ALLOCATION_REQUESTED and e.attributes.get("request") == request
            for e in events
        )
        exclude = lost_hosts(events)
        try:
            refusal = None if asked else executor.refusal(spec)
            allocation = (
                Allocation(
                    executor=executor.name,
                    request=request,
                    state=AllocationState.FAILED,
                    reason=refusal,
                    code="refused",
                    permanent=True,
                )
                if refusal is not None
                else executor.request_allocation(
                    spec=spec,
                    run_id=run.run_id,
                    root=Path(run.root),
                    request=request,
                    exclude_hosts=exclude,
                    placed_hosts=placed_hosts(events, request),
                )
            )
        except LaunchError as exc:
            # The engine cannot be asked now (slurmctld down or unreachable): wait, and say why.
            unreachable = Allocation(
                executor=executor.name,
                request=request,
                state=AllocationState.PENDING,
                reason=f"cannot reach the {executor.name} executor's engine, retrying: {exc}",
                code="unreachable",
            )
            self._wait(run, unreachable, {**pool, **unreachable.model_dump(mode="json")}, events)
            return
        if refusal is not None:
            self._fail(run, allocation, {**pool, **allocation.model_dump(mode="json")}, events)
            return
        if not asked:
            self.journal.record(
                run,
                EventType.ALLOCATION_REQUESTED,
                op=f"req{request}",
                per_step=False,
                request=request,
                executor=executor.name,
                pool=pool.get("pool"),
                engine_id=allocation.engine_id,
                nodes=spec.resources.nodes,
                exclude_hosts=list(exclude) or None,
            )
        record = {
            **pool,
            **allocation.model_dump(mode="json"),
            "world_size": spec.resources.world_size,
            "device_type": spec.resources.device_type,
        }
        if allocation.state is AllocationState.GRANTED:
            self._grant(run, spec, allocation, record)
        elif allocation.state is AllocationState.PENDING:
            self._wait(run, allocation, record, events)
        else:
            executor.release_allocation(Path(run.root), run.run_id, request)
            self._fail(run, allocation, record, events)

    def _wait(
        self,
        run: RunRecord,
        allocation: Allocation,
        record: dict[str, Any],
        events: list[EventRecord],
    ) -> None:
        count, newest = last_pending(events, allocation.request)
        changed = newest is None or (
            newest.attributes.get("code"),
            newest.attributes.get("reason"),
        ) != (allocation.code, allocation.reason)
        if run.state_detail != allocation.reason or run.allocation != record:
            self.store.update_run(run.run_id, allocation=record, state_detail=allocation.reason)
        if changed:
            self.journal.record(
                run,
                EventType.ALLOCATION_PENDING,
                op=f"req{allocation.request}-{count + 1}",
                per_step=False,
                request=allocation.request,
                reason=allocation.reason,
                code=allocation.code,
                engine_id=allocation.engine_id,
            )

    def _grant(
        self, run: RunRecord, spec: JobSpec, allocation: Allocation, record: dict[str, Any]
    ) -> None:
        res = spec.resources
        manifest: list[RankEntry] = build_rank_manifest(
            nodes=res.nodes,
            devices_per_node=res.devices_per_node,
            dp=int(spec.plan.dp.value or 1),
            tp=spec.parallelism.tp,
            pp=spec.parallelism.pp,
            device_type=res.device_type,
            hosts=list(allocation.hosts),
        )
        self.store.update_run(
            run.run_id,
            allocation=record,
            rank_manifest=[e.model_dump() for e in manifest],
            state_detail=allocation.reason,
        )
        self.journal.record(
            run,
            EventType.ALLOCATION_READY,
            op=f"req{allocation.request}",
            per_step=False,
            executor=allocation.executor,
            request=allocation.request,
            engine_id=allocation.engine_id,
            hosts=list(allocation.hosts),
            world_size=res.world_size,
            device_type=res.device_type,
            pool=record.get("pool"),
        )
        self.journal.move(run, RunState.STARTING, detail=allocation.reason)

    def _fail(
        self,
        run: RunRecord,
        allocation: Allocation,
        record: dict[str, Any],
        events: list[EventRecord],
    ) -> None:
        failures = 1 + sum(1 for e in events if e.type == EventType.ALLOCATION_FAILED)
        self.store.update_run(run.run_id, allocation=record, state_detail=allocation.reason)
        self.journal.record(
            run,
            EventType.ALLOCATION_FAILED,
            op=f"req{allocation.request}",
            per_step=False,
            request=allocation.request,
            reason=allocation.reason,
            code=allocation.code,
            engine_id=allocation.engine_id,
            permanent=allocation.permanent,
            lost_hosts=list(allocation.lost_hosts) or None,
        )
        if allocation.permanent:
            self.journal.finish(
                run, RunState.FAILED, TerminalReason.FAILED_PERMANENT, allocation.reason
            )
        elif failures >= MAX_ALLOCATION_FAILURES:
            self.journal.finish(
                run,
                RunState.FAILED,
                TerminalReason.FAILED_RECOVERABLE,
                f"{failures} allocation requests failed; the last: {allocation.reason}",
            )
        else:
            self.journal.move(
                run, RunState.QUEUED, detail=f"allocation failed, queued again: {allocation.reason}"
            )

    def release(self, run: RunRecord, executor: Executor, why: str) -> bool:
        """Give the run's allocation back if it may still hold nodes or a queue entry
        (ALLOCATION_RELEASED once). False when the engine cannot be reached now: try again."""
        record = dict(run.allocation or {})
        if record.get("state") not in (AllocationState.PENDING, AllocationState.GRANTED):
            return True
        request = int(record.get("request") or 0)
        try:
            released = executor.release_allocation(Path(run.root), run.run_id, request)
        except LaunchError:
            return False
        self.store.update_run(
            run.run_id, allocation={**record, "state": str(AllocationState.RELEASED)}
        )
        self.journal.record(
            run,
            EventType.ALLOCATION_RELEASED,
            op=f"req{request}",
            per_step=False,
            request=request,
            engine_id=released.engine_id,
            reason=why,
        )
        return True
