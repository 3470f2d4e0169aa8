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

Several controllers may share one store: each run is driven by the holder of its lease
(leasing.py). `drive` and `drive_all` pass over a run only under its lease, every store write of
the pass is refused once the lease is no longer this controller's, and a run whose lease another
live controller holds is left to it (this one stands by and takes it over when that lease is
released or runs out).
"""

import functools
import logging
import socket
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from runwright.control.admission import AdmissionStep
from runwright.control.alerts import AlertEngine
from runwright.control.allocation import AllocationStep
from runwright.control.executors.protocol import Executor
from runwright.control.gangs import pinned_devices
from runwright.control.ingest import Ingestor
from runwright.control.journal import Journal
from runwright.control.leasing import (
    LEASE_SECONDS,
    ControllerLeases,
    LeaseGuardedExecutor,
    PassOutcome,
    describe_lease,
)
from runwright.control.outage import Outage, OutageRider
from runwright.control.pause import PAUSE_REASON, PauseStep
from runwright.control.pools import PoolExecutors, PoolsError
from runwright.control.recovery import RecoverySequence, skip_ranges
from runwright.control.resume import resume_env, rollback_env
from runwright.control.runlog import RunLogs
from runwright.control.states import AT_REST, TERMINAL, RunState, TerminalReason
from runwright.control.stopping import ENDINGS, GroupStops, note_loss
from runwright.control.supervision import Supervision
from runwright.control.tracing import trace_run
from runwright.control.watchdog import Watchdog
from runwright.errors import LeaseLostError, PlacementError
from runwright.events import EventType
from runwright.layout import checkpoint_root, run_paths
from runwright.protocol import (
    ENV_SKIP_STEPS,
    ChannelMessage,
    RankEntry,
    encode_skip_steps,
)
from runwright.sched.admission import DEFAULT_POLICY
from runwright.sched.inventory import ClusterView, Inventory
from runwright.sched.requests import Quotas
from runwright.spec import JobSpec, spec_from_mapping
from runwright.store import EventRecord, Outcome, RunRecord, Store, is_transient
from runwright.store.leases import Lease, LeaseOutcome, LeaseResult
from runwright.store.store import DEFAULT_PROJECT

if TYPE_CHECKING:
    from runwright.govern.preflight_checks import PreflightReport

log = logging.getLogger(__name__)
T = TypeVar("T")
DRIVEN = [s for s in RunState if s not in AT_REST]
"""The states a controller's sweep picks runs up in (a paused run waits for `resume`)."""
LAUNCH_CLAIM_SECONDS = 30.0
"""How long a controller that lost the claim to launch a generation looks for the winner's group
(once a pass, reconciling its other runs meanwhile) before it concludes the winner died first and
launches itself."""


INGEST_SLICE_SECONDS = 0.5
"""The most one pass spends ingesting one run's channel before it moves on (deadlines, other
runs): at ~30,000 events/s through batched ingest that is ~15,000 events, far above what a run
reports in a pass, so only a backlog is cut (issue 19: a cancel's grace kill waited for a
250,000-line backlog). Once a group has ended its channel is read to the end."""

SAVE_ENDS = frozenset(
    {EventType.CHECKPOINT_COMMITTED, EventType.CHECKPOINT_FAILED, EventType.STALE_WRITE_REJECTED}
)
"""The events that end a staged save, whichever way it went."""


def new_run_id(spec: JobSpec) -> str:
    return f"{spec.name[:40]}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


