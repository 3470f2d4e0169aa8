"""The controller: reconciles each run's desired state with what it observes.

A pass reads the run record (the source of truth), ingests what the workers reported, looks at the
worker group through the executor (executors/protocol.py: the controller knows no executor's
details), and takes at most the next step of the state machine. A pass is cheap and never waits: a
run's spec is parsed once, the event log is read from the last sequence number seen (runlog.py),
and a launch another controller claimed is looked for on later passes. Side effects carry an
operation id (journal.py's event ids; one launch per generation, marked by its pid file), so a pass
repeated by a restarted controller is harmless: it adopts a live group of the current generation
and kills any group of an older one. For the same reason a pass that the store breaks off (locked,
busy, unreachable) is simply abandoned and retried after a backoff (outage.py): the workers keep
reporting into their channel, which is read from where the last pass stopped.

Several controllers may share one store: each run is driven by the holder of its lease; the drive
loops under leases are driving.py's, the launches launching.py's, the supervision of a live or
ending group supervising.py's.
"""

import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from runwright.control.admission import AdmissionStep
from runwright.control.alerts import AlertEngine
from runwright.control.allocation import AllocationStep
from runwright.control.cleaner import release_ended
from runwright.control.driving import LeasedDriving
from runwright.control.executors.protocol import Executor
from runwright.control.ingest import Ingestor
from runwright.control.journal import Journal
from runwright.control.launching import GroupLauncher
from runwright.control.leasing import (
    LEASE_SECONDS,
    ControllerLeases,
    LeaseGuardedExecutor,
)
from runwright.control.membership import is_elastic, spec_for
from runwright.control.operator_step import OperatorStep
from runwright.control.outage import OutageRider
from runwright.control.pause import PauseStep
from runwright.control.pools import PoolExecutors, PoolsError
from runwright.control.recovery import RecoverySequence
from runwright.control.replay_check import ReplayVerifier
from runwright.control.runlog import RunLogs
from runwright.control.states import TERMINAL, RunState, TerminalReason
from runwright.control.stopping import GroupStops
from runwright.control.supervising import GroupSupervising
from runwright.control.supervision import Supervision
from runwright.control.tracing import trace_run
from runwright.control.withdrawal import WithdrawalWatch
from runwright.errors import PlacementError
from runwright.events import EventType
from runwright.layout import checkpoint_root, run_paths
from runwright.observe.rank_steps import unfold
from runwright.sched.admission import DEFAULT_POLICY
from runwright.sched.inventory import ClusterView, Inventory
from runwright.sched.requests import Quotas
from runwright.spec import JobSpec, spec_from_mapping
from runwright.store import EventRecord, RunRecord, Store
from runwright.store.leases import LeaseResult
from runwright.store.store import DEFAULT_PROJECT

if TYPE_CHECKING:
    from runwright.govern.preflight_checks import PreflightReport


INGEST_SLICE_SECONDS = 0.5
"""The most one pass spends ingesting one run's channel before it moves on (deadlines, other
runs): at ~30,000 events/s through batched ingest that is ~15,000 events, far above what a run
reports in a pass, so only a backlog is cut (issue 19: a cancel's grace kill waited for a
250,000-line backlog). Once a group has ended its channel is read to the end."""

NO_STANDBY = frozenset(
    {RunState.QUEUED, RunState.ALLOCATING, RunState.PAUSED, RunState.SUCCEEDED, RunState.FAILED,
     RunState.CANCELLED}
)  # fmt: skip
"""States in which a run's warm standby can never be launched: it is killed."""


def new_run_id(spec: JobSpec) -> str:
    return f"{spec.name[:40]}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


