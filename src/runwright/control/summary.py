"""What a run is, was and will do, as data (`--json`) and in words (`runwright status`)."""

import time
from collections.abc import Mapping
from typing import Any

from runwright.control.leasing import describe_lease
from runwright.control.states import TERMINAL, RunState
from runwright.events import EventType
from runwright.observe.system_series import system_line
from runwright.store import EventRecord, StaleWriteTally, Store

# What the controller does next from each non-terminal state, in words.
NEXT_ACTION = {
    RunState.CREATED: "accept the job into the queue",
    RunState.QUEUED: "ask the executor for an allocation of the whole gang",
    RunState.ALLOCATING: "wait until the executor grants the whole gang, then write the rank "
    "manifest and launch the worker group",
    RunState.STARTING: "wait until every rank has reported WORKER_STARTED",
    RunState.RUNNING: "watch heartbeats, progress and the worker group's exit",
    RunState.CHECKPOINTING: "wait for the checkpoint to commit, then continue",
    RunState.RECOVERING: "restart the worker group from the newest committed checkpoint",
    RunState.PAUSED: "nothing until a person resumes it (`runwright resume RUN`: back to the "
    "queue, then restored from its newest committed checkpoint) or cancels it",
}


INCIDENT_TYPES = (
    EventType.ALLOCATION_FAILED,
    EventType.FAILURE_CLASSIFIED,
    EventType.RECOVERY_STARTED,
    EventType.RECOVERY_SUCCEEDED,
    EventType.RECOVERY_VERIFIED,
    EventType.RECOVERY_DIVERGED,
    EventType.RECOVERY_UNVERIFIED,
    EventType.STALE_WRITE_REJECTED,
    EventType.BUDGET_WARNING,
    EventType.BUDGET_EXCEEDED,
    EventType.STOP_REQUESTED,
    EventType.ORPHAN_KILLED,
    EventType.STORE_UNAVAILABLE,
    EventType.CONTROLLER_TAKEOVER,
    EventType.SDC_DETECTED,
)
INCIDENT_KEYS = (
    "failure_class",
    "rank",
    "message",
    "reason",
    "action",
    "lost_steps",
    "recovery_seconds",
    "restored_step",
    "not_before_unix_s",
    "kind",
    "detail",
    "rejected_type",
    "writer_generation",
    "outage_seconds",
    "attempts",
    "error",
    "code",
    "engine_id",
    "lost_hosts",
    "quarantined_hosts",
    "known_good_step",
    "error_lines",
    "old_holder",
    "new_holder",
    "uncontrolled_seconds",
    "verified_generation",
    "replayed_steps",
    "compared",
    "nothing_replayed",
    "loss",
    "earlier_loss",
)


ALERT_TYPES = (EventType.ALERT_FIRED, EventType.ALERT_CLEARED)
SUMMARY_TYPES = (EventType.STATE_CHANGED, *INCIDENT_TYPES, *ALERT_TYPES)
"""What the summary is computed from: a summary without the event log reads only these (and the
rejected stale writes only as counts, `Store.stale_write_tally`)."""
_LISTED_TYPES = tuple(t for t in SUMMARY_TYPES if t != EventType.STALE_WRITE_REJECTED)


