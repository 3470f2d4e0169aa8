"""The one event vocabulary: every type of event a run's log can hold, and the event records.

Both sides of the seam write these: the controller (state moves, recovery, budgets), the workers
through the file channel (`runwright.init()`, the step loop, the checkpointer, the loader), and
the store keeps them append-only. observe/, govern/ and the controller's recovery read them by
these names and nothing else, so a type is added here or nowhere. `EventType` is a `StrEnum`: a
member equals its name as a string, which is how events are stored and sent.

The bottom of this module is the process's event hook: `runwright.init()` attaches the run
context as the emitter, and library code below the runtime (the data loader) reports through
`emit()` without knowing whether a run is there (outside a run it is a no-op). It is the one
piece of process-wide state, as a logging handler or an OpenTelemetry provider is.

This module imports only `runwright.records`, so every layer may use it.
"""

import threading
import weakref
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol

from pydantic import Field

from runwright.records import Record


class EventType(StrEnum):
    """What happened. Grouped by who writes it; attributes are named where readers depend on
    them."""

    # -- the controller: submit, placement, launch ----------------------------------------------
    JOB_SUBMITTED = "JOB_SUBMITTED"
    """A spec was accepted into a new run (spec_hash, idempotency_key)."""
    PREFLIGHT_CHECKED = "PREFLIGHT_CHECKED"
    """The controller's preflight of a new run before it is queued (ok, checks: one `{name,
    verdict, evidence, fix}` each, govern/preflight_checks.py); a failed check ends the run
    FAILED_PERMANENT with it as the reason, a warning is recorded here."""
    RUN_ADMITTED = "RUN_ADMITTED"
    """The scheduler admitted the run's gang onto the controller's inventory (request, policy,
    position in the queue, placement: one `{node, devices}` per node, borrowed); the run moves
    to ALLOCATING. Only with an inventory configured (control/admission.py)."""
    ADMISSION_PENDING = "ADMISSION_PENDING"
    """A queued run waits for admission, for a reason that changed since the last such event
    (request, code: sched/reasons.py's, reason in words, policy)."""
    ALLOCATION_REQUESTED = "ALLOCATION_REQUESTED"
    """The run asked its executor for its gang (request: the how-manieth time the run entered
    ALLOCATING, executor, pool, engine_id such as the Slurm job id, exclude_hosts)."""
    ALLOCATION_PENDING = "ALLOCATION_PENDING"
    """The request waits, for a reason that changed since the last such event (request, reason
    in words, code: the engine's own such as Slurm's `Resources`, engine_id)."""
    ALLOCATION_READY = "ALLOCATION_READY"
    """Resources were placed (executor, request, engine_id, hosts in node order, world_size,
    device_type, pool)."""
    ALLOCATION_FAILED = "ALLOCATION_FAILED"
    """The request ended without (or lost) its nodes (request, reason, code, engine_id,
    permanent: the run fails instead of queueing again, lost_hosts)."""
    ALLOCATION_RELEASED = "ALLOCATION_RELEASED"
    """The run gave its allocation back: it ended, was cancelled, or requeues (request,
    engine_id, reason)."""
    RESOURCES_RELEASED = "RESOURCES_RELEASED"
    """The run ended and the cleaner released what its records say it still held (control/
    cleaner.py): released (kind -> count), left (kind what -> why it could not be)."""
    RANKS_PLACED = "RANKS_PLACED"
    """Every rank of a multi-node generation started; where the rendezvous placed them
    (placements: one `{rank, node, host, local_rank}` per rank: node is the executor's index of
    the node whose agent started the rank, host the allocation's name for it), as the run's rank
    manifest now says."""
    WORKER_GROUP_LAUNCHED = "WORKER_GROUP_LAUNCHED"
    """An executor started a generation's worker group (world_size, pid; warm and ready_ranks
    when it activated a warm standby instead of starting processes)."""
    STANDBY_PREPARED = "STANDBY_PREPARED"
    """The next generation's warm standby was started beside the group that trains
    (standby_generation, pid)."""
    STANDBY_DISCARDED = "STANDBY_DISCARDED"
    """Warm standbys that will not be launched were killed (generations, reason)."""
    CREDENTIALS_ISSUED = "CREDENTIALS_ISSUED"
    """The controller issued a generation its own object-store credentials before its launch
    (issuer, user, access_key_id, expires_unix_s, read_prefixes, write_prefixes; never the
    secret): control/credentials.py."""
    CREDENTIALS_REVOKED = "CREDENTIALS_REVOKED"
    """A generation's object-store credentials were revoked (user, access_key_id, reason)."""
    WORKER_GROUP_ADOPTED = "WORKER_GROUP_ADOPTED"
    """A restarted controller found a generation still running and took it over (pid)."""
    ORPHAN_KILLED = "ORPHAN_KILLED"
    """A process of an older generation was found alive and killed before a launch."""
    STATE_CHANGED = "STATE_CHANGED"
    """The run moved (from_state, to_state, reason, detail; actor when a person moved it: a
    hold, a resume); written in the move's transaction."""
    RUN_FINISHED = "RUN_FINISHED"
    """The last event of a run's log (state, reason, last_step)."""
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    """The store could not be reached for a while (outage_seconds, attempts, error)."""
    CONTROLLER_TAKEOVER = "CONTROLLER_TAKEOVER"
    """A controller took over a run another controller had driven (old_holder, new_holder,
    epoch: the new lease's fencing epoch, reason: released | expired | holder_gone,
    uncontrolled_seconds: from the old holder's last renewal or its release to the takeover, on
    the database's clock, old_lease_seconds)."""

    # -- the controller: recovery, stops and budgets ---------------------------------------------
    FAILURE_CLASSIFIED = "FAILURE_CLASSIFIED"
    """A generation ended badly; its class (failure_class), evidence and the policy's decision;
    `node` and `host` when the failure is pinned on a node (a lost one); `attribution` when a
    live group's hang was attributed from the ranks' collective dumps (control/attribution.py:
    kind hang or desync, sentence, culprits, facts, collect_seconds)."""
    DIAGNOSTICS_WRITTEN = "DIAGNOSTICS_WRITTEN"
    """A diagnostics bundle was written for a failure (path)."""
    RECOVERY_STARTED = "RECOVERY_STARTED"
    """A new generation is being started after a failure."""
    MEMBERSHIP_CHANGED = "MEMBERSHIP_CHANGED"
    """An elastic run's next generation runs at another size (control/membership.py): change
    (`shrink` after lost nodes, `grow` when the executor has them again), reason, failure_class,
    lost_hosts, from_generation, to_generation, and the layouts `old` and `new` (nodes,
    world_size, dp, micro_batch_size, grad_accumulation_steps, global_batch_samples:
    spec/elastic.py's Layout; the global batch is the same in both)."""
    RECOVERY_SUCCEEDED = "RECOVERY_SUCCEEDED"
    """The new generation made progress past its restored step (the recovery is proven)."""
    RECOVERY_VERIFIED = "RECOVERY_VERIFIED"
    """A restarted generation of a bitwise run reproduced, bit for bit, every (rank, step) report
    of the steps it replayed (control/replay_check.py): verified_generation, restored_step,
    replay_through_step, replayed_steps (0 with nothing_replayed: the failed generation had not
    passed the restored step), compared, unchecked, complete (false: it ended mid-replay)."""
    RECOVERY_DIVERGED = "RECOVERY_DIVERGED"
    """A replayed step differs from what an earlier generation reported: the first such step and
    rank, loss against earlier_loss (of earlier_generation), restored_step; the default
    `recovery_diverged` alert fires."""
    RECOVERY_UNVERIFIED = "RECOVERY_UNVERIFIED"
    """A restarted generation's replay could not be compared (reason: the world size changed,
    the steps were skipped on purpose by a rollback, or no earlier report was kept)."""
    STOP_REQUESTED = "STOP_REQUESTED"
    """A generation was asked to stop at its next step boundary (reason: cancel, pause,
    preemption, ...; save; actor and detail when a person asked)."""
    OPERATOR_ACTION_REQUESTED = "OPERATOR_ACTION_REQUESTED"
    """A person asked for an operator action on a run (control/operator.py; action: rollback,
    skip_shard, move_pool, stop_with_save; actor, detail: their reason, stopping_generation,
    and the action's target: checkpoint_id and step, shard, pool and from_pool)."""
    OPERATOR_ACTION_APPLIED = "OPERATOR_ACTION_APPLIED"
    """The controller applied a requested operator action at a step boundary (action, actor,
    detail: the reason, effect in words, request: the OPERATOR_ACTION_REQUESTED's event id, and
    per action: restored_step, checkpoint_id, abandoned; shard; pool, from_pool, spec_hash,
    from_spec_hash; saved_step)."""
    STOP_GRACE_EXPIRED = "STOP_GRACE_EXPIRED"
    """A generation asked to stop had not stopped when its grace ran out, so it was killed
    (reason: why it was asked, grace_seconds); a preemption victim that could not save in time
    is recorded so."""
    STOP_CRITERION_MET = "STOP_CRITERION_MET"
    """A stop criterion of the spec was met (criterion: its index in governance.stop_criteria,
    kind, evidence); the run stops at its next step boundary with a save and ends CANCELLED
    with STOP_CRITERION (control/criteria.py)."""
    BUDGET_WARNING = "BUDGET_WARNING"
    """A budget crossed its warning share."""
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    """A budget ran out; the run is stopped with a final checkpoint."""
    ALERT_FIRED = "ALERT_FIRED"
    """An alert rule's condition held (control/alerts.py): alert_id (the rule and what it is
    about, e.g. `straggler:rank3`; one open alert per id), rule, severity (info, warning,
    critical), owner, summary in words, evidence (the figures), action (none, notify, pause,
    stop, rollback) and action_result, exit (the condition that clears it); rank and host when
    the alert is about one."""
    ALERT_CLEARED = "ALERT_CLEARED"
    """An open alert's exit condition held, or its run ended (alert_id, rule, reason,
    open_seconds)."""
    DATA_WITHDRAWN = "DATA_WITHDRAWN"
    """A dataset the run trains on was found withdrawn or deleted (control/withdrawal.py):
    dataset_id, standing, policy_version, reason, by, and on_withdrawal (the spec's `stop` or
    `continue`); once per run and dataset, with an ALERT_FIRED of kind data_withdrawn."""
    STALE_WRITE_REJECTED = "STALE_WRITE_REJECTED"
    """A write from a fenced-off generation was refused (by the store or the checkpoint fence)."""
    FAULT_INJECTED = "FAULT_INJECTED"
    """A drill or the demo injected a fault on purpose, at `step` (rank 0's newest healthy one):
    `runwright drill` records fault, detail (what it did, in words), rank and pids; the demo
    signal, rank and pid."""
    CHANNEL_UNREADABLE = "CHANNEL_UNREADABLE"
    """A worker wrote a message of a newer protocol than the controller's; the controller stops
    reading that channel file there and says so (path, error)."""

    # -- governance: the model registry (govern/release.py) --------------------------------------
    RELEASE_CHECKED = "RELEASE_CHECKED"
    """The gates of a release of one of the run's checkpoints ran (release_id, name, version,
    status: BLOCKED or AWAITING_APPROVAL, failed: the failed gates' names, requested_by,
    checkpoint_id and step); written into the run's log after the fact, by whoever asked."""
    RELEASE_DECIDED = "RELEASE_DECIDED"
    """A person decided a release (release_id, name, version, status: RELEASED, REJECTED, or
    BLOCKED when the export had changed since its gates, by, note)."""

    # -- a worker: runwright.init(), the step loop and the context's close ----------------------
    WORKER_STARTED = "WORKER_STARTED"
    """A rank joined its generation (pid, host, local_rank, node, group_rank, python/torch
    versions, platform). `node` is the node whose agent started it: the controller corrects the
    run's rank manifest with it (c10d rendezvous, not launch order, assigns node ranks)."""
    RESTORED = "RESTORED"
    """A rank's state as it starts training: the step it resumes after (0 for a fresh start),
    checkpoint_id and mode. Sent by the checkpointer's restore; recovery's lost steps, the
    accounting's replayed tokens and the report's lineage read it."""
    STEP_HEALTHY = "STEP_HEALTHY"
    """Optimizer step `step` completed on a rank (loss, tokens, phase seconds, samples). The
    channel carries one per rank; the store one per step, its ranks' figures folded into it
    (`ranks`, `columns`: observe/rank_steps.py, which unfolds them)."""
    STOP_ACKNOWLEDGED = "STOP_ACKNOWLEDGED"
    """The group agreed to stop at this boundary (reason: cancel, preemption, budget,
    controller)."""
    NAN_DETECTED = "NAN_DETECTED"
    """The step guard found a non-finite loss or gradient norm."""
    LOSS_SPIKE = "LOSS_SPIKE"
    """The step guard found a loss above its spike factor times the running mean; the step did
    not commit and recovery rolls back past it (training.loss_spike.action: rollback; loss,
    mean, threshold_ratio, window_steps, action)."""
    LOSS_SPIKE_SKIPPED = "LOSS_SPIKE_SKIPPED"
    """The loss-spike guard dropped step `step`'s update; its batch counts as consumed
    (train/spike.py; rank 0, once per generation and step): loss, mean of the trailing window,
    threshold_ratio, window_steps, action (skip, or pause: the run then stops to PAUSED)."""
    EVALUATED = "EVALUATED"
    """The model was evaluated on the dataset's eval split after step `step` (eval_loss, tokens,
    sequences, checkpoint_id: the checkpoint saved at that step, if one was; rank 0, once per
    generation and step; train/evaluate.py)."""
    TRAINING_COMPLETE = "TRAINING_COMPLETE"
    """The last planned step finished (parameter_digests: sha256 per parameter, tokens_seen).
    Sent by the context's close on rank 0 when the run reached its last step unstopped."""
    RANK_PEAK_MEMORY = "RANK_PEAK_MEMORY"
    """A rank's peak memory and software at its close (runtime/peak_memory.py; once per rank of
    a generation that ends in order, finished or asked to stop): rank, peak_host_bytes (the
    process's max RSS), peak_device_bytes (the allocator's peak on an accelerator, else null),
    device_type, versions (python, torch, cuda, nccl, driver when present)."""
    REPORT_HASHED = "REPORT_HASHED"
    """A run's report was served with this hash (report_sha256: govern/performance.py); the
    run's record thus names every report given out of it."""
    STEPS_CONTAMINATED = "STEPS_CONTAMINATED"
    """An operator marked steps first_step..last_step of the run contaminated (reason, by): they
    are left out of comparisons and stop criteria (control/contamination.py)."""

    COLLECTIVE_CHECKED = "COLLECTIVE_CHECKED"
    """The collective preflight right after the process group formed (runtime/collectives.py):
    ok, backend, world_size, barrier_seconds, all_reduce_seconds (rank 0); or ok false with the
    error and, from rank 0, missing_ranks: those that did not reach the barrier."""

    # -- a worker: the data loader ---------------------------------------------------------------
    DATA_STAGE_READY = "DATA_STAGE_READY"
    """The loader opened its dataset (dataset_id, tokenizer_hash, algorithm versions)."""
    MIXTURE_WINDOW = "MIXTURE_WINDOW"
    """What the loader handed out in the last window of steps (data/read/drift.py; rank 0,
    every 50 steps by default): first_step, last_step, unit, draws and units per source, shares
    against targets, max_deviation, loss_token_share, length_buckets of packed pieces; baseline
    and baseline_deviation: the shares against the build's (data/read/baseline.py)."""
    MIXTURE_ACTUAL = "MIXTURE_ACTUAL"
    """What the loader drew per source against the recipe's targets (actual, actual_units,
    targets, unit); sent when the loader or the context closes."""
    MIXTURE_STAGE_STARTED = "MIXTURE_STAGE_STARTED"
    """A staged mixture (`staged-quota-v1`, data/read/stages.py) began a stage: `step` is the
    stage's first training step; stage (name), stage_index, previous (name), start_step (steps
    consumed before it), unit, targets (its weights normalised). Rank 0, when the loader hands
    out that step's batch (again after a restart that replays it)."""
    DATA_SOURCE_CHANGED = "DATA_SOURCE_CHANGED"
    """A new dataset version was taken when the loader restored a cursor of the old one,
    declared (data.source_growth; data/read/growth.py) or by a coverage-only resume: `step` is
    the steps consumed at the change; from_dataset_id, to_dataset_id, mapping (new-epoch-v1 or
    coverage-v1), from_epoch, dropped_residual (the split document not finished, or None).
    Rank 0."""
    DATA_SHARD_QUARANTINED = "DATA_SHARD_QUARANTINED"
    """Every rank agreed to leave a corrupt or missing train shard out (data.on_corrupt_shard:
    skip; data/read/quarantine.py): dataset_id, shard, source, reason (corrupt, missing),
    problems (what rank 0 found wrong), from_step (steps consumed before it; `step` is the
    first step trained without it), shard_documents and shard_tokens (the manifest's), and
    tokens_lost at the decision (the rest of a document cut by the step boundary). What it
    loses after that is in each STEP_HEALTHY's data_lost. Rank 0, once per generation."""

    # -- a worker: the checkpointer ---------------------------------------------------------------
    CHECKPOINT_STAGED = "CHECKPOINT_STAGED"
    """A save began staging its snapshot."""
    CHECKPOINT_COMMITTED = "CHECKPOINT_COMMITTED"
    """A checkpoint was published (folder, bytes, manifest_sha256, stall_seconds,
    persist_seconds and per-stage timings)."""
    CHECKPOINT_SKIPPED = "CHECKPOINT_SKIPPED"
    """A due save was skipped (the async backlog was full and the policy said skip)."""
    CHECKPOINT_FAILED = "CHECKPOINT_FAILED"
    """A save failed (error, mode; for storage: path, cause, errno, bytes_needed, bytes_free)."""
    CHECKPOINT_DELETED = "CHECKPOINT_DELETED"
    """Retention removed a checkpoint (folder, bytes, seconds)."""
    RETENTION_FAILED = "RETENTION_FAILED"
    """Storage refused a delete retention planned (folder, error, committed: whether it is still a
    checkpoint or now residue for GC); the commit stands and the next one's retention retries."""
    RESIDUE_COLLECTED = "RESIDUE_COLLECTED"
    """Garbage collection removed staging or temporary residue."""
    RESTORE_FALLBACK = "RESTORE_FALLBACK"
    """A checkpoint failed validation on restore and an older one was tried."""
    INTERVAL_CHOSEN = "INTERVAL_CHOSEN"
    """The checkpoint interval was derived (Young/Daly) from measured cost and failure rate."""
    SDC_DETECTED = "SDC_DETECTED"
    """A silent-data-corruption check failed at a step boundary (runtime/integrity.py; rank 0
    reports it, then every rank raises SilentDataCorruptionError and recovery classifies `sdc`):
    kind (replica_digest, recompute, invariant), detail (in words), ranks (the suspects: the
    minority of a replica vote, both of two disagreeing replicas, or the ranks whose
    recomputation differed), hosts (theirs, quarantined by recovery), tensors (the first
    differing parameter or optimizer-state names), known_good_step (the last passing check: the
    rollback target), suspect_checkpoints (the folders marked SUSPECT)."""

    # -- a worker: the node's system sampler (issue 24) -------------------------------------------
    SYSTEM_SAMPLE = "SYSTEM_SAMPLE"
    """One node's system layer over the last interval, from the thread of its local rank 0
    (runtime/system_sampler.py; per-second telemetry, its fsync deferred like STEP_HEALTHY's):
    host, node, interval_seconds, cpu_percent, load1, cpu_count, memory_used_bytes,
    memory_total_bytes, swap_used_bytes, disk_usage and disk_io by folder role (`run`,
    `checkpoints`: used_bytes, total_bytes, read/write_bytes_per_second),
    net_sent/recv_bytes_per_second, net_errors, sample_cpu_seconds, and `gpus` where NVML is
    present (index, utilization_percent, memory_used/total_bytes, temperature_celsius,
    power_watts, sm/memory_clock_mhz, ecc_corrected/uncorrected_errors, xid_events_total, xids).
    The step is the rank's newest healthy one."""

    # -- diagnosing a sick run (issue 24): restore validation, guard captures, escalation ------
    RESTORE_VALIDATED = "RESTORE_VALIDATED"
    """The restored checkpoint passed the probe check before the first step (ckpt/probe.py):
    probe_loss and saved_probe_loss, relative_difference, tolerance, parameter_norm and
    saved_parameter_norm, nonfinite_parameters. A failed probe check is a RESTORE_FALLBACK whose
    reason starts with `probe check`."""
    GUARD_CAPTURED = "GUARD_CAPTURED"
    """A NaN/Inf or loss-spike guard tripped and the rank wrote its step capture
    (runtime/guard_capture.py): guard, path, bytes, rank (every rank writes its own)."""
    ESCALATED = "ESCALATED"
    """Recovery handed the run to a person instead of failing it or retrying (recovery.on_exhausted:
    pause; control/escalation.py): reason, failure_class, bundle (the diagnostics bundle's path),
    held_checkpoints (kept from retention until `runwright resume`), owner,
    allocation_released, problems (what of the scene could not be kept, e.g. storage down)."""


