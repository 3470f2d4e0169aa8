"""Alert rules (issue 15; seed 004: an alert names an owner, a threshold, an action and an exit
condition): the `observability.alerts` section of a job spec.

A rule watches one signal of a live run (`AlertKind`), fires when its condition holds for
`window_steps` consecutive steps (or, for the time-based kinds, at once), and clears when its exit
condition (`clear_at`, hysteresis below the threshold) holds for `clear_steps` steps. A default
set ships (`DEFAULT_RULES`, docs/observability.md has the table); a rule of the spec with a
default's name replaces it, and `defaults: false` keeps only the spec's own.
"""

from typing import Literal

from pydantic import Field, model_validator

from runwright.spec.base import Section

AlertKind = Literal[
    "input_stall",
    "straggler",
    "heartbeat_gap",
    "durability_lag",
    "loss_spike",
    "non_finite",
    "throughput_drop",
    "ettr_below",
    "mixture_drift",
    "recovery_diverged",
    "source_loss_diverged",
]
AlertAction = Literal["none", "notify", "pause", "stop", "rollback"]


class AlertRule(Section):
    """One rule: what it watches, when it fires and clears, who owns it and what it does."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")
    """The rule's name (the alert id is the name, with the rank for per-rank kinds)."""
    kind: AlertKind
    """The signal: input_stall (input-wait share of the step, mean over ranks), straggler (a
    rank's step time / the median across ranks), heartbeat_gap (seconds since a rank's last
    message), durability_lag (steps the newest committed checkpoint trails the newest staged
    one), loss_spike (rank 0's loss / the mean of the window before it), non_finite (a rank
    reported a non-finite loss or gradient), throughput_drop (tokens/s of the window / the run's
    own baseline), ettr_below (productive step time / wall time since the run started),
    mixture_drift (the largest distance of a source's share from its target in the loader's
    last window of steps, MIXTURE_WINDOW), recovery_diverged (an invariant: a restarted
    generation's replayed steps differ from what the generation before it reported,
    RECOVERY_DIVERGED; clears when a later one reproduces its replay), source_loss_diverged (a
    mixture source's loss at a step / the mean of its own losses over the steps before it, one
    alert per source: a source whose loss climbs while the run's mean may hide it)."""
    threshold: float = Field(gt=0, allow_inf_nan=False)
    """Fires above it (below it for throughput_drop and ettr_below)."""
    clear_at: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """The exit condition: clears at or below it (at or above for throughput_drop and
    ettr_below); None: the threshold itself."""
    window_steps: int = Field(default=5, ge=1, le=10_000)
    """Consecutive steps the condition must hold before it fires."""
    clear_steps: int = Field(default=5, ge=1, le=10_000)
    """Consecutive steps the exit condition must hold before it clears."""
    severity: Literal["info", "warning", "critical"] = "warning"
    owner: str | None = Field(default=None, max_length=200)
    """Who answers it; None: the spec's governance.owner."""
    action: AlertAction = "none"
    """What firing does: none (recorded and shown), notify (POST the alert as JSON to
    `webhook`), pause (the run stops at its next step boundary with a save, gives its devices
    back and waits in PAUSED until a person runs `runwright resume`), stop (the run stops at its
    next step boundary with a save, and ends CANCELLED with reason ALERT), rollback (the group
    restarts from the newest committed checkpoint, skipping the steps since it)."""
    webhook: str | None = Field(default=None, max_length=2000, pattern=r"^https?://")
    """Where `notify` posts (http or https)."""
    after_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    """Only once the run has trained this long (ettr_below: warm-up and the first restore)."""

    @model_validator(mode="after")
    def _consistent(self) -> "AlertRule":
        if self.action == "notify" and self.webhook is None:
            raise ValueError(f"rule {self.name}: action notify needs a webhook URL")
        below = self.kind in ("throughput_drop", "ettr_below")
        clear = self.clear_at if self.clear_at is not None else self.threshold
        if (clear < self.threshold) if below else (clear > self.threshold):
            side = "at or above" if below else "at or below"
            raise ValueError(
                f"rule {self.name}: clear_at {clear} must be {side} the threshold "
                f"{self.threshold} (the exit condition is the far side of the firing one)"
            )
        return self


def _rule(name: str, kind: AlertKind, threshold: float, **more: object) -> AlertRule:
    return AlertRule.model_validate({"name": name, "kind": kind, "threshold": threshold, **more})


DEFAULT_RULES: tuple[AlertRule, ...] = (
    # Seed 004's loader-stall example: half of every step spent waiting for input.
    _rule("input_stall", "input_stall", 0.5, clear_at=0.25, window_steps=5, clear_steps=5),
    _rule("straggler", "straggler", 1.5, clear_at=1.2, window_steps=5, clear_steps=5),
    _rule("heartbeat_gap", "heartbeat_gap", 10.0, clear_at=10.0, window_steps=1, clear_steps=1),
    _rule("durability_lag", "durability_lag", 2.0, clear_at=1.0, window_steps=1, clear_steps=1),
    _rule("loss_spike", "loss_spike", 3.0, clear_at=1.5, window_steps=1, clear_steps=5),
    _rule("non_finite", "non_finite", 1.0, severity="critical", window_steps=1, clear_steps=1),
    _rule("throughput_drop", "throughput_drop", 0.5, clear_at=0.8, window_steps=10, clear_steps=5),
    _rule("ettr_below", "ettr_below", 0.5, clear_at=0.6, after_seconds=600.0),
    _rule("mixture_drift", "mixture_drift", 0.1, clear_at=0.05),
    # An invariant of a bitwise run (control/replay_check.py): 1 when the replay diverged.
    _rule("recovery_diverged", "recovery_diverged", 0.5, severity="critical", window_steps=1),
    # Issue 26: one source's loss held 1.5x above its own recent mean for 3 steps.
    _rule("source_loss_diverged", "source_loss_diverged", 1.5, clear_at=1.2, window_steps=3),
)
"""The default set (docs/observability.md): a warning each, recorded and shown, no action."""


class AlertsSpec(Section):
    """The run's alert rules."""

    defaults: bool = True
    """Include DEFAULT_RULES (a rule below with a default's name replaces it)."""
    rules: list[AlertRule] = Field(default_factory=list, max_length=100)
    """The spec's own rules."""

    @model_validator(mode="after")
    def _unique(self) -> "AlertsSpec":
        names = [r.name for r in self.rules]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"rule names must be unique; given twice: {', '.join(twice)}")
        return self

    def effective(self) -> tuple[AlertRule, ...]:
        """The rules in force: the defaults (unless switched off) with the spec's replacing or
        adding to them."""
        own = {r.name: r for r in self.rules}
        base = [own.pop(r.name, r) for r in DEFAULT_RULES] if self.defaults else []
        return (*base, *own.values())
