"""Alerts (issue 15; seed 004): the spec's rules (spec/alerts.py) evaluated on each live run's
signals (control/alert_signals.py) by the controller, firing and clearing as events.

A rule is evaluated per completed step (input_stall, straggler, loss_spike, throughput_drop,
source_loss_diverged),
per controller pass (heartbeat_gap, durability_lag, non_finite, ettr_below), per loader window
(mixture_drift: every MIXTURE_WINDOW read since the last pass), or per replay verdict
(recovery_diverged: as the replay check records it, including on the controller's final pass
after the group exited, which has no live pass to judge it in). It
fires once its condition held for `window_steps` consecutive steps (the per-pass kinds at once),
recorded as ALERT_FIRED with the owner, the figures and the action taken; it clears once the exit
condition held for `clear_steps` steps, or when the run ends (ALERT_CLEARED). One open alert per
id: the rule's name, with `:rank<R>` for the per-rank kinds (a straggler names its rank and host).

Actions: `notify` POSTs the alert as JSON to the rule's webhook (3 s timeout, the result is in
the event); `stop` asks the group to stop at its next step boundary with a save, and the run ends
CANCELLED with reason ALERT; `rollback` asks it to stop without a save, and the run restarts from
its newest committed checkpoint, skipping the steps after it (control/stopping.py, recovery).
"""

import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from runwright.control.alert_signals import RunSignals, StepRow
from runwright.control.journal import Journal
from runwright.events import EventType
from runwright.protocol import ChannelMessage
from runwright.spec import JobSpec, spec_from_mapping
from runwright.spec.alerts import AlertRule
from runwright.store import RunRecord

WEBHOOK_TIMEOUT_SECONDS = 3.0
BELOW_KINDS = frozenset({"throughput_drop", "ettr_below"})
"""Kinds that fire below their threshold (a drop), not above it."""
GROUP_ACTIONS = frozenset({"stop", "rollback", "pause"})
"""Actions the controller carries out on the run's live worker group."""
GroupWhen = Literal["live", "next", "ended"]
"""Where a firing's group action goes: the group of this pass, the next pass's, or nowhere."""


@dataclass
class Streak:
    """How long a condition, and its exit condition, have held for one alert id."""

    held: int = 0
    cleared: int = 0
    open_since: float | None = None
    """Wall time it fired; None while closed."""


@dataclass
class RunAlerts:
    signals: RunSignals
    rules: tuple[AlertRule, ...]
    owner: str
    streaks: dict[str, Streak] = field(default_factory=dict)
    pending: list["Firing"] = field(default_factory=list)
    """Group actions of alerts fired outside `check` (a replay verdict), for its next call."""


@dataclass(frozen=True)
class Firing:
    """What the engine asks the controller to do after an alert fired."""

    alert_id: str
    action: str
    step: int | None


