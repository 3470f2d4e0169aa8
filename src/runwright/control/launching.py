"""Starting a generation's worker group exactly once, or adopting the one already started, and
never while a process of an older generation of the run is alive on the node.

A launch is claimed by the attempt row of its generation (`Store.start_attempt`): of two
controllers passing over the same run at once, one launches and the other looks for the winner's
group on later passes (its pid file follows the claim within milliseconds), for at most
LAUNCH_CLAIM_SECONDS, after which it concludes the winner died between claiming and launching
and launches itself. The environment a launch hands the group says where to resume and what to
skip (control/resume.py, recovery.skip_ranges) and which devices a local gang is pinned to
(gangs.py).
"""

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runwright.control import credentials
from runwright.control.executors.protocol import Executor, GroupHandle
from runwright.control.gangs import pinned_devices
from runwright.control.journal import Journal
from runwright.control.operator import skip_shards_env
from runwright.control.recovery import skip_ranges
from runwright.control.resume import resume_env, rollback_env
from runwright.control.runlog import RunLogs
from runwright.errors import LaunchError
from runwright.events import EventType
from runwright.protocol import ENV_SKIP_STEPS, RankEntry, encode_skip_steps
from runwright.spec import JobSpec
from runwright.store import Outcome, RunRecord, Store

log = logging.getLogger(__name__)
STANDBY_KEYS = ("root", "run_id", "generation", "rank_manifest", "extra_env")
"""What activating a warm standby takes of a launch's arguments."""
LAUNCH_CLAIM_SECONDS = 30.0
"""How long a controller that lost the claim to launch a generation looks for the winner's group
(once a pass, reconciling its other runs meanwhile) before it concludes the winner died first and
launches itself."""


