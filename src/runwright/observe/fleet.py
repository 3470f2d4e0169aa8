"""Prometheus series of every run in a store, folded from their events a batch at a time.

`runwright server` serves them on `/metrics` (server/metrics.py). A scrape must stay cheap on a
store with long runs, so each run keeps a `RunFold`: the figures so far and the sequence number of
the last event folded. A scrape reads only the events after it (one indexed query per active
run), and a finished run that has gone quiet is looked at again only every
SETTLED_RECHECK_SECONDS. Folding a log in pieces gives the figures of folding it whole
(tests/observe/test_fleet.py).

Naming follows the Prometheus guide (https://prometheus.io/docs/practices/naming/): the
`runwright_` prefix, base units (seconds, bytes, tokens), `_total` on counters. Labels stay
bounded: run id and project (one series set per run), state (the state machine), token kind,
failure class (the spec's taxonomy), pending reason (sched/reasons.py's codes), alert rule and
severity (the rule set), mixture source and length bucket of the loss breakdown (the spec's
sources and buckets; past MAX_BREAKDOWN_LABELS names a run's further ones count as `other`);
never a step, rank, alert id or sample id.

observe/ sits below the store, so the store is reached through `RunSource`, the two query
functions it needs (`runwright.store.Store` has them).
"""

import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from runwright.events import EventType
from runwright.observe.metrics import STEP_SECONDS_BUCKETS
from runwright.observe.rank_steps import unfold
from runwright.observe.records import Event
from runwright.observe.system_series import SystemFold, system_families
from runwright.observe.timeline import TOKEN_KINDS, add_breakdown, number

TERMINAL_STATES = frozenset({"SUCCEEDED", "CANCELLED", "FAILED"})
"""The state machine's terminal states (control/states.py's TERMINAL; a test checks they agree:
observe/ may not import control/)."""
PENDING_STATES = frozenset({"QUEUED", "ALLOCATING"})
"""States in which a run waits for resources: the queue series counts them."""
BATCH = 5_000
"""Most events read per query; a long first fold reads in several."""
MAX_BREAKDOWN_LABELS = 64
"""Most source or length-bucket names one run's loss series carry: a script that reports names
of its own cannot grow the exposition without bound."""
BREAKDOWNS = {"source_loss": "source", "length_loss": "length_bucket"}
"""A step report's loss breakdown (runtime/source_loss.py) -> the label of its series."""
SETTLED_RECHECK_SECONDS = 60.0
"""How often a finished run that has gone quiet is read again (a release or an alert's clearing
can still be written into its log)."""


class SequencedEvent(Event, Protocol):
    """An event as the store hands it back: with its position in the log."""

    @property
    def seq(self) -> int: ...


