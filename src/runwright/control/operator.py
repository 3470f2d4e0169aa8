"""Operator actions on a run (issue 25; seed 000's "limits of manual takeover"): roll back to a
chosen committed checkpoint, skip a named bad shard, move to another pool, stop with a save.

Each is a person's request, never an edit of shared storage by hand. The request side (called by
the CLI on the store and by the server, role-checked and audited in access/runs.py) checks what it
can at once (the checkpoint is committed and restorable, the shard is a train shard of the run's
dataset, the pool exists and can place the spec), records OPERATOR_ACTION_REQUESTED with the
actor and reason, and asks the live group to stop at its next step boundary through the worker
protocol's stop request (reason `rollback` without a save; `skip_shard`, `move_pool`,
`operator_stop` with one). Once the group has stopped, the controller's side (`OperatorStep`,
control/operator_step.py)
applies it and records OPERATOR_ACTION_APPLIED with the effect in words:

- rollback: every committed checkpoint newer than the chosen one is marked ABANDONED (kept, never
  restored, outside retention: ckpt/abandon.py), the fence's latest pointer names the chosen one
  again (published under the fence, not written), the run record's committed cursor becomes the
  chosen checkpoint's, and the run restarts as a new generation restoring at most its step. The
  data plane is deterministic, so the steps after it see the same batches as the first time.
- skip_shard: the run restarts from its save, and every later generation is launched with the
  shard named (protocol.ENV_SKIP_SHARDS): the loader quarantines it (reason `operator`) in the
  data cursor from the step it restores, so every rank and every restart agrees, and the
  cursor's record counts the documents and tokens lost.
- move_pool: the run gives its allocation back and is queued again in the other pool; its spec
  becomes a new spec that differs only in resources.pool (a spec never changes: the run's
  spec_hash follows it, and both hashes are in the event).
- stop_with_save: the run ends CANCELLED (USER_CANCELLED) with a checkpoint committed at the
  stop step, even where checkpoint.save_on_stop is off.

A queued or paused run has no group to stop: a skip or a move is applied at once (the next
launch carries it); a rollback or a stop with a save needs a live group and is refused in words.
"""

import json
import time
from pathlib import Path
from typing import Any

from runwright.control.journal import Journal
from runwright.control.states import RunState
from runwright.events import EventType
from runwright.protocol import ENV_SKIP_SHARDS
from runwright.spec import spec_from_mapping
from runwright.store import EventRecord, Outcome, RunRecord, Store, WriteResult

LIVE = {RunState.STARTING, RunState.RUNNING, RunState.CHECKPOINTING}
AT_REST = {RunState.QUEUED, RunState.PAUSED}
ROLLBACK, SKIP_SHARD, MOVE_POOL, STOP_WITH_SAVE = (
    "rollback",
    "skip_shard",
    "move_pool",
    "stop_with_save",
)
STOP_REASON = {
    ROLLBACK: "rollback",
    SKIP_SHARD: "skip_shard",
    MOVE_POOL: "move_pool",
    STOP_WITH_SAVE: "operator_stop",
}
"""Each action's reason in the worker protocol's stop request (protocol.STOP_REASONS)."""


# -- the request side --------------------------------------------------------------------------


def request_rollback(
    store: Store, run_id: str, why: str, *, actor: str | None = None, checkpoint: str
) -> WriteResult:
    """Ask a live run to roll back to `checkpoint` (a step, an id or id prefix, or a folder)."""
    from runwright.ckpt.abandon import find_committed
    from runwright.ckpt.errors import CheckpointError
    from runwright.ckpt.storage import CheckpointStorage
    from runwright.store.fence import run_checkpoint_root

    run = store.get_run(run_id)
    refused = _needs_live(store, run, "rolled back")
    if refused is not None:
        return refused
    try:
        chosen = find_committed(CheckpointStorage(run_checkpoint_root(run)), checkpoint)
    except CheckpointError as exc:
        return _refuse(run, str(exc))
    target = {"checkpoint_id": chosen.record.checkpoint_id, "step": chosen.record.step}
    return _ask(store, run, ROLLBACK, why, actor, save=False, **target)