class AlertEngine:
    """The controller's alerts for its live runs (module docstring)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._runs: dict[str, RunAlerts] = {}

    def observe(self, run: RunRecord, spec: JobSpec, message: ChannelMessage) -> None:
        self._of(run, spec).signals.observe(message)

    def caught_up(self, run: RunRecord, read_all: Callable[[], bool]) -> None:
        """After an ingest pass: where a step waits for a rank many steps on, and `read_all()`
        says the controller has read every rank's file to its end, judge it as it is."""
        state = self._runs.get(run.run_id)
        if state is not None and state.signals.overdue() and read_all():
            state.signals.settle()

    def check(self, run: RunRecord, spec: JobSpec) -> list[Firing]:
        """Evaluate every rule on what arrived since the last check; the actions to take."""
        state = self._of(run, spec)
        firings, state.pending = state.pending, []  # fired by a replay verdict since
        for row in state.signals.take():
            if row.generation < run.generation:
                # An older group's step, read again by a controller that started (or took the
                # run over) after it: judged by the controller of its time, if at all.
                continue
            for rule in state.rules:
                for alert_id, value, about in _per_step(rule, row, state.signals):
                    firings += self._judge(run, state, rule, alert_id, value, about, row.step)
        for rule in state.rules:
            for alert_id, value, about in _per_pass(rule, state.signals, spec):
                firings += self._judge(run, state, rule, alert_id, value, about, None, once=True)
        state.signals.drift_windows.clear()  # each judged once, by every mixture_drift rule
        return firings

    def replay_verdict(self, run: RunRecord, divergence: Any, ended: bool) -> None:
        """The replay check recorded a verdict (control/replay_check.py): a Divergence, or None
        when a later generation reproduced the steps before it. Judged at once, not at the next
        live pass, which a divergence found after the group exited never gets (the run's final
        pass). A group action (stop, rollback, pause) is handed to the controller by the next
        `check`, which only a live group gets; once the run `ended`, the event says it was not
        taken."""
        state = self._runs.get(run.run_id)
        if state is None:
            state = self._of(run, spec_from_mapping(run.spec, f"run {run.run_id}"))
        self._note(state, divergence)
        for rule in state.rules:
            if rule.kind == "recovery_diverged":
                value, about = _replay_value(rule, state.signals)
                when: GroupWhen = "ended" if ended else "next"
                fired = self._judge(run, state, rule, rule.name, value, about, None, True, when)
                state.pending += [f for f in fired if f.action in GROUP_ACTIONS and not ended]

    def _note(self, state: RunAlerts, divergence: Any) -> None:
        signals = state.signals
        signals.replay_judged = True
        signals.replay_diverged = (
            None
            if divergence is None
            else {
                "step": divergence.step,
                "rank": divergence.rank,
                "generation": divergence.generation,
            }
        )

    def close(self, run: RunRecord, reason: str) -> None:
        """Clear every open alert of a run that ended (or whose controller lets it go)."""
        state = self._runs.pop(run.run_id, None)
        if state is None:
            return
        untaken = {f.alert_id: f.action for f in state.pending}
        for alert_id, streak in state.streaks.items():
            if streak.open_since is not None:
                why = reason
                if alert_id in untaken:
                    why += (
                        f"; its `{untaken[alert_id]}` was not taken: no worker group ran after it"
                    )
                self._cleared(run, alert_id, streak, why)

    def _of(self, run: RunRecord, spec: JobSpec) -> RunAlerts:
        state = self._runs.get(run.run_id)
        if state is None:
            # ETTR's wall time starts with the run's first attempt: start-up is not productive.
            attempts = self.journal.store.attempts(run.run_id)
            since = time.time() - attempts[0].started_unix_s if attempts else 0.0
            state = RunAlerts(
                signals=RunSignals(
                    world_size=spec.resources.world_size,
                    total_steps=int(spec.plan.total_steps.value),
                    started_monotonic=time.monotonic() - max(since, 0.0),
                ),
                rules=spec.observability.alerts.effective(),
                owner=spec.governance.owner or "the run's owner",
            )
            self._runs[run.run_id] = state
        return state

    def _judge(
        self,
        run: RunRecord,
        state: RunAlerts,
        rule: AlertRule,
        alert_id: str,
        value: float | None,
        about: dict[str, Any],
        step: int | None,
        once: bool = False,
        group: GroupWhen = "live",
    ) -> list[Firing]:
        if value is None:
            return []
        streak = state.streaks.setdefault(alert_id, Streak())
        below = rule.kind in BELOW_KINDS
        clear_at = rule.clear_at if rule.clear_at is not None else rule.threshold
        firing = value < rule.threshold if below else value > rule.threshold
        clearing = value >= clear_at if below else value <= clear_at
        streak.held = streak.held + 1 if firing else 0
        streak.cleared = streak.cleared + 1 if clearing else 0
        if streak.open_since is None and streak.held >= (1 if once else rule.window_steps):
            streak.open_since = time.time()
            return [self._fired(run, state, rule, alert_id, value, about, step, group)]
        if streak.open_since is not None and streak.cleared >= (1 if once else rule.clear_steps):
            self._cleared(run, alert_id, streak, f"{_figure(rule, value)} (exit: {_exit(rule)})")
        return []

    def _fired(
        self,
        run: RunRecord,
        state: RunAlerts,
        rule: AlertRule,
        alert_id: str,
        value: float,
        about: dict[str, Any],
        step: int | None,
        group: GroupWhen = "live",
    ) -> Firing:
        where = ""
        if "rank" in about:
            where = f" on rank {about['rank']}" + (
                f" ({about['host']})" if about.get("host") else ""
            )
        elif "source" in about:
            where = f" in source {about['source']}"
        summary = f"{rule.kind.replace('_', ' ')}{where}: {_figure(rule, value)}"
        held = "" if rule.window_steps == 1 else f" for {rule.window_steps} steps"
        alert = {
            "alert_id": alert_id,
            "rule": rule.name,
            "kind": rule.kind,
            "severity": rule.severity,
            "owner": rule.owner or state.owner,
            "summary": summary,
            "evidence": f"{_figure(rule, value)}{held}, threshold {rule.threshold:g}",
            "value": value,
            "threshold": rule.threshold,
            "exit": _exit(rule),
            "action": rule.action,
            "at_step": step,
            **about,
        }
        if rule.action == "notify":
            alert["action_result"] = notify(rule.webhook or "", run, alert)
        elif rule.action in GROUP_ACTIONS:
            alert["action_result"] = {
                "live": f"asked the group to {rule.action} at its next step boundary",
                "next": f"handed to the controller's next pass over a live group, to {rule.action} "
                "it (not taken if none runs again: ALERT_CLEARED then says so)",
                "ended": f"not taken: the run had ended, no group is left to {rule.action}",
            }[group]
        self.journal.record(run, EventType.ALERT_FIRED, op=f"fire:{alert_id}", **alert)
        return Firing(alert_id, rule.action, step)

    def _cleared(self, run: RunRecord, alert_id: str, streak: Streak, reason: str) -> None:
        assert streak.open_since is not None
        self.journal.record(
            run,
            EventType.ALERT_CLEARED,
            op=f"clear:{alert_id}",
            alert_id=alert_id,
            rule=alert_id.split(":")[0],
            reason=reason,
            open_seconds=round(time.time() - streak.open_since, 3),
        )
        streak.open_since = None
        streak.held = streak.cleared = 0


