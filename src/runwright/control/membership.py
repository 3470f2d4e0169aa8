"""Elastic membership: the size each generation of an elastic run launches at (seed 003,
"membership contracts").

`parallelism.membership.mode: elastic` with [min_nodes, max_nodes]: when a generation loses
nodes, the next one runs on the nodes that remain (if at least min_nodes) instead of waiting for
replacements. It grows back to `resources.nodes` when the executor says it has the capacity: at
the shrunk generation's first checkpoint boundary (once it committed a checkpoint, it is asked to
stop with a save at its next step, reason `resize`, and restarts at full size from that save),
or at its next restart, whichever comes first. The capacity is an executor's optional
`nodes_available(spec) -> int | None` (nodes of the spec's shape it could start now); an executor
without it cannot tell, and the run stays at its size until it loses more nodes or ends.

Each change is a MEMBERSHIP_CHANGED event holding the old and the new layout (spec/elastic.py's
Layout); the newest one is the run's size, so a restarted controller reads it back from the log
(runlog.py) and nothing else records it. A change always goes through the allocation step
(recovery.restart_if_due requeues), so the executor grants the new size and the rank manifest is
rebuilt for it.

The trainer needs nothing of this: its context resolves the plan at the world size torchrun
gives it (runtime/context.py), the checkpoint is reloaded through DCP's resharding, and the data
cursor is global (data/read/step_plan.py), so the global sample sequence does not depend on dp.
`fixed` runs never read this module's decisions: their size is `resources.nodes`.
"""

import time
from typing import TYPE_CHECKING

from runwright.control.failures import Classification
from runwright.control.states import RunState
from runwright.events import EventType
from runwright.spec import FailureClass, JobSpec, spec_from_mapping
from runwright.spec.elastic import Layout, layout_at, spec_at_nodes
from runwright.store import EventRecord, RunRecord, Store

if TYPE_CHECKING:
    from runwright.control.journal import Journal
    from runwright.control.runlog import RunLog
    from runwright.control.supervision import Supervision

RESIZE_REASON = "resize"
"""The stop reason (protocol.STOP_REASONS) of a shrunk group asked to stop so the run grows."""


def submitted(run: RunRecord) -> JobSpec:
    """The spec as submitted (its `resources.nodes` is the size an elastic run grows back to)."""
    return spec_from_mapping(run.spec, f"run {run.run_id}")


def is_elastic(spec: JobSpec) -> bool:
    return spec.parallelism.membership.mode == "elastic"


def current_nodes(events: list[EventRecord]) -> int | None:
    """The size the newest MEMBERSHIP_CHANGED set (None: never changed, the spec's size)."""
    changes = [e for e in events if e.type == EventType.MEMBERSHIP_CHANGED]
    return int(changes[-1].attributes["new"]["nodes"]) if changes else None


def changed_for(events: list[EventRecord], generation: int) -> EventRecord | None:
    """The MEMBERSHIP_CHANGED generation `generation`'s recovery recorded, if any."""
    changes = (e for e in events if e.type == EventType.MEMBERSHIP_CHANGED)
    return next((e for e in changes if e.generation == generation), None)


def spec_for(spec: JobSpec, log: "RunLog") -> JobSpec:
    """The spec as the run's current generation runs it: at its elastic size."""
    if not is_elastic(spec):
        return spec
    nodes = current_nodes(log.events)
    return spec if nodes is None else spec_at_nodes(spec, nodes)


def next_size(
    target: int, current: int, min_nodes: int, lost_nodes: int, available: int | None
) -> tuple[int, str] | None:
    """The next generation's node count and why, or None to keep `current` (pure).

    A loss shrinks to the nodes that remain when that is at least `min_nodes`, and otherwise
    goes back to `target` (the recovery policy then waits for a full gang, as a fixed run does).
    Without a loss, a shrunk run grows back to `target` once the executor has the nodes."""
    if lost_nodes:
        remaining = current - lost_nodes
        if remaining >= min_nodes:
            return remaining, f"lost {lost_nodes} node(s): continue on the {remaining} remaining"
        if current == target:
            return None
        return target, (
            f"lost {lost_nodes} node(s), leaving {max(remaining, 0)} < min_nodes {min_nodes}: "
            f"wait for {target} nodes"
        )
    if current < target and available is not None and available >= target:
        return target, f"the executor has {available} nodes again: grow back to {target}"
    return None


