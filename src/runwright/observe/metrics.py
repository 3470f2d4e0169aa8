"""Prometheus metrics of one run, updated from its events, and their text exposition.

Naming follows the Prometheus guide (https://prometheus.io/docs/practices/naming/): the
`runwright_` prefix, base units (seconds, tokens), `_total` on counters. Labels stay bounded:
token kind, failure class (the spec's taxonomy) and run state (the state machine); never a step,
rank or sample id (seed 000: "keep run/step high-cardinality facts in traces and logs; metrics
use controlled aggregation dimensions"). One registry describes one run.
"""

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric

from runwright.events import EventType
from runwright.observe.rank_steps import unfold
from runwright.observe.records import Event
from runwright.observe.system_series import SystemFold, system_families
from runwright.observe.timeline import TOKEN_KINDS, number

# Step-time buckets in seconds: from a tiny CPU model (10 ms) to a large synchronous step (2 min).
STEP_SECONDS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class RunMetrics:
    """A `CollectorRegistry` of runwright metrics fed one event at a time."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.steps = Counter("runwright_steps", "Optimizer steps reported healthy.", registry=r)
        self.tokens = Counter(
            "runwright_tokens",
            "Tokens of healthy steps, summed over ranks, by kind (device, padded, loss).",
            ["kind"],
            registry=r,
        )
        self.samples = Counter("runwright_samples", "Samples of healthy steps.", registry=r)
        self.step_seconds = Histogram(
            "runwright_step_seconds",
            "Per-rank wall time of one optimizer step.",
            buckets=STEP_SECONDS_BUCKETS,
            registry=r,
        )
        self.input_wait = Counter(
            "runwright_input_wait_seconds",
            "Rank-seconds spent waiting for input data.",
            registry=r,
        )
        self.rank_step = Counter(
            "runwright_rank_step_seconds",
            "Rank-seconds spent in steps (the input-wait share's denominator).",
            registry=r,
        )
        self.checkpoints = Counter(
            "runwright_checkpoints_committed", "Checkpoints committed.", registry=r
        )
        self.checkpoint_stall = Counter(
            "runwright_checkpoint_stall_seconds",
            "Seconds training was blocked by committed checkpoints.",
            registry=r,
        )
        self.checkpoint_bytes = Counter(
            "runwright_checkpoint_bytes", "Bytes written by committed checkpoints.", registry=r
        )
        self.failures = Counter(
            "runwright_failures", "Failures classified.", ["failure_class"], registry=r
        )
        self.recoveries = Counter(
            "runwright_recoveries",
            "Recoveries that reached a healthy step, by the class of the failure.",
            ["failure_class"],
            registry=r,
        )
        self.lost_steps = Counter(
            "runwright_lost_steps", "Steps lost to failures and replayed.", registry=r
        )
        self.replayed_tokens = Counter(
            "runwright_replayed_tokens", "Tokens re-executed after restores.", registry=r
        )
        self.recovery_seconds = Counter(
            "runwright_recovery_seconds", "Seconds spent recovering.", registry=r
        )
        self.stale_writes = Counter(
            "runwright_stale_writes_rejected", "Writes of a stale generation rejected.", registry=r
        )
        self.nans = Counter("runwright_nan_detected", "Non-finite losses detected.", registry=r)
        self.budget_warnings = Counter(
            "runwright_budget_warnings", "Budget warnings raised.", registry=r
        )
        self.state = Gauge(
            "runwright_run_state",
            "1 for the run's current state, 0 otherwise.",
            ["state"],
            registry=r,
        )
        self.generation = Gauge("runwright_generation", "Current generation.", registry=r)
        self.world_size = Gauge("runwright_world_size", "Ranks of the worker group.", registry=r)
        self.loss = Gauge("runwright_loss", "Latest training loss (rank mean).", registry=r)
        self.lr = Gauge("runwright_learning_rate", "Latest learning rate.", registry=r)
        self.last_step = Gauge("runwright_last_step", "Highest healthy step.", registry=r)
        self.system = SystemFold()
        """Each node's newest SYSTEM_SAMPLE (node-labelled gauges and counters)."""
        r.register(_SystemCollector(self.system))
        self._committed: set[str] = set()
        self._last_failure_class = "unknown"
        self._current_state: str | None = None
        self._highest_step = -1

    def observe(self, event: Event) -> None:
        """Update the metrics from one event; unknown event types change nothing."""
        attrs = event.attributes
        self.generation.set(event.generation)
        if event.world_size:
            self.world_size.set(event.world_size)
        if event.type == EventType.STEP_HEALTHY:
            for report in unfold(event):  # a folded step row: each rank's report
                self._step(report)
        elif event.type == EventType.CHECKPOINT_COMMITTED:
            key = event.checkpoint_id or f"{event.generation}:{event.step}"
            if key in self._committed:
                return  # every rank reports the same commit
            self._committed.add(key)
            self.checkpoints.inc()
            stall = number(attrs, "stall_seconds")
            self.checkpoint_stall.inc(max(stall if stall is not None else 0.0, 0.0))
            self.checkpoint_bytes.inc(max(number(attrs, "bytes") or 0.0, 0.0))
        elif event.type == EventType.FAILURE_CLASSIFIED:
            self._last_failure_class = str(attrs.get("failure_class") or "unknown")
            self.failures.labels(failure_class=self._last_failure_class).inc()
        elif event.type == EventType.RECOVERY_SUCCEEDED:
            failure_class = str(attrs.get("failure_class") or self._last_failure_class)
            self.recoveries.labels(failure_class=failure_class).inc()
            self.lost_steps.inc(max(number(attrs, "lost_steps") or 0.0, 0.0))
            self.replayed_tokens.inc(max(number(attrs, "replayed_tokens") or 0.0, 0.0))
            self.recovery_seconds.inc(max(number(attrs, "recovery_seconds") or 0.0, 0.0))
        elif event.type == EventType.STATE_CHANGED and attrs.get("to_state"):
            self.set_state(str(attrs["to_state"]))
        elif event.type == EventType.WORKER_GROUP_LAUNCHED and number(attrs, "world_size"):
            self.world_size.set(number(attrs, "world_size") or 0.0)
        elif event.type == EventType.STALE_WRITE_REJECTED:
            self.stale_writes.inc(number(attrs, "reports") or 1.0)  # a folded row: its ranks
        elif event.type == EventType.NAN_DETECTED:
            self.nans.inc()
        elif event.type == EventType.BUDGET_WARNING:
            self.budget_warnings.inc()
        elif event.type == EventType.SYSTEM_SAMPLE:
            self.system.observe(event)

    def _step(self, event: Event) -> None:
        attrs = event.attributes
        # One rank (rank 0, or a rank-less report) counts the step; every rank adds its tokens.
        if attrs.get("rank", 0) == 0:
            self.steps.inc()
            if event.step is not None and event.step > self._highest_step:
                self._highest_step = event.step
                self.last_step.set(event.step)
            loss = number(attrs, "loss")
            if loss is not None:
                self.loss.set(loss)
            lr = number(attrs, "lr")
            if lr is not None:
                self.lr.set(lr)
        for kind in TOKEN_KINDS:
            self.tokens.labels(kind=kind).inc(max(number(attrs, f"{kind}_tokens") or 0.0, 0.0))
        self.samples.inc(max(number(attrs, "samples") or 0.0, 0.0))
        seconds = number(attrs, "step_seconds")
        if seconds is not None and seconds >= 0:
            self.step_seconds.observe(seconds)
            self.rank_step.inc(seconds)
        self.input_wait.inc(max(number(attrs, "data_wait_seconds") or 0.0, 0.0))

    def set_state(self, state: str) -> None:
        """Mark `state` as the run's current state (1) and the previous one 0."""
        if self._current_state is not None:
            self.state.labels(state=self._current_state).set(0)
        self.state.labels(state=state).set(1)
        self._current_state = state

    def exposition(self) -> str:
        """The registry in the Prometheus text exposition format (version 0.0.4)."""
        return render(self.registry)


class _SystemCollector:
    """Renders a run's system fold in its registry (prometheus_client calls `collect`)."""

    def __init__(self, fold: SystemFold) -> None:
        self.fold = fold

    def collect(self) -> Iterator[Metric]:
        return system_families([], [([], self.fold)])


def run_metrics(events: Iterable[Event], state: str | None = None) -> RunMetrics:
    """Metrics of a run from its whole event log; `state` (the run record's) wins over the last
    STATE_CHANGED, which a cancel written straight to the store may not have."""
    metrics = RunMetrics()
    for event in events:
        metrics.observe(event)
    if state is not None:
        metrics.set_state(state)
    return metrics


def render(registry: CollectorRegistry) -> str:
    """Text exposition of any registry, as a `/metrics` endpoint would serve it."""
    return generate_latest(registry).decode("utf-8")