def request_stop_with_save(
    store: Store, run_id: str, why: str, *, actor: str | None = None
) -> WriteResult:
    """Ask a live run to save at its next step boundary and end CANCELLED."""
    run = store.get_run(run_id)
    refused = _needs_live(store, run, "stopped with a save")
    if refused is not None:
        return refused
    if not spec_from_mapping(run.spec).checkpoint.enabled:
        return _refuse(
            run,
            "checkpoint.enabled is false in the run's spec, so there is nothing to save with: "
            "`runwright cancel` stops it without a save",
        )
    return _ask(store, run, STOP_WITH_SAVE, why, actor, save=True)


def request_skip_shard(
    store: Store, run_id: str, why: str, *, actor: str | None = None, shard: str
) -> WriteResult:
    """Skip train shard `shard` of the run's dataset from the step the run next starts at."""
    run = store.get_run(run_id)
    problem = _not_a_train_shard(run, shard)
    if problem is not None:
        return _refuse(run, problem)
    if shard in skipped_shards(
        store.events(run.run_id, types=[EventType.OPERATOR_ACTION_REQUESTED])
    ):
        return WriteResult(
            outcome=Outcome.ALREADY_APPLIED, run=run, detail=f"shard {shard} is already skipped"
        )
    return _ask_or_apply(store, run, SKIP_SHARD, why, actor, shard=shard)


def request_move_pool(
    store: Store,
    run_id: str,
    why: str,
    *,
    actor: str | None = None,
    pool: str,
    pools_file: Path | None = None,
) -> WriteResult:
    """Move the run to pool `pool` (of the pools file): queued again there after a save."""
    from runwright.control.pools import load_pools, make_executor, pool_named, pools_path
    from runwright.errors import RunwrightError

    run = store.get_run(run_id)
    current = spec_from_mapping(run.spec).resources.pool
    if pool == current:
        return WriteResult(
            outcome=Outcome.ALREADY_APPLIED, run=run, detail=f"the run is in pool {pool} already"
        )
    try:
        source = pools_path(Path(run.root), pools_file)
        named = pool_named(load_pools(source), pool, source)
        refusal = make_executor(pool, named).refusal(_moved_spec(run, pool)[0])
    except RunwrightError as exc:
        return _refuse(run, str(exc))
    if refusal is not None:
        return _refuse(run, f"pool {pool} can never place this run: {refusal}")
    return _ask_or_apply(store, run, MOVE_POOL, why, actor, pool=pool, from_pool=current)


def _needs_live(store: Store, run: RunRecord, done: str) -> WriteResult | None:
    state = RunState(run.state)
    if state not in LIVE:
        return _refuse(
            run,
            f"the run is {run.state}: only a running run can be {done} (its group stops at a "
            "step boundary for it); resume a paused run first",
        )
    return _already_stopping(store, run)


def _already_stopping(store: Store, run: RunRecord) -> WriteResult | None:
    """A generation stops once, for one reason: a second request would overwrite the first."""
    for e in store.events(run.run_id, types=[EventType.STOP_REQUESTED]):
        if e.attributes.get("stopping_generation") == run.generation:
            return _refuse(
                run,
                f"generation {run.generation} is already asked to stop "
                f"({e.attributes.get('reason')}): ask again once that has taken effect",
            )
    return None


def _refuse(run: RunRecord, detail: str) -> WriteResult:
    return WriteResult(outcome=Outcome.INVALID_TRANSITION, run=run, detail=detail)


def _ask(
    store: Store, run: RunRecord, action: str, why: str, actor: str | None, *, save: bool,
    **target: Any,
) -> WriteResult:  # fmt: skip
    """OPERATOR_ACTION_REQUESTED, then the stop request for the live generation."""
    journal = Journal(store)
    who = {"actor": actor} if actor is not None else {}
    journal.record(
        run,
        EventType.OPERATOR_ACTION_REQUESTED,
        op=f"{action}:{time.time_ns()}",
        per_step=False,
        action=action,
        detail=why,
        stopping_generation=run.generation,
        **who,
        **target,
    )
    journal.ask_to_stop(
        run, run.generation, STOP_REASON[action], save=save, op=action, detail=why, **who
    )
    return WriteResult(outcome=Outcome.APPLIED, run=store.get_run(run.run_id))