class RunRow(Protocol):
    """The fields of a run record the series need (`runwright.store.RunRecord` has them)."""

    @property
    def run_id(self) -> str: ...

    @property
    def project(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def generation(self) -> int: ...


class RunSource(Protocol):
    """The store's two query functions the fold reads through."""

    def list_runs(
        self, limit: int = 50, states: Collection[str] | None = None, *, project: str | None = None
    ) -> Sequence[RunRow]: ...

    def events(
        self, run_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> Sequence[SequencedEvent]: ...


@dataclass
class RunFold:
    """One run's figures folded from its events up to `last_seq`."""

    run_id: str
    project: str
    state: str = "CREATED"
    generation: int = 0
    last_seq: int = 0
    steps: float = 0.0
    last_step: float | None = None
    loss: float | None = None
    tokens: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0.0))
    samples: float = 0.0
    step_buckets: list[float] = field(default_factory=lambda: [0.0] * len(STEP_SECONDS_BUCKETS))
    step_count: float = 0.0
    rank_step_seconds: float = 0.0
    input_wait_seconds: float = 0.0
    loss_breakdown: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: {key: {} for key in BREAKDOWNS}
    )
    """`source_loss` / `length_loss` -> name -> [summed per-token loss, loss tokens], over every
    rank's reports (a replayed step counts again, as its tokens do)."""
    checkpoints: float = 0.0
    checkpoint_stall_seconds: float = 0.0
    checkpoint_bytes: float = 0.0
    committed: set[str] = field(default_factory=set)
    newest_committed_step: int | None = None
    staged: dict[str, tuple[int, int | None, float]] = field(default_factory=dict)
    """Checkpoints staged and not yet committed, failed or skipped: id -> (generation, step,
    time staged)."""
    failures: Counter[str] = field(default_factory=Counter)
    recoveries: Counter[str] = field(default_factory=Counter)
    recovery_seconds: float = 0.0
    lost_steps: float = 0.0
    stale_writes: float = 0.0
    nans: float = 0.0
    pending_reason: str | None = None
    open_alerts: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Alerts fired and not cleared: alert id -> (rule, severity)."""
    alerts_fired: Counter[tuple[str, str]] = field(default_factory=Counter)
    settled_unix_s: float | None = None
    """When a read of this finished run last found nothing new (None: not settled)."""
    system: SystemFold = field(default_factory=SystemFold)
    """Each node's newest SYSTEM_SAMPLE and its byte and Xid counters."""

    def observe(self, event: Event) -> None:
        """Fold one event; unknown types change nothing."""
        attrs = event.attributes
        if event.generation > self.generation:
            self.generation = event.generation
            # A new generation restores from a committed checkpoint: the old one's saves in
            # flight will never commit.
            self.staged = {k: v for k, v in self.staged.items() if v[0] >= event.generation}
        kind = event.type
        if kind == EventType.STEP_HEALTHY:
            for report in unfold(event):  # a folded step row: each rank's report
                self._step(report)
        elif kind == EventType.CHECKPOINT_STAGED and event.checkpoint_id:
            if event.checkpoint_id not in self.committed:
                self.staged.setdefault(
                    event.checkpoint_id, (event.generation, event.step, event.time_unix_s)
                )
        elif kind == EventType.CHECKPOINT_COMMITTED:
            self._commit(event)
        elif kind in (EventType.CHECKPOINT_FAILED, EventType.CHECKPOINT_SKIPPED):
            self.staged.pop(event.checkpoint_id or "", None)
        elif kind == EventType.FAILURE_CLASSIFIED:
            self.failures[str(attrs.get("failure_class") or "unknown")] += 1
        elif kind == EventType.RECOVERY_SUCCEEDED:
            self.recoveries[str(attrs.get("failure_class") or "unknown")] += 1
            self.lost_steps += max(number(attrs, "lost_steps") or 0.0, 0.0)
            self.recovery_seconds += max(number(attrs, "recovery_seconds") or 0.0, 0.0)
        elif kind == EventType.STATE_CHANGED and attrs.get("to_state"):
            self.state = str(attrs["to_state"])
            self.pending_reason = None
        elif kind == EventType.ADMISSION_PENDING:
            self.pending_reason = str(attrs.get("code") or "unknown")
        elif kind == EventType.STALE_WRITE_REJECTED:
            self.stale_writes += float(attrs.get("reports") or 1)  # a folded row: its ranks
        elif kind == EventType.NAN_DETECTED:
            self.nans += 1
        elif kind == EventType.ALERT_FIRED:
            rule = str(attrs.get("rule") or "unknown")
            severity = str(attrs.get("severity") or "unknown")
            self.alerts_fired[(rule, severity)] += 1
            self.open_alerts[str(attrs.get("alert_id") or rule)] = (rule, severity)
        elif kind == EventType.SYSTEM_SAMPLE:
            self.system.observe(event)
        elif kind == EventType.ALERT_CLEARED:
            self.open_alerts.pop(str(attrs.get("alert_id") or attrs.get("rule") or ""), None)

    def _step(self, event: Event) -> None:
        attrs = event.attributes
        # Rank 0 (or a rank-less report) counts the step; every rank adds its tokens and time.
        if attrs.get("rank", 0) == 0:
            self.steps += 1
            if event.step is not None and (self.last_step is None or event.step > self.last_step):
                self.last_step = float(event.step)
            loss = number(attrs, "loss")
            if loss is not None:
                self.loss = loss
        for kind in TOKEN_KINDS:
            self.tokens[kind] += max(number(attrs, f"{kind}_tokens") or 0.0, 0.0)
        self.samples += max(number(attrs, "samples") or 0.0, 0.0)
        seconds = number(attrs, "step_seconds")
        if seconds is not None and seconds >= 0:
            self.step_count += 1
            self.rank_step_seconds += seconds
            for i, bound in enumerate(STEP_SECONDS_BUCKETS):
                if seconds <= bound:
                    self.step_buckets[i] += 1
        self.input_wait_seconds += max(number(attrs, "data_wait_seconds") or 0.0, 0.0)
        for key, totals in self.loss_breakdown.items():
            reported = attrs.get(key)
            if isinstance(reported, dict) and reported:
                add_breakdown(totals, _bounded(totals, reported))

    def _commit(self, event: Event) -> None:
        key = event.checkpoint_id or f"{event.generation}:{event.step}"
        self.staged.pop(key, None)
        if key in self.committed:
            return  # every rank reports the same commit
        self.committed.add(key)
        self.checkpoints += 1
        attrs = event.attributes
        self.checkpoint_stall_seconds += max(number(attrs, "stall_seconds") or 0.0, 0.0)
        self.checkpoint_bytes += max(number(attrs, "bytes") or 0.0, 0.0)
        if event.step is not None and (
            self.newest_committed_step is None or event.step > self.newest_committed_step
        ):
            self.newest_committed_step = event.step

    def durability_lag(self, now: float) -> tuple[float, float]:
        """(seconds, steps) the newest durable state trails the newest staged one: the age of the
        oldest save still in flight, and the staged step past the newest committed one."""
        if not self.staged:
            return 0.0, 0.0
        oldest = min(t for _, _, t in self.staged.values())
        steps = [s for _, s, _ in self.staged.values() if s is not None]
        lag_steps = max(steps) - (self.newest_committed_step or 0) if steps else 0
        return max(now - oldest, 0.0), float(max(lag_steps, 0))