class GroupLauncher:
    """The controller's launches (module docstring)."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        logs: RunLogs,
        executor_of: Callable[[RunRecord], Executor],
        hostname: str,
    ) -> None:
        self.store = store
        self.journal = journal
        self.logs = logs
        self.executor_of = executor_of
        self.hostname = hostname
        self._claims: dict[str, tuple[int, float]] = {}
        """run id -> (generation, monotonic deadline) while another controller's claimed launch
        of that generation is expected."""

    def forget(self, run_id: str) -> None:
        self._claims.pop(run_id, None)

    def launch(self, run: RunRecord, spec: JobSpec) -> GroupHandle | None:
        """Start the current generation's group once (its pid file marks the launch), or adopt
        the one an earlier controller started; either way only once no process of an older
        generation is left on this node. None while another controller's claimed launch is
        expected: later passes look for its group, so no pass waits on it."""
        claim = self._claims.get(run.run_id)
        awaited = claim[1] if claim is not None and claim[0] == run.generation else None
        if awaited is None:
            self.kill_orphans(run, below=run.generation)
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
            return group
        launch = self.launch_args(run, spec, executor)
        warm = None
        try:
            launch["extra_env"].update(self.issue_credentials(run))
            activate = getattr(executor, "activate_standby", None)
            if spec.recovery.warm_standby and activate is not None:
                warm = activate(**{k: launch[k] for k in STANDBY_KEYS})
                if isinstance(warm, str):
                    self._discarded(run, [run.generation], f"not launched: {warm}")
                    warm = None
            group = warm if warm is not None else executor.launch(**launch)
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
            **({"warm": True, "ready_ranks": warm.ready_ranks} if warm is not None else {}),
        )
        return group

    def launch_args(self, run: RunRecord, spec: JobSpec, executor: Executor) -> dict[str, Any]:
        """`Executor.launch`'s arguments for the run's current generation: where it starts
        from and what it skips follow from the run's events so far."""
        events = self.logs.of(run.run_id).events
        return {
            "spec": spec,
            "run_id": run.run_id,
            "generation": run.generation,
            "root": Path(run.root),
            "workdir": Path(run.workdir),
            "rank_manifest": [RankEntry.model_validate(e) for e in run.rank_manifest or []],
            "extra_env": {
                ENV_SKIP_STEPS: encode_skip_steps(skip_ranges(events)),
                **resume_env(spec, run),
                **rollback_env(run, events),
                **skip_shards_env(events),
                **(pinned_devices(spec, events, self.hostname) if executor.name == "local" else {}),
            },
        }

    def issue_credentials(self, run: RunRecord) -> dict[str, str]:
        """The current generation's own object-store credentials (control/credentials.py), as
        launch environment; older generations' are revoked first (their processes are gone:
        `launch` killed them). Empty when no issuer is configured or the run uses no `s3://`.
        A local dataset's files are made read-only first, whatever the issuer."""
        dataset = (run.spec.get("data") or {}).get("dataset")
        if dataset and "://" not in dataset:
            dataset = str(Path(run.workdir) / dataset)  # relative to the submit folder
        credentials.read_only_dataset(dataset)
        issuer = credentials.configured_issuer()
        if issuer is None:
            return {}
        self.revoke_credentials(run, "a newer generation launches", below=run.generation)
        scope = credentials.worker_scope(run.spec, run.run_id, run.root, run.generation)
        if scope.empty:
            return {}
        issued = issuer.issue(scope, credentials.ttl_seconds())
        self.journal.record(
            run,
            EventType.CREDENTIALS_ISSUED,
            op=f"credentials-{issued.access_key_id}",
            per_step=False,
            issuer=issuer.name,
            user=issued.user,
            access_key_id=issued.access_key_id,
            expires_unix_s=issued.expires_unix_s,
            read_prefixes=list(scope.read_prefixes),
            write_prefixes=list(scope.write_prefixes),
        )
        return issued.env()

    def revoke_credentials(self, run: RunRecord, why: str, below: int | None = None) -> bool:
        """Revoke the run's live worker credentials: those of generations older than `below`,
        or all of them; and any past its expiry. False when one could not be revoked now (the
        issuer's service did not answer): it stays live in the events and a later pass tries
        again."""
        issuer = credentials.configured_issuer()
        if issuer is None:
            return True
        revoked_all = True
        kinds = (EventType.CREDENTIALS_ISSUED, EventType.CREDENTIALS_REVOKED)
        live = credentials.live_credentials(self.store.events(run.run_id, types=kinds))
        now = time.time()
        for generation, issued in sorted(live.items()):
            expired = float(issued.get("expires_unix_s", now)) < now
            if below is not None and generation >= below and not expired:
                continue
            try:
                issuer.revoke(str(issued["user"]), str(issued["access_key_id"]))
            except credentials.CredentialError as exc:
                log.warning("run %s: %s; tried again on a later pass", run.run_id, exc)
                revoked_all = False
                continue
            self.journal.record(
                run.model_copy(update={"generation": generation}),
                EventType.CREDENTIALS_REVOKED,
                op=f"revoke{generation}",
                per_step=False,
                user=issued["user"],
                access_key_id=issued["access_key_id"],
                reason="expired" if expired else why,
            )
        return revoked_all

    def prepare_standby(self, run: RunRecord, spec: JobSpec) -> None:
        """Start the next generation's warm standby beside the group that trains (executors/
        standby.py), when the spec asks for one and the executor can."""
        executor = self.executor_of(run)
        prepare = getattr(executor, "prepare_standby", None)
        if prepare is None:
            return
        launch = self.launch_args(run, spec, executor)
        launch["generation"] = run.generation + 1
        try:
            pid = prepare(**launch)
        except (LaunchError, OSError) as exc:
            # A standby is an optimisation: the run goes on, and a failure restarts cold.
            log.warning("run %s: no warm standby for generation %d: %s", run.run_id,
                        run.generation + 1, exc)  # fmt: skip
            return
        if pid is not None:
            self.journal.record(
                run,
                EventType.STANDBY_PREPARED,
                op=f"standby{run.generation + 1}",
                per_step=False,
                standby_generation=run.generation + 1,
                pid=pid,
            )

    def discard_standbys(self, run: RunRecord, why: str) -> None:
        """Kill the run's warm standbys: it ended, paused or went back to the queue."""
        discard = getattr(self.executor_of(run), "discard_standbys", None)
        gone = discard(Path(run.root), run.run_id) if discard is not None else []
        if gone:
            self._discarded(run, gone, why)

    def _discarded(self, run: RunRecord, generations: list[int], why: str) -> None:
        self.journal.record(
            run,
            EventType.STANDBY_DISCARDED,
            op=f"discard{generations[-1]}",
            per_step=False,
            generations=generations,
            reason=why,
        )

    def record_placements(self, run: RunRecord, spec: JobSpec) -> None:
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

    def kill_orphans(self, run: RunRecord, below: int | None = None) -> None:
        """No two generations of one run ever run at once: SIGKILL every live process of a
        generation older than `below`, and return once they are gone (LaunchError if some
        survive). By default `below` is the newest launched generation: the current group or, for
        a just-cancelled run, the one finishing its stop-step save, which the controller's
        supervision and wind-down look after. The executor finds the processes by their
        generation tag, so ranks whose supervisor and torchrun are gone are found too; pids
        reported earlier are not trusted, since they may name another process by now."""
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