def run_summary(store: Store, run_id: str, *, with_events: bool = True) -> dict[str, Any]:
    """The run as data. `with_events=False` leaves the event log out (`events` empty,
    `event_count` None) and reads only the events the summary is made of, by index, with the
    stale writes counted in the database: what `status` prints, at a cost that does not grow with
    the steps a run reports (1M events: benchmarks/status_scale.py, docs/control.md)."""
    run = store.get_run(run_id)
    events = store.events(run.run_id, types=None if with_events else _LISTED_TYPES)
    history = [
        {
            "state": e.attributes.get("to_state"),
            "from": e.attributes.get("from_state"),
            "generation": e.generation,
            "time_unix_s": e.time_unix_s,
            "reason": e.attributes.get("reason"),
        }
        for e in events
        if e.type == EventType.STATE_CHANGED
    ]
    attempts = [a.model_dump(mode="json") for a in store.attempts(run.run_id)]
    incidents = [
        {
            "type": e.type,
            "generation": e.generation,
            "step": e.step,
            **{k: e.attributes.get(k) for k in INCIDENT_KEYS if k in e.attributes},
        }
        for e in events
        if e.type in INCIDENT_TYPES and e.type != EventType.STALE_WRITE_REJECTED
    ]
    pending = next(
        (
            e
            for e in reversed(events)
            if e.type in (EventType.RECOVERY_STARTED, EventType.RECOVERY_SUCCEEDED)
        ),
        None,
    )
    latest = store.checkpoints.latest(run.run_id)  # the fence's pointer
    lease, db_now = store.leases.get(run.run_id)
    return {
        "run_id": run.run_id,
        "name": run.name,
        "state": run.state,
        "terminal_reason": run.terminal_reason,
        "state_detail": run.state_detail,
        "generation": run.generation,
        "spec_hash": run.spec_hash,
        "last_step": run.last_step,
        "total_steps": ((run.plan or {}).get("total_steps") or {}).get("value"),
        "last_heartbeat_unix_s": run.last_heartbeat_unix_s,
        "latest_checkpoint_id": latest.checkpoint_id if latest else None,
        "allocation": run.allocation,
        "rank_manifest": run.rank_manifest,
        "created_unix_s": run.created_unix_s,
        "updated_unix_s": run.updated_unix_s,
        "state_history": ["CREATED", *[h["state"] for h in history]],
        "transitions": history,
        "attempts": attempts,
        "incidents": incidents,
        "stale_writes": stale_writes(store.stale_write_tally(run.run_id)),
        "alerts": open_alerts(events),
        "controller": {
            **(lease.model_dump(mode="json") if lease else {"holder": None}),
            "live": bool(lease and lease.live(db_now)),
            "expires_in_seconds": round(lease.expires_unix_s - db_now, 3) if lease else None,
            "described": describe_lease(lease, db_now) if lease else "no controller took it yet",
        },
        "pending_recovery": (
            pending.attributes
            if pending is not None and pending.type == EventType.RECOVERY_STARTED
            else None
        ),
        "event_count": len(events) if with_events else None,
        "events": [e.model_dump(mode="json") for e in events] if with_events else [],
    }


def open_alerts(events: list[EventRecord]) -> list[dict[str, Any]]:
    """The alerts fired and not cleared since (control/alerts.py), oldest first."""
    open_: dict[str, dict[str, Any]] = {}
    for e in events:
        alert_id = e.attributes.get("alert_id")
        if e.type == EventType.ALERT_FIRED and isinstance(alert_id, str):
            open_[alert_id] = {"step": e.step, "time_unix_s": e.time_unix_s, **e.attributes}
        elif e.type == EventType.ALERT_CLEARED:
            open_.pop(str(alert_id), None)
    return list(open_.values())


def stale_writes(tally: list[StaleWriteTally]) -> list[dict[str, Any]]:
    """The rejected writes of fenced-off generations, counted: one entry per writer generation
    with how many of each type and the steps they span. A fenced group may report for a while
    after its fence (until its ranks reach the agreed stop step); `status` printed each one
    (issue 19: ~44,000 lines), where what the reader needs is that it happened and how much."""
    groups: dict[int, dict[str, Any]] = {}
    for row in tally:
        group = groups.setdefault(
            row.writer_generation,
            {
                "writer_generation": row.writer_generation,
                "run_generation": row.run_generation,
                "count": 0,
                "types": {},
                "first_step": None,
                "last_step": None,
                "first_unix_s": row.first_unix_s,
                "last_unix_s": row.last_unix_s,
            },
        )
        group["count"] += row.count
        group["types"][row.rejected_type] = row.count
        group["run_generation"] = max(group["run_generation"], row.run_generation)
        group["first_unix_s"] = min(group["first_unix_s"], row.first_unix_s)
        group["last_unix_s"] = max(group["last_unix_s"], row.last_unix_s)
        for key, pick in (("first_step", min), ("last_step", max)):
            step = getattr(row, key)
            if step is not None:
                group[key] = step if group[key] is None else pick(group[key], step)
    return [groups[g] for g in sorted(groups)]


