"""`runwright postmortem RUN` (issue 17; seed 004, postmortems): for a failed or recovered run,
the incident assembled from the store, with a template a person fills in.

What it assembles, all from the run's records:
  verdict       how the run ended and how many incidents it had, in one line
  incidents     each failure as the report has it (govern/incidents.py): class, rank blamed,
                message and the root-cause rank's last error lines, detection time, the
                checkpoint restored, steps lost, tokens replayed, time to healthy
  timeline      the events that tell the story, in order, each with its offset from the first
                incident's detection: state changes, failures, decisions, diagnostics, stop
                requests and grace kills, stale writes refused, takeovers, store outages,
                orphans killed, budget and stop-criterion stops, a failed preflight
  actions       what the platform decided at each failure (the policy's action and reason)
  diagnostics   the diagnostics bundles written (paths)
  cost          the device-seconds and cost of replay, recovery and idle time (the report's
                cost split): what the incidents cost
  template      cause, contributing factors, what went well, follow-ups (action, owner, due):
                empty, for the people who review it

A run with neither a failure nor a recovery has nothing to report (PostmortemError, and
`runwright report` is its evidence).
"""

import time
from typing import Any

from pydantic import Field

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.incidents import Incident, incidents
from runwright.observe.accounting import account
from runwright.observe.timeline import build_timeline
from runwright.records import Record
from runwright.store import EventRecord, Store

POSTMORTEM_VERSION = 1
STORY = (
    EventType.STATE_CHANGED,
    EventType.PREFLIGHT_CHECKED,
    EventType.FAILURE_CLASSIFIED,
    EventType.DIAGNOSTICS_WRITTEN,
    EventType.RECOVERY_STARTED,
    EventType.RECOVERY_SUCCEEDED,
    EventType.RESTORED,
    EventType.STOP_REQUESTED,
    EventType.STOP_ACKNOWLEDGED,
    EventType.STOP_GRACE_EXPIRED,
    EventType.ORPHAN_KILLED,
    EventType.CONTROLLER_TAKEOVER,
    EventType.STORE_UNAVAILABLE,
    EventType.BUDGET_EXCEEDED,
    EventType.STOP_CRITERION_MET,
    EventType.RUN_FINISHED,
)
"""The event types a postmortem's timeline tells (stale writes are counted, not listed)."""


class PostmortemError(RunwrightError):
    """The run has nothing for a postmortem (no failure, no recovery)."""


class Moment(Record):
    time_unix_s: float
    offset_seconds: float
    """From the first incident's detection (negative: before it)."""
    generation: int
    kind: str
    words: str


class Action(Record):
    generation: int
    failure_class: str | None
    action: str
    """restart, requeue, fail, stop (control/policy.py)."""
    reason: str


class IncidentCost(Record):
    replay_device_seconds: float
    recovery_device_seconds: float
    idle_device_seconds: float
    cost: float
    """Of those three, at the run's device-hour price."""
    share_of_device_time: float


class Template(Record):
    cause: str = ""
    contributing_factors: list[str] = Field(default_factory=list)
    what_went_well: list[str] = Field(default_factory=list)
    follow_ups: list[dict[str, str]] = Field(
        default_factory=lambda: [{"action": "", "owner": "", "due": ""}]
    )


class Postmortem(Record):
    postmortem_version: int = POSTMORTEM_VERSION
    generated_unix_s: float
    run: dict[str, Any]
    verdict: str
    incidents: list[Incident]
    timeline: list[Moment]
    stale_writes_refused: int
    actions: list[Action]
    diagnostics: list[str]
    cost: IncidentCost
    template: Template = Field(default_factory=Template)