class Controller:
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
        self.journal.before_finished = lambda run: (
            self.alerts.close(run, f"the run ended {run.state}"),
            self.allocations.release(run, self.executor_of(run), f"the run is {run.state}"),
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
        self._claims: dict[str, tuple[int, float]] = {}
        """run id -> (generation, monotonic deadline) while another controller's claimed launch
        of that generation is expected."""
        self._standing_by: dict[str, tuple[str | None, int]] = {}
        """run id -> (holder, epoch) of the other controller's lease this one was told of."""
        self._takeovers: dict[str, LeaseResult] = {}
        self.stops = GroupStops(store, self.journal, self.logs)
        self.pauses = PauseStep(
            store,
            self.journal,
            release=lambda run, why: self.allocations.release(run, self.executor_of(run), why),
            close_alerts=self.alerts.close,
        )
        """run id -> rank 0's training loss by step, for runs with stop criteria (rebuilt from
        the channel files by a restarted controller's ingest)."""
        """run id -> the take of another controller's lease, until its event is recorded."""

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

    def drive(self, run_id: str) -> RunRecord:
        """Reconcile until the run is terminal and its workers are gone (`run_id` may be a unique
        prefix). Ctrl-C cancels. A store outage is ridden out, however long it lasts. While
        another live controller holds the run's lease, this one says so, shows the run's events
        and stands by: it takes the run over if that lease is released or runs out, and returns
        once the run is finished, by whichever controller. Leaving hands the lease back."""
        # get_run takes the prefix too, so an outage before the id is resolved is still recorded.
        run_id = self._riding(lambda: self.store.get_run(run_id).run_id, [run_id])
        runs = [run_id]
        try:
            try:
                while not self._riding(lambda: self._drive_pass(run_id), runs):
                    self._riding(self._end_admission, runs)
                    time.sleep(self.poll_seconds)
            except KeyboardInterrupt:
                from runwright.control.cancel import request_cancel

                why = "interrupted by the user (Ctrl-C)"
                self._riding(lambda: request_cancel(self.store, run_id, why), runs)
                while not self._riding(lambda: self._drive_pass(run_id), runs):
                    time.sleep(self.poll_seconds)
            self._riding(lambda: self._emit(run_id), runs)
            return self._riding(lambda: self.store.get_run(run_id), runs)
        finally:
            self._release_leases()

    def drive_all(self, *, until_idle: bool = True) -> list[str]:
        """Pick up every unfinished run in the store where its records say it is, and reconcile
        them all until none is left (or forever, as a daemon). Runs another live controller
        holds the lease of are left to it; this one takes each over if its lease is released or
        runs out. Stopping this controller leaves the workers running and hands its leases back,
        so the next controller adopts them at once. A store outage is ridden out."""
        active: set[str] = set()
        finished: list[str] = []
        try:
            while True:
                self._riding(lambda: self._sweep(active, finished), active)
                if not active and until_idle:
                    return finished
                time.sleep(self.poll_seconds)
        finally:
            self._release_leases()

    def _sweep(self, active: set[str], finished: list[str]) -> None:
        """One pass over every unfinished run, each under its lease. `active` and `finished`
        change run by run, so a sweep the store breaks off keeps what it did."""
        listed = {r.run_id for r in self.store.list_runs(limit=100_000, states=DRIVEN)}
        active.update(listed)
        for lost in self.leases.renew():
            self._drop(lost)
        others, now = self.store.leases.snapshot([r for r in active if not self.leases.holds(r)])
        for run_id in sorted(active):
            if not self.leases.holds(run_id) and not self._take(run_id, others.get(run_id), now):
                if run_id not in listed:
                    active.discard(run_id)  # terminal: its holder winds it down
                continue
            if self._leased_pass(run_id) is PassOutcome.FINISHED:
                active.discard(run_id)
                finished.append(run_id)
        self._end_admission()

    def reconcile(self, run_id: str) -> bool:
        """One pass; True once the run is terminal and no worker of it is left. A transient store
        error (StoreUnavailableError) breaks the pass off; the drive loops retry it."""
        run = self.store.get_run(run_id)
        spec = self._spec_of(run)
        if run_id not in self._orphans_checked:
            self._kill_orphans(run)
            self._orphans_checked.add(run_id)
        self._ingest_and_watch(run, spec, until=time.monotonic() + INGEST_SLICE_SECONDS)
        run = self.store.get_run(run_id)
        state = RunState(run.state)
        done = False
        if state in TERMINAL:
            done = self._wind_down(run, spec)
        elif state is RunState.CREATED:
            report = self._preflight(run, spec)
            if report.ok:
                self.journal.move(run, RunState.QUEUED, "JOB_ACCEPTED")
            else:
                self.journal.finish(
                    run, RunState.FAILED, TerminalReason.FAILED_PERMANENT, report.reason()
                )
        elif state is RunState.QUEUED:
            if self.admission is None:
                self.journal.move(run, RunState.ALLOCATING)
            else:
                self.admission.advance(run, self.logs.of(run_id).events)
        elif state is RunState.ALLOCATING:
            self._allocate(run, spec)
        elif state is RunState.RECOVERING:
            if self.recovery.restart_if_due(run):
                self._sup.pop(run_id, None)
        elif state is RunState.PAUSED:
            done = True  # nothing of it runs or is held: `resume` puts it back in the queue
        else:
            self._supervise(run, spec)
        self._emit(run_id)
        trace_run(self.store, run)  # spans of the pass's new events (observe/tracing.py)
        if done:
            self._forget(run_id)
        return done

    # -- placement and launch -------------------------------------------------------------------

    def _preflight(self, run: RunRecord, spec: JobSpec) -> "PreflightReport":
        """The preflight checks of a new run (govern/preflight_checks.py), recorded as its
        PREFLIGHT_CHECKED event: its dataset, memory, checkpoint storage and environment, from
        where the workers will look (the run's workdir and checkpoint root)."""
        from runwright.govern.preflight_checks import run_preflight

        # A URL location is not probed from here (the check says so); a local one is.
        where = checkpoint_root(run_paths(Path(run.root), run.run_id), spec.checkpoint.location)
        report = run_preflight(
            spec, Path(run.workdir), Path(where.removeprefix("file://")), Path(run.root)
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

    def _launch(self, run: RunRecord, spec: JobSpec) -> Supervision | None:
        """Start the current generation's group once (its pid file marks the launch), or adopt
        the one an earlier controller started; either way only once no process of an older
        generation is left on this node. None while another controller's claimed launch is
        expected: later passes look for its group, so no pass waits on it."""
        claim = self._claims.get(run.run_id)
        awaited = claim[1] if claim is not None and claim[0] == run.generation else None
        if awaited is None:
            self._kill_orphans(run, below=run.generation)
        executor = self.executor_of(run)
        group = executor.adopt(Path(run.root), run.run_id, run.generation)
        world = spec.resources.world_size
        if group is None and awaited is not None:
            if time.monotonic() < awaited:
                return None
            # No group within LAUNCH_CLAIM_SECONDS: the claim's holder died between claiming and
            # launching, so nothing runs and this controller launches instead.
        elif group is None and (
            self.store.start_attempt(run.run_id, run.generation, world) is Outcome.ALREADY_APPLIED
        ):
            # The attempt row is the claim to launch this generation, and another controller
            # holds it: its pid file follows the claim within milliseconds, so adopt that group
            # on a later pass.
            self._claims[run.run_id] = (run.generation, time.monotonic() + LAUNCH_CLAIM_SECONDS)
            return None
        self._claims.pop(run.run_id, None)
        engine = {"executor": executor.name, "engine_id": (run.allocation or {}).get("engine_id")}
        if group is not None:
            self.journal.record(run, EventType.WORKER_GROUP_ADOPTED, pid=group.pid, **engine)
        else:
            events = self.logs.of(run.run_id).events
            try:
                group = executor.launch(
                    spec=spec,
                    run_id=run.run_id,
                    generation=run.generation,
                    root=Path(run.root),
                    workdir=Path(run.workdir),
                    rank_manifest=[RankEntry.model_validate(e) for e in run.rank_manifest or []],
                    extra_env={
                        ENV_SKIP_STEPS: encode_skip_steps(skip_ranges(events)),
                        **resume_env(spec, run),
                        **rollback_env(run, events),
                        **(
                            pinned_devices(spec, events, self._hostname)
                            if executor.name == "local"
                            else {}
                        ),
                    },
                )
            except Exception as exc:
                self.store.end_attempt(
                    run.run_id, run.generation, None, "launch_failed", {"error": str(exc)}
                )
                raise
            self.journal.record(
                run,
                EventType.WORKER_GROUP_LAUNCHED,
                pid=group.pid,
                world_size=spec.resources.world_size,
                log=group.log_ref,
                **engine,
            )
        sup = Supervision(
            group=group,
            watchdog=Watchdog(
                spec.recovery, spec.resources.world_size, start_step=run.last_step or 0
            ),
            unread=functools.partial(self._unread, run.run_id, group.generation),
        )
        self._sup[run.run_id] = sup
        # Re-read the channel from the start so the new supervision sees every message of its
        # generation (ingestion is idempotent).
        self._ingest.pop(run.run_id, None)
        return sup

    def _record_placements(self, run: RunRecord, spec: JobSpec) -> None:
        """RANKS_PLACED for a multi-node generation once every rank started: where each rank
        really runs. Ingest has already corrected the run's rank manifest from the ranks'
        WORKER_STARTED (control/ingest.py, protocol.placed_entry): under c10d the rendezvous,
        not the launch order, gives each node its rank (executors/torchrun.py)."""
        if spec.resources.nodes < 2:
            return
        placed = self.store.get_run(run.run_id).rank_manifest or []
        self.journal.record(
            run,
            EventType.RANKS_PLACED,
            per_step=False,
            placements=[
                {
                    "rank": e["rank"],
                    "node": e["node"],
                    "host": e["host"],
                    "local_rank": e["local_rank"],
                }
                for e in placed
            ],
        )

    def _kill_orphans(self, run: RunRecord, below: int | None = None) -> None:
        """No two generations of one run ever run at once: SIGKILL every live process of a
        generation older than `below`, and return once they are gone (LaunchError if some
        survive). By default `below` is the newest launched generation: the current group or, for
        a just-cancelled run, the one finishing its stop-step save, which supervise() and
        _wind_down() look after. The executor finds the processes by their generation tag, so
        ranks whose supervisor and torchrun are gone are found too; pids reported earlier are not
        trusted, since they may name another process by now."""
        executor = self.executor_of(run)
        if below is None:
            launched = executor.launched_generations(Path(run.root), run.run_id)
            if not launched:
                return
            below = launched[-1]
        killed = executor.kill_generations_below(Path(run.root), run.run_id, below)
        for generation, pids in sorted(killed.items()):
            self.journal.record(
                run,
                EventType.ORPHAN_KILLED,
                op=f"{generation}-before-{below}",
                per_step=False,
                orphan_generation=generation,
                pids=sorted(pids),
            )

    # -- supervision ----------------------------------------------------------------------------

    def _unread(self, run_id: str, generation: int, rank: int) -> bool:
        """Whether the rank's channel file holds messages this controller has not read yet."""
        ingestor = self._ingest.get(run_id)
        if ingestor is None:
            return False
        return ingestor.reader.holds_unread(ingestor.paths.channel_file(generation, rank))

    def _ingest_and_watch(self, run: RunRecord, spec: JobSpec, until: float | None = None) -> None:
        """Ingest what the run's workers reported (past `until`, a monotonic time, the rest waits
        for the next pass; None reads it all) and feed the watchdog."""
        ingestor = self._ingest.setdefault(run.run_id, Ingestor(self.store, run))
        sup = self._sup.get(run.run_id)
        newest: list[ChannelMessage] = []
        losses = self.stops.history(run.run_id, spec)

        def observe(message: ChannelMessage, _outcome: Outcome | None) -> None:
            if losses is not None:
                note_loss(losses, message)
            self.alerts.observe(run, spec, message)
            if sup is None or message.generation < sup.group.generation:
                return
            sup.watchdog.beat(message.rank)
            if message.type == EventType.STEP_HEALTHY and message.step is not None:
                sup.watchdog.step(message.rank, message.step)
                if not newest or message.step > (newest[0].step or 0):
                    newest[:] = [message]
            elif message.type == EventType.CHECKPOINT_STAGED and message.checkpoint_id:
                sup.saves_in_flight.add(message.checkpoint_id)
            elif message.type in SAVE_ENDS and message.checkpoint_id:
                sup.saves_in_flight.discard(message.checkpoint_id)
            elif message.type == EventType.WORKER_STARTED:
                sup.started_ranks.add(message.rank)
                # A pid names a process on the rank's own host only (a Slurm node elsewhere).
                here = message.attributes.get("host", self._hostname) == self._hostname
                if isinstance(message.attributes.get("pid"), int) and here:
                    sup.worker_pids.add(message.attributes["pid"])
                    sup.rank_pids[message.rank] = message.attributes["pid"]

        ingestor.poll(observe, until=until)
        if newest:
            m = newest[0]
            self.recovery.note_progress(run, spec, m.generation, m.step or 0, m.time_unix_s)

    def _supervise(self, run: RunRecord, spec: JobSpec) -> None:
        sup = self._sup.get(run.run_id)
        if sup is None or sup.group.generation != run.generation:
            launched = self._launch(run, spec)
            if launched is None:
                return  # another controller's launch is expected: looked for again next pass
            sup = launched
            self._ingest_and_watch(run, spec)
        if run.state == RunState.STARTING and len(sup.started_ranks) >= spec.resources.world_size:
            self._record_placements(run, spec)
            self.journal.move(run, RunState.RUNNING)
            run = self.store.get_run(run.run_id)
        exit_code = self.executor_of(run).poll(sup.group)
        if exit_code is None:
            run = self._track_saves(run, sup)
            self._watch_live_group(run, spec, sup)
            return
        self._ingest_and_watch(run, spec)  # whatever the ranks wrote before exiting
        self._ingest[run.run_id].settle_with_fence()
        sup.saves_in_flight.clear()  # the group is gone: no save of it is in flight any more
        run = self._track_saves(self.store.get_run(run.run_id), sup)
        ack = self.logs.of(run.run_id).stop_acks.get(run.generation)
        reason = ack.attributes.get("reason") if ack else sup.stop_reason
        if reason in ENDINGS:
            sup.end_attempt(self.store, run.run_id, exit_code, None)
            self._sup.pop(run.run_id, None)
            self.stops.end(run, reason)
        elif reason == "rollback":
            self.recovery.roll_back(run, spec, sup, exit_code)
            self._sup.pop(run.run_id, None)
        elif reason == PAUSE_REASON and not (ack is None and exit_code == 0):
            # (A group that exits 0 without acknowledging finished its last step first.)
            if self.pauses.paused(run, sup, exit_code, ack is not None):
                self._sup.pop(run.run_id, None)
        elif exit_code == 0 and reason != "preemption":
            sup.end_attempt(self.store, run.run_id, exit_code, None)
            self._sup.pop(run.run_id, None)
            if run.state == RunState.STARTING:
                self.journal.move(run, RunState.RUNNING)
                run = self.store.get_run(run.run_id)
            self.journal.finish(
                run,
                RunState.SUCCEEDED,
                TerminalReason.COMPLETED,
                f"the worker group finished at step {run.last_step}",
            )
        else:
            self.recovery.recover(run, spec, sup, exit_code, None)
            self._sup.pop(run.run_id, None)

    def _track_saves(self, run: RunRecord, sup: Supervision) -> RunRecord:
        """RUNNING <-> CHECKPOINTING as the group's saves start and end (ARCHITECTURE.md): a
        user sees that steps paused for a save, and nothing preempts a run mid-save. A save that
        staged and committed between two passes is never seen in flight, and needs no state."""
        if run.state == RunState.RUNNING and sup.saves_in_flight:
            target = RunState.CHECKPOINTING
        elif run.state == RunState.CHECKPOINTING and not sup.saves_in_flight:
            target = RunState.RUNNING
        else:
            return run
        self.journal.move(run, target)
        return self.store.get_run(run.run_id)

    def _watch_live_group(self, run: RunRecord, spec: JobSpec, sup: Supervision) -> None:
        self.stops.asked_elsewhere(run, spec, sup)
        if sup.stop_deadline is not None:
            if self.stops.grace_over(run, spec, sup):
                self.executor_of(run).stop(sup.group, 0.0, sorted(sup.worker_pids))
            return
        verdict = sup.watch()
        if verdict is not None:
            self.recovery.recover(run, spec, sup, None, verdict)
            self._sup.pop(run.run_id, None)
            return
        self.stops.check(run, spec, sup)
        for firing in self.alerts.check(run, spec):
            if firing.action in ("stop", "rollback", PAUSE_REASON):
                self.stops.on_alert(run, spec, sup, firing.action)

    # -- ending ---------------------------------------------------------------------------------

    def _wind_down(self, run: RunRecord, spec: JobSpec) -> bool:
        """A terminal run (e.g. cancelled from another process) whose group may still be saving:
        give it the grace period, then kill it, then give its allocation back (a cancel while
        the request is still queued releases it at once). True once nothing of the run is
        left."""
        executor = self.executor_of(run)
        sup = self._sup.get(run.run_id)
        if sup is None:
            gens = executor.launched_generations(Path(run.root), run.run_id)
            group = executor.adopt(Path(run.root), run.run_id, gens[-1]) if gens else None
            if group is None or executor.poll(group) is not None:
                if not self.allocations.release(run, executor, f"the run is {run.state}"):
                    return False
                self.journal.finished(run)
                return True
            sup = Supervision(
                group=group,
                watchdog=Watchdog(spec.recovery, spec.resources.world_size),
                unread=functools.partial(self._unread, run.run_id, group.generation),
            )
            self._sup[run.run_id] = sup
        if sup.stop_deadline is None:
            sup.stop_by(spec.recovery.stop_grace_seconds)
        code = executor.poll(sup.group)
        if code is None and time.monotonic() > (sup.stop_deadline or 0):
            self.stops.grace_expired(run, spec, sup.group.generation, sup.stop_reason or "cancel")
            pids = sup.worker_pids | self._rank_pids(run.run_id, sup.group.generation)
            code = executor.stop(sup.group, 0.0, sorted(pids))
        if code is None:
            return False
        self._ingest_and_watch(run, spec)
        sup.end_attempt(self.store, run.run_id, code, None)
        self._sup.pop(run.run_id, None)
        if not self.allocations.release(run, executor, f"the run is {run.state}"):
            return False
        self.journal.finished(run, exit_code=code)
        return True

    # -- store outages --------------------------------------------------------------------------

    def _riding(self, work: Callable[[], T], run_ids: Collection[str] = ()) -> T:
        """`work()`, riding out a store outage; once the store is back, the outage is recorded in
        the log of every run in `run_ids` (read then) before anything else is written."""
        return self.outage.call(work, lambda outage: self._record_outage(run_ids, outage))

    def _record_outage(self, run_ids: Collection[str], outage: Outage) -> None:
        for run_id in sorted(run_ids):
            if not self.leases.holds(run_id):
                continue  # another controller drives it, and records its own view
            try:
                with self.leases.fenced(run_id):
                    run = self.store.get_run(run_id)
                    if RunState(run.state) in TERMINAL and self.logs.of(run_id).finished:
                        continue  # RUN_FINISHED stays the last event of a finished run's log
                    self.journal.store_unavailable(run, outage)
            except LeaseLostError as exc:
                self._drop(run_id, exc)

    # -- leases (leasing.py) --------------------------------------------------------------------

    def _drive_pass(self, run_id: str) -> bool:
        """`drive`'s pass: renew or take the run's lease and reconcile under it, or stand by.
        True once the run is finished (by this controller or the one that holds it)."""
        for lost in self.leases.renew():
            self._drop(lost)
        if not self.leases.holds(run_id):
            lease, now = self.store.leases.get(run_id)
            if not self._take(run_id, lease, now):
                self._emit(run_id)
                run = self.store.get_run(run_id)
                return RunState(run.state) is RunState.PAUSED or (
                    RunState(run.state) in TERMINAL and self.logs.of(run_id).finished
                )
        return self._leased_pass(run_id) is PassOutcome.FINISHED

    def _take(self, run_id: str, lease: Lease | None, now_unix_s: float) -> bool:
        """Take the run's lease unless another live controller holds it (then say so, once per
        holder, and stand by). A takeover is recorded in the run's log."""
        result = self.leases.take_if_free(run_id, lease, now_unix_s)
        if result is None or result.outcome is LeaseOutcome.HELD:
            held = result.lease if result is not None else lease
            assert held is not None
            if self._standing_by.get(run_id) != (held.holder, held.epoch):
                self._standing_by[run_id] = (held.holder, held.epoch)
                log.warning(
                    "run %s is %s; this controller stands by and takes it over if that lease "
                    "is handed back or runs out",
                    run_id,
                    describe_lease(held, result.db_now_unix_s if result else now_unix_s),
                )
            return False
        self._standing_by.pop(run_id, None)
        if result.outcome is LeaseOutcome.TAKEN_OVER:
            reason, uncontrolled_seconds = _takeover_reason(result)
            log.warning(
                "took run %s over from controller %s (%s; %.1f s without a controller), epoch %d",
                run_id,
                result.previous.holder,
                reason,
                uncontrolled_seconds,
                result.lease.epoch,
            )
            self._takeovers[run_id] = result  # recorded by the next pass, under the new lease
        return self.leases.holds(run_id)

    def _record_takeover(self, result: LeaseResult) -> None:
        """CONTROLLER_TAKEOVER: who held the run, why it was free, how long it went without a
        controller (database clock). The pass then adopts the run where its records say."""
        run = self.store.get_run(result.lease.run_id)
        if RunState(run.state) in TERMINAL and self.logs.of(run.run_id).finished:
            return  # RUN_FINISHED stays the last event of a finished run's log
        reason, uncontrolled_seconds = _takeover_reason(result)
        self.journal.record(
            run,
            EventType.CONTROLLER_TAKEOVER,
            op=f"epoch{result.lease.epoch}",
            per_step=False,
            old_holder=result.previous.holder,
            new_holder=result.lease.holder,
            epoch=result.lease.epoch,
            reason=reason,
            uncontrolled_seconds=round(uncontrolled_seconds, 3),
            old_lease_seconds=result.previous.lease_seconds,
        )

    def _leased_pass(self, run_id: str) -> PassOutcome:
        """One reconcile pass under the run's lease. A write or act the lease no longer allows
        is refused before it happens (LeaseLostError): the run is dropped, nothing of the pass
        is written after that, and its workers are left to the lease's holder."""
        for lost in self.leases.renew_if_due():
            self._drop(lost)
        if not self.leases.holds(run_id):
            return PassOutcome.LOST
        try:
            with self.leases.fenced(run_id):
                if run_id in self._takeovers:
                    self._record_takeover(self._takeovers[run_id])
                    del self._takeovers[run_id]
                done = self.reconcile(run_id)
        except LeaseLostError as exc:
            self._drop(run_id, exc)
            return PassOutcome.LOST
        if not done:
            return PassOutcome.PASSED
        self.leases.release([run_id])
        return PassOutcome.FINISHED

    def _drop(self, run_id: str, why: Exception | None = None) -> None:
        """Forget what this controller knew of a run whose lease it lost: whoever drives it
        next (this one included, after a new take) starts from the records."""
        log.warning("%s", why or f"controller {self.leases.holder} lost the lease of run {run_id}")
        self.leases.forget(run_id)
        self._takeovers.pop(run_id, None)
        self._sup.pop(run_id, None)
        self._ingest.pop(run_id, None)
        self._orphans_checked.discard(run_id)
        self._forget(run_id)

    def _end_admission(self) -> None:
        """Hand the admission lock back between sweeps: other controllers' queued runs are
        decided by their own passes (control/admission.py)."""
        if self.admission is not None:
            self.admission.release()

    def _release_leases(self) -> None:
        """Hand back every lease held (and the admission lock), so other controllers take the
        runs at once; if the store cannot be reached, they run out by themselves."""
        try:
            self._end_admission()
            self.leases.release()
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning("could not hand the leases back (%s); they run out by themselves", exc)

    # -- helpers --------------------------------------------------------------------------------

    def _spec_of(self, run: RunRecord) -> JobSpec:
        cached = self._specs.get(run.run_id)
        if cached is None or cached[0] != run.spec_hash:
            cached = (run.spec_hash, spec_from_mapping(run.spec, f"run {run.run_id}"))
            self._specs[run.run_id] = cached
        return cached[1]

    def _forget(self, run_id: str) -> None:
        """Drop what this controller cached of a run that is done (a daemon drives many)."""
        self._specs.pop(run_id, None)
        self.stops.forget(run_id)
        self._claims.pop(run_id, None)
        self.logs.forget(run_id)

    def _rank_pids(self, run_id: str, generation: int) -> set[int]:
        return set(self.logs.of(run_id).rank_pids.get(generation, set()))

    def _emit(self, run_id: str) -> None:
        if self.on_event is None:
            return
        for event in self.store.events(run_id, after_seq=self._seen_seq.get(run_id, 0)):
            self._seen_seq[run_id] = event.seq
            self.on_event(event)


def _takeover_reason(result: LeaseResult) -> tuple[str, float]:
    """Why a taken lease was free (released, expired, holder_gone) and how long the run had gone
    without a controller: since the old holder's release or its last renewal (database clock)."""
    old, now = result.previous, result.db_now_unix_s
    if old.released:
        return "released", now - old.expires_unix_s
    reason = "expired" if old.expires_unix_s <= now else "holder_gone"
    return reason, now - (old.renewed_unix_s or old.expires_unix_s)