def _stale_line(group: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(group["types"].items(), key=lambda i: -i[1]))
    steps = (
        f" at steps {group['first_step']}-{group['last_step']}"
        if group["first_step"] is not None
        else ""
    )
    return (
        f"  {group['count']} write(s) of fenced generation {group['writer_generation']} "
        f"rejected{steps} ({kinds}); generation {group['run_generation']} holds the run"
    )


def describe_run(summary: dict[str, Any]) -> str:
    state = RunState(summary["state"])
    lines = [
        f"run {summary['run_id']} ({summary['name']}): {state}"
        + (f" [{summary['terminal_reason']}]" if summary["terminal_reason"] else "")
    ]
    lines.append("history: " + " -> ".join(summary["state_history"]))
    lines.append(
        f"generation {summary['generation']}, last healthy step "
        f"{summary['last_step'] if summary['last_step'] is not None else '-'}"
    )
    if summary.get("allocation"):
        lines.append(_allocation_line(summary["allocation"]))
    manifest = summary.get("rank_manifest") or []
    if len({e["host"] for e in manifest}) > 1:
        lines.append(
            "ranks: "
            + ", ".join(f"{e['rank']} on {e['host']} (node {e['node']})" for e in manifest)
        )
    if summary["last_heartbeat_unix_s"]:
        age = time.time() - summary["last_heartbeat_unix_s"]
        lines.append(f"last heartbeat {age:.1f} s ago")
    for attempt in summary["attempts"]:
        ended = attempt["exit_code"]
        lines.append(
            f"attempt gen {attempt['generation']}: world size {attempt['world_size']}, "
            f"exit {'running' if ended is None and not attempt['ended_unix_s'] else ended}"
        )
    if summary["latest_checkpoint_id"]:
        lines.append(f"latest committed checkpoint {summary['latest_checkpoint_id']}")
    controller = summary.get("controller")
    if controller and (state not in TERMINAL or controller["live"]):
        lines.append(f"controller: {controller['described']}")
    for incident in summary["incidents"]:
        lines.append("  " + _incident_line(incident))
        lines += [f"      | {line}" for line in incident.get("error_lines") or []]
    lines += [_stale_line(group) for group in summary.get("stale_writes") or []]
    for alert in summary.get("alerts") or []:
        action = alert.get("action") or "none"
        lines.append(
            f"ALERT [{alert.get('severity')}] {alert.get('rule')}: {alert.get('summary')} "
            f"(owner {alert.get('owner')}; action {action}; clears when {alert.get('exit')})"
        )
    if summary["state_detail"]:
        lines.append(f"why: {summary['state_detail']}")
    pending = summary["pending_recovery"]
    if state in TERMINAL:
        lines.append("the run is finished; nothing more will happen")
    elif state is RunState.RECOVERING and pending:
        wait = float(pending.get("not_before_unix_s") or 0) - time.time()
        verb = "requeue" if pending.get("action") == "requeue" else "restart"
        lines.append(
            f"next: {verb} from the newest committed checkpoint"
            + (f" in {wait:.0f} s (backoff)" if wait > 0 else " now")
        )
    else:
        lines.append(f"next: {NEXT_ACTION[state]}")
    return "\n".join(lines)


def _allocation_line(allocation: dict[str, Any]) -> str:
    """`allocation: slurm (pool debug) request 2, granted: Slurm job 14 on n1, n3`."""
    text = f"allocation: {allocation.get('executor')}"
    if allocation.get("pool"):
        text += f" (pool {allocation['pool']})"
    if allocation.get("request"):
        text += f" request {allocation['request']}"
    text += f", {allocation.get('state', 'granted')}"
    if allocation.get("engine_id"):
        text += f": {allocation['executor']} id {allocation['engine_id']}"
    if allocation.get("hosts"):
        text += f" on {', '.join(allocation['hosts'])}"
    return text