class Controller(GroupSupervising, LeasedDriving):
    """Drives runs, each on the executor of its pool (control/pools.py); the store is the only
    state that outlives it. `executor`, when given, drives every run (tests); otherwise a run's
    executor comes from the pool its allocation recorded, else from the pools file
    (`pools_file`, else $RUNWRIGHT_POOLS, else `<root>/pools.yaml`, else one local pool)."""

    def __init__(
        self,
        store: Store,
        root: Path,
        executor: Executor | None = None,
        poll_seconds: float = 0.2,
        on_event: Callable[[EventRecord], None] | None = None,
        lease_seconds: float = LEASE_SECONDS,
        pools_file: Path | None = None,
        inventory: Inventory | Callable[[], ClusterView] | None = None,
        admission_policy: str | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self.store = store
        self.root = root
        self.leases = ControllerLeases(store, lease_seconds)
        # Guarded: no process of a run is started or ended (no Slurm job submitted or cancelled)
        # once its lease may have run out.
        self.executors = PoolExecutors(
            root, pools_file, executor, guard=lambda inner: LeaseGuardedExecutor(inner, self.leases)
        )
        self.executor: Executor = self.executors.default
        """The executor of runs that name no pool of their own (the `default` pool's)."""
        self.poll_seconds = poll_seconds
        self.on_event = on_event
        self.journal = Journal(store)
        self.logs = RunLogs(store)
        self.allocations = AllocationStep(store, self.journal)
        self.admission = (
            AdmissionStep(
                store,
                self.journal,
                inventory,
                self._spec_of,
                admission_policy or DEFAULT_POLICY,
                quotas=quotas,
                holder=self.leases.holder,
                lock_seconds=lease_seconds,
            )
            if inventory is not None
            else None
        )
        """Admits QUEUED runs onto `inventory` (fixed, or a cluster read live) under `quotas`
        (control/admission.py); None admits at once."""
        self.alerts = AlertEngine(self.journal)
        self.replays = ReplayVerifier(self.journal, on_verdict=self.alerts.replay_verdict)
        self.journal.before_finished = lambda run: (
            self.replays.close(run),
            self.alerts.close(run, f"the run ended {run.state}"),
            self.allocations.release(run, self.executor_of(run), f"the run is {run.state}"),
            release_ended(store, self.journal, run),
        )
        self.recovery = RecoverySequence(store, self.journal, self.executor_of, self.logs)
        self.outage = OutageRider(reset=store.reset_connections)
        self._sup: dict[str, Supervision] = {}
        self._ingest: dict[str, Ingestor] = {}
        self._seen_seq: dict[str, int] = {}
        self._orphans_checked: set[str] = set()
        self._specs: dict[str, tuple[str, JobSpec]] = {}
        """run id -> (spec hash, its validated spec): a spec never changes, so it is parsed once."""
        self._hostname = socket.gethostname()
        self._standing_by: dict[str, tuple[str | None, int]] = {}
        """run id -> (holder, epoch) of the other controller's lease this one was told of."""
        self._takeovers: dict[str, LeaseResult] = {}
        """run id -> the take of another controller's lease, until its event is recorded."""
        self.stops = GroupStops(store, self.journal, self.logs)
        self.withdrawals = WithdrawalWatch(store, self.journal)
        self.pauses = PauseStep(
            store,
            self.journal,
            release=lambda run, why: self.allocations.release(run, self.executor_of(run), why),
            close_alerts=self.alerts.close,
        )
        self.operator = OperatorStep(
            store,
            self.journal,
            release=lambda run, why: self.allocations.release(run, self.executor_of(run), why),
        )
        self.launcher = GroupLauncher(
            store, self.journal, self.logs, self.executor_of, self._hostname
        )

    # -- entry points ---------------------------------------------------------------------------

    def submit(
        self,
        spec: JobSpec,
        workdir: Path,
        idempotency_key: str | None = None,
        *,
        project: str = DEFAULT_PROJECT,
        submitted_by: str | None = None,
        hold: bool = False,
    ) -> tuple[RunRecord, bool]:
        """Record a run; the same idempotency key returns the existing run and starts nothing.
        `project` and `submitted_by` say whose run it is (the shared server's access control).
        `hold` makes this controller the new run's lease holder in the same transaction, so a
        daemon cannot take it between the submit and this controller's `drive`. PlacementError
        (no run recorded) when the spec's pool can never place it."""
        refusal = self.executors.for_spec(spec).refusal(spec)
        if refusal is None and self.admission is not None:
            refusal = self.admission.refusal(spec, project)
        if refusal is not None:
            raise PlacementError(f"no run was recorded: {refusal}")
        leases = self.leases
        run, created = self.store.create_run(
            run_id=new_run_id(spec),
            name=spec.name,
            spec=spec.model_dump(mode="json"),
            spec_hash=spec.spec_hash,
            plan=spec.plan.model_dump(mode="json"),
            workdir=str(workdir),
            root=str(self.root),
            state=RunState.CREATED,
            idempotency_key=idempotency_key,
            project=project,
            submitted_by=submitted_by,
            lease=(leases.holder, leases.node, leases.lease_seconds) if hold else None,
        )
        if created and hold:
            leases.take_if_free(run.run_id, None, 0.0)  # the lease is ours: this loads its token
        if created:
            self.journal.record(
                run,
                EventType.JOB_SUBMITTED,
                spec_hash=spec.spec_hash,
                idempotency_key=idempotency_key,
                project=project,
                submitted_by=submitted_by,
            )
        return run, created

    def reconcile(self, run_id: str) -> bool:
        """One pass; True once the run is terminal and no worker of it is left. A transient store
        error (StoreUnavailableError) breaks the pass off; the drive loops retry it."""
        run = self.store.get_run(run_id)
        spec = self._spec_of(run)
        if run_id not in self._orphans_checked:
            self.launcher.kill_orphans(run)
            self._orphans_checked.add(run_id)
        self._ingest_and_watch(run, spec, until=time.monotonic() + INGEST_SLICE_SECONDS)
        run = self.store.get_run(run_id)
        state = RunState(run.state)
        done = False
        if spec.recovery.warm_standby and state in NO_STANDBY:
            self.launcher.discard_standbys(run, f"the run is {state}")
        if state in TERMINAL:
            done = self._wind_down(run, spec)
            if done:
                done = self.launcher.revoke_credentials(run, f"the run is {state}")
        elif state is RunState.CREATED:
            report = self._preflight(run, spec)
            if report.ok:
                self.journal.move(run, RunState.QUEUED, "JOB_ACCEPTED")
            else:
                self.journal.finish(
                    run, RunState.FAILED, TerminalReason.FAILED_PERMANENT, report.reason()
                )
        elif state is RunState.QUEUED:
            refused = self.withdrawals.refusal_before_start(run, spec)
            if refused is not None:
                self.journal.finish(run, RunState.FAILED, TerminalReason.FAILED_PERMANENT, refused)
            elif self.admission is None:
                self.journal.move(run, RunState.ALLOCATING)
            else:
                self.admission.advance(run, self.logs.of(run_id).events)
        elif state is RunState.ALLOCATING:
            self._allocate(run, spec)
        elif state is RunState.RECOVERING:
            if self.recovery.restart_if_due(run):
                self._sup.pop(run_id, None)
        elif state is RunState.PAUSED:
            # Nothing of it runs or is held: `resume` puts it back in the queue.
            done = self.launcher.revoke_credentials(run, "the run is paused")
        else:
            self._supervise(run, spec)
        self._emit(run_id)
        trace_run(self.store, run)  # spans of the pass's new events (observe/tracing.py)
        if done:
            self._forget(run_id)
        return done

    # -- placement -----------------------------------------------------------------------------

    def _preflight(self, run: RunRecord, spec: JobSpec) -> "PreflightReport":
        """The preflight checks of a new run (govern/preflight_checks.py), recorded as its
        PREFLIGHT_CHECKED event: its dataset, memory, checkpoint storage and environment, from
        where the workers will look (the run's workdir and checkpoint root)."""
        from runwright.govern.preflight_checks import run_preflight

        # A URL location is not probed from here (the check says so); a local one is.
        where = checkpoint_root(run_paths(Path(run.root), run.run_id), spec.checkpoint.location)
        report = run_preflight(
            spec,
            Path(run.workdir),
            Path(where.removeprefix("file://")),
            Path(run.root),
            store=self.store,
            project=run.project,
        )
        self.journal.record(
            run,
            EventType.PREFLIGHT_CHECKED,
            per_step=False,
            ok=report.ok,
            checks=[check.model_dump() for check in report.checks],
            effective=report.effective,
        )
        return report

    def _allocate(self, run: RunRecord, spec: JobSpec) -> None:
        """ALLOCATING: one non-blocking step of the run's allocation request (allocation.py)."""
        try:
            pool = self.executors.record(run.allocation, spec)
            executor = self.executor_of(run)
        except PoolsError as exc:
            self.journal.finish(run, RunState.FAILED, TerminalReason.FAILED_PERMANENT, str(exc))
            return
        self.allocations.advance(run, spec, executor, self.logs.of(run.run_id).events, pool)

    def executor_of(self, run: RunRecord) -> Executor:
        """The executor that drives `run` (pools.PoolExecutors): a Slurm run stays on Slurm
        whatever this controller's pools file says."""
        return self.executors.of_run(run.allocation, self._spec_of(run))

    # -- helpers --------------------------------------------------------------------------------

    def _spec_of(self, run: RunRecord) -> JobSpec:
        cached = self._specs.get(run.run_id)
        if cached is None or cached[0] != run.spec_hash:
            cached = (run.spec_hash, spec_from_mapping(run.spec, f"run {run.run_id}"))
            self._specs[run.run_id] = cached
        return spec_for(cached[1], self.logs.of(run.run_id)) if is_elastic(cached[1]) else cached[1]

    def _let_go(self, run_id: str) -> None:
        self._sup.pop(run_id, None)
        self._ingest.pop(run_id, None)
        self._orphans_checked.discard(run_id)
        self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        """Drop what this controller cached of a run that is done (a daemon drives many)."""
        self._specs.pop(run_id, None)
        self.replays.forget(run_id)
        self.stops.forget(run_id)
        self.withdrawals.forget(run_id)
        self.launcher.forget(run_id)
        self.logs.forget(run_id)

    def _emit(self, run_id: str) -> None:
        if self.on_event is None:
            return
        for event in self.store.events(run_id, after_seq=self._seen_seq.get(run_id, 0)):
            self._seen_seq[run_id] = event.seq
            # A watcher sees each rank's step report, as the ranks sent them, not the row the
            # store keeps for a whole step (observe/rank_steps.py).
            for report in unfold(event):
                self.on_event(report)