def postmortem(store: Store, run_id: str) -> Postmortem:
    """The postmortem of run `run_id` (or a unique prefix); PostmortemError without incidents."""
    run = store.get_run(run_id)
    events = store.events(run.run_id)
    timeline = build_timeline(events)
    attempts = store.attempts(run.run_id)
    price = float((run.spec.get("resources") or {}).get("device_hour_price") or 0.0)
    split = account(events, attempts, timeline.steps, device_hour_price=price)
    found = incidents(events, timeline.steps, split.recoveries)
    if not found and run.state != "FAILED":
        raise PostmortemError(
            f"run {run.run_id} ({run.state}) had no failure and no recovery: there is nothing "
            f"for a postmortem; `runwright report {run.run_id}` is its evidence"
        )
    zero = found[0].detected_unix_s if found else (events[-1].time_unix_s if events else 0.0)
    governance = run.spec.get("governance") or {}
    lost = ("replay", "recovery", "idle")
    device = split.device_seconds
    lost_device = sum(getattr(device, c) for c in lost)
    return Postmortem(
        generated_unix_s=time.time(),
        run={
            "run_id": run.run_id,
            "name": run.name,
            "state": run.state,
            "terminal_reason": run.terminal_reason,
            "state_detail": run.state_detail,
            "last_step": run.last_step,
            "owner": governance.get("owner", "unknown"),
            "hypothesis": governance.get("hypothesis", ""),
        },
        verdict=_verdict(run.state, run.terminal_reason, found),
        incidents=found,
        timeline=[_moment(e, zero) for e in events if e.type in STORY],
        stale_writes_refused=sum(
            e.attributes.get("reports", 1)
            for e in events
            if e.type == EventType.STALE_WRITE_REJECTED
        ),
        actions=_actions(events),
        diagnostics=[
            str(e.attributes["path"])
            for e in events
            if e.type == EventType.DIAGNOSTICS_WRITTEN and e.attributes.get("path")
        ],
        cost=IncidentCost(
            replay_device_seconds=device.replay,
            recovery_device_seconds=device.recovery,
            idle_device_seconds=device.idle,
            cost=sum(getattr(split.cost, c) for c in lost),
            share_of_device_time=lost_device / device.total if device.total else 0.0,
        ),
    )


def _verdict(state: str, reason: str | None, found: list[Incident]) -> str:
    recovered = sum(1 for i in found if i.recovered)
    ended = f"{state}" + (f" ({reason})" if reason else "")
    return (
        f"{ended}; {len(found)} incident(s), {recovered} recovered, "
        f"{sum(i.lost_steps or 0 for i in found)} step(s) lost"
    )


def _actions(events: list[EventRecord]) -> list[Action]:
    """The policy's decision at each failure: RECOVERY_STARTED's action, or the terminal move
    that followed a FAILURE_CLASSIFIED of the same generation."""
    actions = []
    classified: dict[int, str | None] = {}
    for e in events:
        if e.type == EventType.FAILURE_CLASSIFIED:
            classified[e.generation] = e.attributes.get("failure_class")
        elif e.type == EventType.RECOVERY_STARTED:
            actions.append(
                Action(
                    generation=e.generation,
                    failure_class=e.attributes.get("failure_class"),
                    action=str(e.attributes.get("action", "")),
                    reason=str(e.attributes.get("reason", "")),
                )
            )
        elif (
            e.type == EventType.STATE_CHANGED
            and e.attributes.get("to_state") in ("FAILED", "CANCELLED")
            and e.generation in classified
        ):
            actions.append(
                Action(
                    generation=e.generation,
                    failure_class=classified[e.generation],
                    action="fail" if e.attributes.get("to_state") == "FAILED" else "stop",
                    reason=str(e.attributes.get("detail") or e.attributes.get("reason") or ""),
                )
            )
    return actions