class FleetMetrics:
    """Every run's `RunFold`, brought up to date by `refresh` and rendered by `exposition`.

    Thread-safe: concurrent scrapes refresh one after the other, so each event is folded once."""

    def __init__(self, *, run_limit: int = 100_000) -> None:
        self.run_limit = run_limit
        self.folds: dict[str, RunFold] = {}
        self._lock = threading.Lock()

    def refresh(self, source: RunSource, now: float | None = None) -> None:
        """Fold the events each run gained since the last refresh."""
        now = time.time() if now is None else now
        with self._lock:
            for run in source.list_runs(limit=self.run_limit):
                fold = self.folds.get(run.run_id)
                if fold is None:
                    fold = self.folds[run.run_id] = RunFold(run.run_id, run.project)
                terminal = run.state in TERMINAL_STATES
                if (
                    terminal
                    and fold.settled_unix_s is not None
                    and now - fold.settled_unix_s < SETTLED_RECHECK_SECONDS
                ):
                    continue
                gained = fold_new_events(fold, source)
                fold.state = run.state  # the record wins (a cancel may write no STATE_CHANGED)
                fold.generation = max(fold.generation, run.generation)
                fold.settled_unix_s = now if terminal and not gained else None

    def exposition(self, projects: Collection[str] | None, now: float | None = None) -> str:
        """The text exposition (format 0.0.4) of the runs of `projects` (None: every project)."""
        with self._lock:
            folds = [f for f in self.folds.values() if projects is None or f.project in projects]
            return generate_latest(_Families(folds, time.time() if now is None else now)).decode()


def fold_new_events(fold: RunFold, source: RunSource) -> int:
    """Fold the run's events after `fold.last_seq`, a batch at a time; the number folded."""
    folded = 0
    while True:
        batch = source.events(fold.run_id, after_seq=fold.last_seq, limit=BATCH)
        for event in batch:
            fold.observe(event)
            fold.last_seq = event.seq
        folded += len(batch)
        if len(batch) < BATCH:
            return folded