def _ask_or_apply(
    store: Store, run: RunRecord, action: str, why: str, actor: str | None, **target: Any
) -> WriteResult:
    """A live run stops with a save for it; a queued or paused one takes it at once."""
    state = RunState(run.state)
    if state in LIVE:
        refused = _already_stopping(store, run)
        if refused is not None:
            return refused
        save = spec_from_mapping(run.spec).checkpoint.enabled  # restarts from its save
        return _ask(store, run, action, why, actor, save=save, **target)
    if state not in AT_REST:
        return _refuse(
            run,
            f"the run is {run.state}: a skip or a move applies to a running, queued or paused "
            "run (a run being placed or recovered takes it once it runs)",
        )
    journal = Journal(store)
    who = {"actor": actor} if actor is not None else {}
    journal.record(
        run,
        EventType.OPERATOR_ACTION_REQUESTED,
        op=f"{action}:{time.time_ns()}",
        per_step=False,
        action=action,
        detail=why,
        **who,
        **target,
    )
    request = store.events(run.run_id, types=[EventType.OPERATOR_ACTION_REQUESTED])[-1]
    if action == MOVE_POOL:
        effect = move_spec(store, run, str(target["pool"]))
    else:
        effect = f"the run is {run.state}: its next generation leaves shard {target['shard']} out"
    record_applied(journal, store.get_run(run.run_id), request, effect)
    return WriteResult(outcome=Outcome.APPLIED, run=store.get_run(run.run_id))


def _not_a_train_shard(run: RunRecord, shard: str) -> str | None:
    """Why `shard` cannot be skipped (not a train shard of the run's dataset), or None."""
    from runwright.data.format.manifest import read_manifest
    from runwright.govern.preflight import dataset_folder

    spec = spec_from_mapping(run.spec)
    folder = dataset_folder(spec, Path(run.workdir))
    if folder is None:
        return (
            f"shard {shard!r} cannot be checked: the run's dataset is not a local folder here "
            "(a URL, or none), and only a train shard of it can be skipped"
        )
    train = [s.name for s in read_manifest(folder).shards if s.split == "train"]
    if shard not in train:
        some = ", ".join(train[:8]) + (" ..." if len(train) > 8 else "")
        return (
            f"shard {shard!r} is not a train shard of the run's dataset; its train shards: {some}"
        )
    return None


def _moved_spec(run: RunRecord, pool: str) -> tuple[Any, dict[str, Any]]:
    mapping = json.loads(json.dumps(run.spec))
    mapping.setdefault("resources", {})["pool"] = pool
    spec = spec_from_mapping(mapping, f"run {run.run_id} moved to pool {pool}")
    return spec, spec.model_dump(mode="json")


def move_spec(store: Store, run: RunRecord, pool: str) -> str:
    """Give the run a spec in `pool`, and its allocation record the new pool (a released
    allocation's record names the pool the next request is made in). Returns the effect."""
    from runwright.control.pools import load_pools, pool_named, pool_record, pools_path

    spec, stored = _moved_spec(run, pool)
    source = pools_path(Path(run.root))
    fields: dict[str, Any] = {"spec": stored, "spec_hash": spec.spec_hash}
    if run.allocation:
        fields["allocation"] = {
            **run.allocation,
            **pool_record(pool, pool_named(load_pools(source), pool, source)),
        }
    store.update_run(run.run_id, **fields)
    return f"queued in pool {pool}; spec {run.spec_hash[:12]} -> {spec.spec_hash[:12]}"


def record_applied(
    journal: Journal, run: RunRecord, request: EventRecord, effect: str, **attributes: Any
) -> None:
    a = request.attributes
    journal.record(
        run,
        EventType.OPERATOR_ACTION_APPLIED,
        op=f"applied:{request.event_id}",
        per_step=False,
        action=a.get("action"),
        actor=a.get("actor"),
        detail=a.get("detail"),
        request=request.event_id,
        effect=effect,
        **{k: a[k] for k in ("checkpoint_id", "shard", "pool", "from_pool") if k in a},
        **attributes,
    )


def skipped_shards(events: list[EventRecord]) -> dict[str, str]:
    """Every shard an operator asked the run to skip (shard -> reason), oldest first."""
    return {
        str(e.attributes["shard"]): str(e.attributes.get("detail") or "skipped by an operator")
        for e in events
        if e.type == EventType.OPERATOR_ACTION_REQUESTED
        and e.attributes.get("action") == SKIP_SHARD
        and e.attributes.get("shard")
    }


def skip_shards_env(events: list[EventRecord]) -> dict[str, str]:
    """The launch environment that carries the run's skipped shards (empty without any)."""
    named = skipped_shards(events)
    return {ENV_SKIP_SHARDS: json.dumps(named, sort_keys=True)} if named else {}