def _moment(e: EventRecord, zero: float) -> Moment:
    a = e.attributes
    words = {
        EventType.STATE_CHANGED: lambda: (
            f"{a.get('from_state')} -> {a.get('to_state')}"
            + (f": {a['detail']}" if a.get("detail") else "")
        ),
        EventType.FAILURE_CLASSIFIED: lambda: (
            f"{a.get('failure_class')}"
            + (f" on rank {a['rank']}" if a.get("rank") is not None else "")
            + f": {a.get('message', '')}"
        ),
        EventType.RECOVERY_STARTED: lambda: f"{a.get('action')}: {a.get('reason', '')}",
        EventType.DIAGNOSTICS_WRITTEN: lambda: f"diagnostics bundle {a.get('path')}",
        EventType.RESTORED: lambda: f"rank {a.get('rank')} restored step {e.step}",
        EventType.PREFLIGHT_CHECKED: lambda: "preflight " + ("passed" if a.get("ok") else "FAILED"),
    }.get(e.type)
    text = words() if words else ", ".join(f"{k}={v}" for k, v in sorted(a.items()))[:300]
    return Moment(
        time_unix_s=e.time_unix_s,
        offset_seconds=e.time_unix_s - zero,
        generation=e.generation,
        kind=e.type,
        words=text,
    )


def render_postmortem(pm: Postmortem) -> str:
    """postmortem.html: one self-contained page (the report's style), template included."""
    from html import escape

    from runwright.govern.page import CSS, clock, fmt, table

    run = pm.run
    incident_rows = [
        (
            clock(i.detected_unix_s), i.generation, i.failure_class, i.rank,
            " | ".join([i.message or "", *i.error_lines[-3:]]).strip(" |"),
            i.detection_seconds, i.restored_step, i.lost_steps, i.replayed_tokens,
            i.time_to_healthy_seconds, "yes" if i.recovered else "no",
        )
        for i in pm.incidents
    ]  # fmt: skip
    sections = [
        f"<h1>Postmortem: {escape(run['name'])} <code>{escape(run['run_id'])}</code></h1>",
        f'<div class="sub">generated {escape(clock(pm.generated_unix_s))}; owner '
        f"{escape(str(run['owner']))}; hypothesis: {escape(str(run['hypothesis']) or '-')}</div>",
        f"<p><b>{escape(pm.verdict)}</b></p>",
        f'<p class="sub">{escape(fmt(run["state_detail"]))}</p>',
        "<h2>Incidents</h2>",
        table(
            [
                "detected",
                "gen",
                "class",
                "rank",
                "message and last error lines",
                "detection s",
                "restored step",
                "lost steps",
                "replayed tokens",
                "to healthy s",
                "recovered",
            ],
            incident_rows,
        ),
        "<h2>What the platform did</h2>",
        table(
            ["gen", "class", "action", "reason"],
            [(a.generation, a.failure_class, a.action, a.reason) for a in pm.actions],
        ),
        "<h2>Timeline</h2>",
        f'<p class="sub">seconds from the first detection; {pm.stale_writes_refused} stale '
        "write(s) of fenced-off generations refused</p>",
        table(
            ["time", "s", "gen", "event", "what"],
            [
                (clock(m.time_unix_s), round(m.offset_seconds, 3), m.generation, m.kind, m.words)
                for m in pm.timeline
            ],
        ),
        "<h2>Cost of the incidents</h2>",
        table(
            ["replay device-s", "recovery device-s", "idle device-s", "cost", "share of device"],
            [
                (
                    pm.cost.replay_device_seconds,
                    pm.cost.recovery_device_seconds,
                    pm.cost.idle_device_seconds,
                    pm.cost.cost,
                    f"{100 * pm.cost.share_of_device_time:.1f}%",
                )
            ],
        ),
        "<h2>Diagnostics bundles</h2>",
        table(["path"], [(p,) for p in pm.diagnostics]),
        "<h2>For the review (fill in postmortem.json's template)</h2>",
        table(
            ["cause", "contributing factors", "what went well", "follow-ups"],
            [("", "", "", "action / owner / due")],
        ),
    ]
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>runwright postmortem {escape(run['run_id'])}</title><style>{CSS}</style></head>"
        f"<body>{''.join(sections)}</body></html>"
    )