class NewEvent(Record):
    """An event to append. `event_id` is the idempotency key: appending it twice is a no-op."""

    event_id: str
    """Unique per event; a second copy is ignored."""
    run_id: str
    """The run whose log holds it."""
    generation: int
    """The writer's generation (fencing token)."""
    type: str
    """An `EventType` name (stored as text, so a newer writer's type is kept, not refused)."""
    step: int | None = None
    """Global optimizer step the event concerns, if any."""
    world_size: int | None = None
    """World size of the writer's group, if a worker wrote it."""
    checkpoint_id: str | None = None
    """Checkpoint the event concerns, if any."""
    time_unix_s: float
    """When it happened (seconds since the epoch, writer's clock)."""
    attributes: dict[str, Any] = Field(default_factory=dict)
    """Details; the readers' names are listed with each `EventType`."""


class EventRecord(NewEvent):
    """An event as stored; `seq` is its position in the store's append order."""

    seq: int
    """Position in the store's append order (gaps are possible; order is what counts)."""


# -- the process's event hook ---------------------------------------------------------------------
class Emitter(Protocol):
    """Sends one event of this process's run (the run context is one)."""

    def __call__(
        self,
        type_: EventType,
        *,
        key: str | None = None,
        step: int | None = None,
        checkpoint_id: str | None = None,
        **attributes: Any,
    ) -> None:
        """`key` names the event within its generation (e.g. `data`): sending the same key
        twice stores one event, so every rank may send a fact only one of them needs to."""
        ...