class _Families:
    """A registry-shaped view (prometheus_client calls its `collect`) of a set of folds."""

    def __init__(self, folds: list[RunFold], now: float) -> None:
        self.folds = sorted(folds, key=lambda f: f.run_id)
        self.now = now

    def collect(self) -> Iterator[Metric]:
        run = ["run_id", "project"]
        folds = self.folds

        def counter(name: str, doc: str, value: Any) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=run)
            for f in folds:
                family.add_metric([f.run_id, f.project], value(f))
            return family

        def gauge(name: str, doc: str, value: Any) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=run)
            for f in folds:
                if (v := value(f)) is not None:
                    family.add_metric([f.run_id, f.project], v)
            return family

        state = GaugeMetricFamily(
            "runwright_run_state", "1 for the run's current state.", labels=[*run, "state"]
        )
        for f in folds:
            state.add_metric([f.run_id, f.project, f.state], 1)
        yield state
        runs = GaugeMetricFamily(
            "runwright_runs", "Runs by project and state.", labels=["project", "state"]
        )
        for (project, st), n in sorted(Counter((f.project, f.state) for f in folds).items()):
            runs.add_metric([project, st], n)
        yield runs
        yield gauge("runwright_run_generation", "Current generation.", lambda f: f.generation)
        yield counter("runwright_steps", "Optimizer steps reported healthy.", lambda f: f.steps)
        yield gauge("runwright_last_step", "Highest healthy step.", lambda f: f.last_step)
        yield gauge("runwright_loss", "Latest training loss (rank 0).", lambda f: f.loss)
        tokens = CounterMetricFamily(
            "runwright_tokens",
            "Tokens of healthy steps summed over ranks, by kind (device, padded, loss).",
            labels=[*run, "kind"],
        )
        for f in folds:
            for kind in TOKEN_KINDS:
                tokens.add_metric([f.run_id, f.project, kind], f.tokens[kind])
        yield tokens
        yield counter("runwright_samples", "Samples of healthy steps.", lambda f: f.samples)
        hist = HistogramMetricFamily(
            "runwright_step_seconds", "Per-rank wall time of one optimizer step.", labels=run
        )
        for f in folds:
            buckets = [
                (repr(b), c) for b, c in zip(STEP_SECONDS_BUCKETS, f.step_buckets, strict=True)
            ]
            buckets.append(("+Inf", f.step_count))
            hist.add_metric([f.run_id, f.project], buckets, f.rank_step_seconds)
        yield hist
        yield counter(
            "runwright_rank_step_seconds",
            "Rank-seconds spent in steps (the input-wait share's denominator).",
            lambda f: f.rank_step_seconds,
        )
        yield counter(
            "runwright_input_wait_seconds",
            "Rank-seconds spent waiting for input data.",
            lambda f: f.input_wait_seconds,
        )
        for key, label in BREAKDOWNS.items():
            what = "mixture source" if label == "source" else "document length bucket"
            yield _breakdown(folds, key, label, 0, f"runwright_{label}_loss_sum",
                             f"Per-token training loss summed over the loss tokens of each "
                             f"{what}; its rate over runwright_{label}_loss_tokens' is the "
                             "mean loss.")  # fmt: skip
            yield _breakdown(folds, key, label, 1, f"runwright_{label}_loss_tokens",
                             f"Loss tokens of each {what}.")  # fmt: skip
        yield counter(
            "runwright_checkpoints_committed", "Checkpoints committed.", lambda f: f.checkpoints
        )
        yield counter(
            "runwright_checkpoint_stall_seconds",
            "Seconds training was blocked by committed checkpoints.",
            lambda f: f.checkpoint_stall_seconds,
        )
        yield counter(
            "runwright_checkpoint_written_bytes",
            "Bytes written by committed checkpoints.",
            lambda f: f.checkpoint_bytes,
        )
        yield gauge(
            "runwright_checkpoint_durability_lag_seconds",
            "Age of the oldest checkpoint staged and not yet committed (0: none in flight).",
            lambda f: f.durability_lag(self.now)[0],
        )
        yield gauge(
            "runwright_checkpoint_durability_lag_steps",
            "Steps the newest staged checkpoint is past the newest committed one (0: none).",
            lambda f: f.durability_lag(self.now)[1],
        )
        yield _by(folds, "runwright_failures", "Failures classified.", "failure_class",
                  lambda f: f.failures)  # fmt: skip
        yield _by(folds, "runwright_recoveries", "Recoveries that reached a healthy step, by "
                  "the class of the failure.", "failure_class", lambda f: f.recoveries)  # fmt: skip
        yield counter(
            "runwright_recovery_seconds", "Seconds spent recovering.", lambda f: f.recovery_seconds
        )
        yield counter(
            "runwright_lost_steps", "Steps lost to failures and replayed.", lambda f: f.lost_steps
        )
        yield counter(
            "runwright_stale_writes_rejected",
            "Writes of a fenced-off generation rejected.",
            lambda f: f.stale_writes,
        )
        yield counter("runwright_nan_detected", "Non-finite losses detected.", lambda f: f.nans)
        pending = GaugeMetricFamily(
            "runwright_queue_pending_runs",
            "Runs waiting for resources, by project and reason (an admission code of "
            "sched/reasons.py, `allocation` when the executor is placing the gang, `none` when "
            "no reason was recorded yet).",
            labels=["project", "reason"],
        )
        waiting = Counter(
            (f.project, _pending_reason(f)) for f in folds if f.state in PENDING_STATES
        )
        for (project, reason), n in sorted(waiting.items()):
            pending.add_metric([project, reason], n)
        yield pending
        alert_labels = [*run, "rule", "severity"]
        firing = GaugeMetricFamily(
            "runwright_alerts_firing", "Alerts open (fired, not cleared).", labels=alert_labels
        )
        fired = CounterMetricFamily("runwright_alerts_fired", "Alerts fired.", labels=alert_labels)
        for f in folds:
            for (rule, severity), n in sorted(Counter(f.open_alerts.values()).items()):
                firing.add_metric([f.run_id, f.project, rule, severity], n)
            for (rule, severity), n in sorted(f.alerts_fired.items()):
                fired.add_metric([f.run_id, f.project, rule, severity], n)
        yield firing
        yield fired
        yield from system_families(run, (([f.run_id, f.project], f.system) for f in folds))