def event_line(event: "EventRecord | Mapping[str, Any]") -> str:
    """One line of `runwright events`: a stored record, or its JSON form as either backend
    returns it (read as it is: revalidating each event of a long log cost more than printing)."""
    data = event if isinstance(event, Mapping) else event.model_dump(mode="json")
    clock = time.strftime("%H:%M:%S", time.localtime(data["time_unix_s"]))
    attrs = dict(data.get("attributes") or {})
    attrs.pop("log_tail", None)
    said = attrs.pop("error_lines", None) or []
    kind = str(data["type"])
    if kind == EventType.STATE_CHANGED:
        text = f"{attrs.get('from_state')} -> {attrs.get('to_state')}"
        if attrs.get("reason"):
            text += f" ({attrs['reason']})"
    elif kind == EventType.FAILURE_CLASSIFIED:
        # The cause in full, where the user looks: class, rank, message, and the rank's own
        # last error lines (issue 19: they used to sit only in the diagnostics bundle).
        text = (
            f"{attrs.get('failure_class')} on rank {attrs.get('rank')}: {attrs.get('message')}"
            + "".join(f"\n      | {line}" for line in said)
        )
    elif kind == EventType.STEP_HEALTHY and isinstance(attrs.get("ranks"), list):
        # A folded step row (observe/rank_steps.py): how many ranks, and the first one's figures.
        ranks, columns = attrs["ranks"], attrs.get("columns") or {}
        first = " ".join(f"{k}={_short(v[0])}" for k, v in sorted(columns.items()) if v)
        text = f"ranks={len(ranks)} rank {ranks[0] if ranks else '-'}: {first}"
    elif kind == EventType.SYSTEM_SAMPLE:
        text = system_line(attrs)
    else:
        text = " ".join(f"{k}={_short(v)}" for k, v in sorted(attrs.items()))
    step = f" step {data['step']}" if data.get("step") is not None else ""
    return f"{clock} g{data['generation']} {kind:<24}{step} {text}"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _incident_line(incident: dict[str, Any]) -> str:
    kind = incident["type"]
    if kind == EventType.FAILURE_CLASSIFIED:
        return (
            f"gen {incident['generation']}: {incident.get('failure_class')} on rank "
            f"{incident.get('rank')} at step {incident.get('step')}: {incident.get('message')}"
        )
    if kind == EventType.RECOVERY_STARTED:
        return f"gen {incident['generation']}: {incident.get('action')} - {incident.get('reason')}"
    if kind == EventType.ALLOCATION_FAILED:
        return f"gen {incident['generation']}: allocation failed - {incident.get('reason')}"
    if kind == EventType.RECOVERY_SUCCEEDED:
        return (
            f"gen {incident['generation']}: recovered from step "
            f"{incident.get('restored_step')}, lost {incident.get('lost_steps')} steps, "
            f"{incident.get('recovery_seconds')} s to recover"
        )
    if kind == EventType.RECOVERY_VERIFIED:
        if incident.get("nothing_replayed"):
            return f"gen {incident['generation']}: recovery verified, nothing was replayed"
        return (
            f"gen {incident['generation']}: recovery verified, {incident.get('replayed_steps')} "
            f"replayed steps reproduced bit for bit ({incident.get('compared')} rank reports)"
        )
    if kind == EventType.RECOVERY_DIVERGED:
        return (
            f"gen {incident['generation']}: recovery DIVERGED at step {incident.get('step')} "
            f"rank {incident.get('rank')}: loss {incident.get('loss')!r}, earlier "
            f"{incident.get('earlier_loss')!r}"
        )
    if kind == EventType.RECOVERY_UNVERIFIED:
        return f"gen {incident['generation']}: recovery not verified - {incident.get('reason')}"
    if kind == EventType.STORE_UNAVAILABLE:
        return (
            f"gen {incident['generation']}: the store was unavailable for "
            f"{incident.get('outage_seconds')} s ({incident.get('attempts')} failed attempts: "
            f"{incident.get('error')}); the controller waited and carried on"
        )
    if kind == EventType.CONTROLLER_TAKEOVER:
        return (
            f"gen {incident['generation']}: controller {incident.get('new_holder')} took over "
            f"from {incident.get('old_holder')} ({incident.get('reason')}) after "
            f"{incident.get('uncontrolled_seconds')} s without a controller"
        )
    details = {k: v for k, v in incident.items() if k not in ("type", "generation", "step")}
    return f"gen {incident['generation']}: {kind} {details}"