def _per_step(rule: AlertRule, row: StepRow, signals: RunSignals):
    """(alert id, value, what it is about) of a step-based rule on one completed step."""
    if rule.kind == "input_stall":
        yield rule.name, row.input_wait_share(), {}
    elif rule.kind == "straggler":
        for rank, ratio in sorted(row.slowness().items()):
            about = {"rank": rank, "host": signals.hosts.get(rank)}
            yield f"{rule.name}:rank{rank}", ratio, about
    elif rule.kind == "loss_spike":
        yield rule.name, signals.note_loss(row), {"loss": row.loss}
    elif rule.kind == "throughput_drop":
        yield rule.name, signals.throughput_ratio(row), {}
    elif rule.kind == "source_loss_diverged":
        for source, ratio in signals.source_ratio(row).items():
            loss_sum, tokens = row.sources[source]
            about = {"source": source, "loss": loss_sum / tokens, "loss_tokens": int(tokens)}
            yield f"{rule.name}:{source}", ratio, about


def _per_pass(rule: AlertRule, signals: RunSignals, spec: JobSpec):
    """(alert id, value, what it is about) of a time-based rule, once per controller pass."""
    now = time.monotonic()
    if rule.kind == "heartbeat_gap":
        for rank, seen in sorted(signals.last_seen.items()):
            about = {"rank": rank, "host": signals.hosts.get(rank)}
            yield f"{rule.name}:rank{rank}", now - seen, about
    elif rule.kind == "durability_lag":
        every = int(spec.plan.checkpoint_every_steps.value or 0)
        if signals.staged_step is not None and every > 0:
            lag = signals.staged_step - (signals.committed_step or 0)
            yield rule.name, lag / every, {"lag_steps": lag, "interval_steps": every}
    elif rule.kind == "non_finite":
        nan = signals.non_finite
        yield (
            rule.name,
            2.0 * rule.threshold if nan else 0.0,
            ({"rank": nan[0], "step": nan[1]} if nan else {}),
        )
    elif rule.kind == "ettr_below" and now - signals.started_monotonic >= rule.after_seconds:
        yield rule.name, signals.ettr(), {}
    elif rule.kind == "recovery_diverged" and signals.replay_judged:
        yield rule.name, *_replay_value(rule, signals)
    elif rule.kind == "mixture_drift":
        for value, window in signals.drift_windows:
            yield rule.name, value, ({"window_steps": list(window)} if window else {})


def _replay_value(rule: AlertRule, signals: RunSignals) -> tuple[float, dict[str, Any]]:
    """recovery_diverged is an invariant: over the threshold while a divergence is live."""
    found = signals.replay_diverged
    return (2.0 * rule.threshold if found else 0.0), dict(found or {})


def _figure(rule: AlertRule, value: float) -> str:
    words = {
        "input_stall": f"input wait {value:.0%} of the step",
        "straggler": f"step time {value:.2f} x the median across ranks",
        "heartbeat_gap": f"silent for {value:.1f} s",
        "durability_lag": f"newest commit {value:.2f} checkpoint intervals behind the newest save",
        "loss_spike": f"loss {value:.2f} x the mean of the steps before",
        "non_finite": "a non-finite loss or gradient" if value > 0 else "finite again",
        "throughput_drop": f"tokens/s {value:.0%} of the run's own baseline",
        "ettr_below": f"ETTR {value:.0%}",
        "mixture_drift": f"a source's share {value:.0%} off its target in the last window",
        "source_loss_diverged": f"a source's loss {value:.2f} x its own mean of the steps before",
        "recovery_diverged": (
            "a replayed step differs from what the failed generation reported"
            if value > 0
            else "a later recovery reproduced its replayed steps"
        ),
    }
    return words[rule.kind]


def _exit(rule: AlertRule) -> str:
    clear = rule.clear_at if rule.clear_at is not None else rule.threshold
    side = ">=" if rule.kind in BELOW_KINDS else "<="
    steps = "" if rule.clear_steps == 1 else f" for {rule.clear_steps} steps"
    return f"value {side} {clear:g}{steps}"


def notify(url: str, run: RunRecord, alert: dict[str, Any]) -> str:
    """POST the alert; what happened, for the event."""
    body = json.dumps({"run_id": run.run_id, "project": run.project, **alert}).encode()
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_SECONDS) as response:
            return f"notified {url}: HTTP {response.status}"
    except OSError as exc:  # URLError, HTTPError and timeouts are all OSErrors
        return f"notifying {url} failed: {exc}"