def _pending_reason(fold: RunFold) -> str:
    if fold.state == "ALLOCATING":
        return "allocation"
    return fold.pending_reason or "none"


def _by(folds: list[RunFold], name: str, doc: str, label: str, counts: Any) -> Metric:
    family = CounterMetricFamily(name, doc, labels=["run_id", "project", label])
    for f in folds:
        for value, n in sorted(counts(f).items()):
            family.add_metric([f.run_id, f.project, value], n)
    return family


def _bounded(totals: dict[str, list[float]], reported: dict[str, Any]) -> dict[str, Any]:
    """`reported`, with a name the run has not seen counted as `other` once the run has
    MAX_BREAKDOWN_LABELS - 1 names (so it never has more than MAX_BREAKDOWN_LABELS)."""
    if all(str(name) in totals for name in reported):
        return reported  # the steady state: the run's sources, seen from its first step
    out: dict[str, list[float]] = {}
    for name, pair in reported.items():
        if not _pair(pair):
            continue  # add_breakdown would skip it: it must not take a label's place
        key = str(name)
        if key not in totals and key not in out:
            added = sum(1 for k in out if k not in totals)
            if len(totals) + added >= MAX_BREAKDOWN_LABELS - 1:
                key = "other"
        previous = out.get(key, [0.0, 0.0])
        out[key] = [previous[0] + pair[0], previous[1] + pair[1]]
    return out


def _pair(value: Any) -> bool:
    """A [loss sum, tokens] pair of numbers."""
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    )


def _breakdown(
    folds: list[RunFold], key: str, label: str, index: int, name: str, doc: str
) -> Metric:
    """A counter family of the loss breakdown: its summed loss (`index` 0) or its tokens (1)."""
    family = CounterMetricFamily(name, doc, labels=["run_id", "project", label])
    for f in folds:
        for value, pair in sorted(f.loss_breakdown[key].items()):
            family.add_metric([f.run_id, f.project, value], pair[index])
    return family