_lock = threading.Lock()
_emitter: Emitter | None = None
_closers: list[weakref.WeakMethod[Callable[[], None]]] = []
_step_facts: list[weakref.WeakMethod[Callable[[], dict[str, Any]]]] = []


def attach(emitter: Emitter) -> None:
    """Make `emitter` this process's run (runwright.init() does)."""
    global _emitter
    with _lock:
        _emitter = emitter


def detach(emitter: Emitter) -> None:
    """Forget `emitter` if it is still the process's run (its close does)."""
    global _emitter
    with _lock:
        if _emitter == emitter:
            _emitter = None


def emit(
    type_: EventType,
    *,
    key: str | None = None,
    step: int | None = None,
    checkpoint_id: str | None = None,
    **attributes: Any,
) -> bool:
    """Send an event to this process's run; False (and nothing sent) outside a run."""
    with _lock:
        emitter = _emitter
    if emitter is None:
        return False
    emitter(type_, key=key, step=step, checkpoint_id=checkpoint_id, **attributes)
    return True


def report_at_close(method: Callable[[], None]) -> None:
    """Call the bound `method` when the run closes (if its object still lives), so an object
    that reports at its own close (the loader's MIXTURE_ACTUAL) reports even when the script
    never closes it. Held weakly: registering keeps nothing alive."""
    with _lock:
        _closers[:] = [ref for ref in _closers if ref() is not None]  # a long process
        _closers.append(weakref.WeakMethod(method))  # type: ignore[arg-type]


def report_with_each_step(method: Callable[[], dict[str, Any]]) -> None:
    """Add what the bound `method` returns to every STEP_HEALTHY of the run (the loader's sample
    range and token counts of the batch it handed out last), so a script that reports only its
    loss still gives the ledger and the token accounting. Held weakly."""
    with _lock:
        _step_facts[:] = [ref for ref in _step_facts if ref() is not None]
        _step_facts.append(weakref.WeakMethod(method))  # type: ignore[arg-type]


def step_facts() -> dict[str, Any]:
    """The attributes every registered object adds to the step being reported."""
    with _lock:
        refs = list(_step_facts)
    facts: dict[str, Any] = {}
    for ref in refs:
        method = ref()
        if method is not None:
            facts.update(method())
    return facts


def run_closing() -> None:
    """The run is closing: let every registered object report, once, and forget them all."""
    with _lock:
        closers, _closers[:] = list(_closers), []
        _step_facts.clear()
    for ref in closers:
        method = ref()
        if method is not None:
            method()