class MembershipStep:
    """Decides and records each elastic size change (module docstring)."""

    def __init__(self, store: Store, journal: "Journal") -> None:
        self.store = store
        self.journal = journal
        self._targets: dict[str, int] = {}
        """run id -> the submitted `resources.nodes` (parsed once)."""
        self._boundary: dict[tuple[str, int], str | None] = {}
        """(run id, generation) -> the newest checkpoint when the controller first saw the
        generation: a different one since means the generation reached a checkpoint boundary."""

    def target(self, run: RunRecord) -> int:
        if run.run_id not in self._targets:
            self._targets[run.run_id] = submitted(run).resources.nodes
        return self._targets[run.run_id]

    def maybe_grow(
        self, run: RunRecord, spec: JobSpec, sup: "Supervision", executor: object
    ) -> bool:
        """Ask a shrunk generation that committed a checkpoint to stop with a save at its next
        step (RESIZE_REASON) when the executor has the nodes again; True when it asked."""
        if not is_elastic(spec) or sup.stop_deadline is not None:
            return False
        target = self.target(run)
        if spec.resources.nodes >= target:
            return False
        seen = self._boundary.setdefault((run.run_id, run.generation), run.latest_checkpoint_id)
        if run.latest_checkpoint_id == seen or not spec.checkpoint.enabled:
            return False
        probe = getattr(executor, "nodes_available", None)
        available = probe(spec_at_nodes(spec, target)) if probe is not None else None
        if available is None or available < target:
            return False
        self.journal.ask_to_stop(
            run, run.generation, RESIZE_REASON, save=True, op=f"resize{run.generation}",
            per_step=False, nodes_available=available,
        )  # fmt: skip
        sup.stop_reason = RESIZE_REASON
        sup.stop_by(spec.recovery.stop_grace_seconds)
        return True

    def regrow(
        self, run: RunRecord, spec: JobSpec, sup: "Supervision", exit_code: int | None
    ) -> None:
        """The resized group stopped (with its save): record the change and restart at the full
        size (recovery.restart_if_due requeues for it). Not a failure: no class, no retry."""
        target = self.target(run)
        old, new = layout_at(spec, spec.resources.nodes), layout_at(spec, target)
        sup.end_attempt(self.store, run.run_id, exit_code, None)
        why = f"the executor has {target} nodes again: grow back at a checkpoint boundary"
        self.journal.record(
            run, EventType.MEMBERSHIP_CHANGED, op=f"to{target}", per_step=False, reason=why,
            change="grow", failure_class=None, lost_hosts=None, old=old.model_dump(),
            new=new.model_dump(), from_generation=run.generation, to_generation=run.generation + 1,
        )  # fmt: skip
        self.journal.move(run, RunState.RECOVERING, detail=why)
        run = self.store.get_run(run.run_id)
        now = time.time()
        self.journal.record(
            run, EventType.RECOVERY_STARTED, action="restart", reason=why,
            last_step=run.last_step, detected_unix_s=now, not_before_unix_s=now,
        )  # fmt: skip
        self._boundary.pop((run.run_id, run.generation), None)

    def after_failure(
        self,
        run: RunRecord,
        spec: JobSpec,
        failure: Classification,
        lost_hosts: tuple[str, ...],
        executor: object,
    ) -> Layout | None:
        """Decide the next generation's size after `failure` (spec: as the failed generation
        ran it); record MEMBERSHIP_CHANGED and return the new layout, or None to keep it."""
        if not is_elastic(spec):
            return None
        membership = spec.parallelism.membership
        target = submitted(run).resources.nodes
        current = spec.resources.nodes
        lost = 0
        if failure.failure_class == FailureClass.NODE_LOST:
            lost = max(1, len(set(lost_hosts)))
        probe = getattr(executor, "nodes_available", None)
        available = probe(spec_at_nodes(spec, target)) if probe is not None else None
        decided = next_size(target, current, membership.min_nodes or 1, lost, available)
        if decided is None:
            return None
        nodes, why = decided
        old, new = layout_at(spec, current), layout_at(spec, nodes)
        self.journal.record(
            run,
            EventType.MEMBERSHIP_CHANGED,
            op=f"to{nodes}",
            per_step=False,
            reason=why,
            change="shrink" if nodes < current else "grow",
            failure_class=str(failure.failure_class),
            lost_hosts=list(lost_hosts) or None,
            old=old.model_dump(),
            new=new.model_dump(),
            from_generation=run.generation,
            to_generation=run.generation + 1,
        )
        return new
