"""OpenTelemetry traces of a run: submit, admission, allocation, launch, restore, checkpoint
save/commit, recovery and sampled training steps with their phases, exported over OTLP/HTTP.

On only when an endpoint is configured, with the SDK's own variables
(`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`;
https://opentelemetry.io/docs/specs/otel/protocol/exporter/) and not `OTEL_SDK_DISABLED=true`.
Off, nothing of OpenTelemetry is imported and each hook is one dictionary look-up; the step loop
decides once per loop. The SDK is the optional extra `otel`.

One run is one trace, whatever process writes to it: the trace id is a hash of the run id, so the
controller and every rank of every generation join it without passing context around. The tree:

    runwright.run                       (controller, at the run's end; span id from the run id)
      runwright.submit | .admission | .allocate | .recovery
      runwright.launch                  (controller; span id from the run id and generation)
        runwright.restore | runwright.step -> one child per phase | runwright.checkpoint.save
                                                                    -> .stage, .commit  (ranks)

The controller's spans are made from the run's events after the fact (each pass reads only the
events after the last one it traced), with the events' times: no controller code path is wrapped,
so the hook in the controller is one call per pass. Every span carries `runwright.run_id` and
`runwright.generation`; a rank's carry `runwright.rank`.
"""

import hashlib
import logging
import os
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from runwright.events import EventType
from runwright.observe.records import Event

STEP_EVERY_ENV = "RUNWRIGHT_TRACE_STEP_EVERY"
"""Trace one step in this many (default STEP_EVERY), and always a generation's first."""
STEP_EVERY = 10
TRACED_EVENTS = (
    EventType.JOB_SUBMITTED,
    EventType.STATE_CHANGED,
    EventType.ADMISSION_PENDING,
    EventType.WORKER_GROUP_LAUNCHED,
    EventType.RECOVERY_STARTED,
    EventType.RECOVERY_SUCCEEDED,
    EventType.RUN_FINISHED,
)
"""What the controller's spans are made of."""
MAX_TRACED_RUNS = 10_000
"""Runs the controller remembers having traced; finished ones are forgotten beyond it (a run
read again from sequence 0 would be traced twice)."""
_lock = threading.Lock()
_log = logging.getLogger("runwright.tracing")
_state: dict[str, Any] = {}


def endpoint() -> str | None:
    """The OTLP/HTTP traces endpoint configured in the environment, or None (tracing off)."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    given = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return given or None


def trace_id_of(run_id: str) -> int:
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:32], 16) or 1


def span_id_of(run_id: str, *parts: object) -> int:
    text = "/".join([run_id, *map(str, parts)])
    return int(hashlib.sha256(text.encode()).hexdigest()[:16], 16) or 1


class _Tracer:
    """The SDK's tracer with an id generator that can be told the next ids (for the spans whose
    ids other processes compute: the run and each generation's launch)."""

    def __init__(self, role: str) -> None:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        fixed = threading.local()
        # The SDK's RandomIdGenerator draws from the `random` module, which a training script
        # seeds: every generation's ranks would then draw the same span ids. The OS's do not.
        system = random.SystemRandom()

        class Ids(IdGenerator):
            def generate_span_id(self) -> int:
                value = getattr(fixed, "span_id", None)
                fixed.span_id = None
                return value or system.getrandbits(64) or 1

            def generate_trace_id(self) -> int:
                value = getattr(fixed, "trace_id", None)
                fixed.trace_id = None
                return value or system.getrandbits(128) or 1

        from runwright import __version__

        resource = Resource.create(
            {
                "service.name": os.environ.get("OTEL_SERVICE_NAME", "runwright"),
                "service.version": __version__,
                "runwright.process": role,
            }
        )
        self.provider = TracerProvider(resource=resource, id_generator=Ids())
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("runwright")
        self._trace, self._fixed = trace, fixed

    def emit(
        self,
        name: str,
        start_s: float,
        end_s: float,
        attributes: Mapping[str, Any],
        *,
        run_id: str,
        parent: int | None,
        span_id: int | None = None,
    ) -> int:
        """Record a finished span of run `run_id` under span `parent` (None: the trace's root);
        its span id (`span_id` when given)."""
        from opentelemetry.context import Context
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        trace = self._trace
        trace_id = trace_id_of(run_id)
        if parent is None:
            context = Context()
            self._fixed.trace_id = trace_id
        else:
            remote = SpanContext(trace_id, parent, True, TraceFlags(TraceFlags.SAMPLED))
            context = trace.set_span_in_context(NonRecordingSpan(remote))
        self._fixed.span_id = span_id
        span = self.tracer.start_span(
            name,
            context=context,
            start_time=int(start_s * 1e9),
            attributes={k: v for k, v in attributes.items() if v is not None},
        )
        span.end(end_time=int(max(end_s, start_s) * 1e9))
        return span.get_span_context().span_id

    def flush(self) -> None:
        self.provider.force_flush(10_000)


def tracer(role: str) -> _Tracer | None:
    """This process's tracer, made on first use; None when tracing is off."""
    where = endpoint()
    if where is None:
        return None
    with _lock:
        if _state.get("endpoint") != where:
            _state["endpoint"] = where
            try:
                _state["tracer"] = _Tracer(role)
            except ImportError as exc:
                # Traces are telemetry: a missing SDK costs the traces, never the run.
                _log.warning("an OTLP endpoint is set but %s: install runwright[otel]", exc)
                _state["tracer"] = None
        return _state["tracer"]


def flush() -> None:
    """Send the spans still buffered (a process about to exit; the SDK also does at exit)."""
    made = _state.get("tracer")
    if made is not None:
        made.flush()


# -- the controller ---------------------------------------------------------------------------


class RunTrace:
    """What the controller has traced of one run: where it stopped reading and open intervals."""

    def __init__(self, run_id: str, created_unix_s: float) -> None:
        self.run_id = run_id
        self.created_unix_s = created_unix_s
        self.after_seq = 0
        self.entered: dict[str, tuple[float, int]] = {}
        """State -> (time entered, generation) for the state the run is in."""
        self.pending: list[str] = []
        self.recovery: Event | None = None
        self.ended = False

    def observe(self, t: _Tracer, event: Event) -> None:
        run_id, root = self.run_id, span_id_of(self.run_id, "run")
        attrs = event.attributes
        ids = {"runwright.run_id": run_id, "runwright.generation": event.generation}
        kind = event.type
        if kind == EventType.JOB_SUBMITTED:
            t.emit("runwright.submit", self.created_unix_s, event.time_unix_s,
                   {**ids, "runwright.spec_hash": attrs.get("spec_hash"),
                    "runwright.project": attrs.get("project")},
                   run_id=run_id, parent=root)  # fmt: skip
        elif kind == EventType.ADMISSION_PENDING:
            code = str(attrs.get("code") or "unknown")
            if code not in self.pending:
                self.pending.append(code)
        elif kind == EventType.STATE_CHANGED and attrs.get("to_state"):
            before, now = str(attrs.get("from_state") or ""), str(attrs["to_state"])
            opened = self.entered.pop(before, None)
            if opened is not None and before == "QUEUED":
                t.emit("runwright.admission", opened[0], event.time_unix_s,
                       {**ids, "runwright.pending_reasons": self.pending or None,
                        "runwright.admitted": now == "ALLOCATING"},
                       run_id=run_id, parent=root)  # fmt: skip
                self.pending = []
            elif opened is not None and before == "ALLOCATING":
                t.emit("runwright.allocate", opened[0], event.time_unix_s, ids,
                       run_id=run_id, parent=root)  # fmt: skip
            self.entered = {now: (event.time_unix_s, event.generation)}
        elif kind == EventType.WORKER_GROUP_LAUNCHED:
            started = self.entered.get("STARTING", (event.time_unix_s, 0))[0]
            t.emit("runwright.launch", started, event.time_unix_s,
                   {**ids, "runwright.world_size": attrs.get("world_size"),
                    "runwright.executor": attrs.get("executor")},
                   run_id=run_id, parent=root,
                   span_id=span_id_of(run_id, "launch", event.generation))  # fmt: skip
        elif kind == EventType.RECOVERY_STARTED:
            self.recovery = event
        elif kind == EventType.RECOVERY_SUCCEEDED:
            began = self.recovery.time_unix_s if self.recovery is not None else event.time_unix_s
            t.emit("runwright.recovery", began, event.time_unix_s,
                   {**ids, "runwright.failure_class": attrs.get("failure_class"),
                    "runwright.lost_steps": attrs.get("lost_steps")},
                   run_id=run_id, parent=root)  # fmt: skip
            self.recovery = None
        elif kind == EventType.RUN_FINISHED and not self.ended:
            self.ended = True
            t.emit("runwright.run", self.created_unix_s, event.time_unix_s,
                   {**ids, "runwright.state": attrs.get("state"),
                    "runwright.terminal_reason": attrs.get("reason")},
                   run_id=run_id, parent=None, span_id=root)  # fmt: skip


def trace_run(source: Any, run: Any) -> None:
    """The controller's hook, once per pass over `run` (a run record): the spans of the events
    the run gained since the last pass. `source` has the store's `events` query."""
    t = tracer("controller")
    if t is None:
        return
    runs = _state.setdefault("runs", {})
    traced = runs.get(run.run_id)
    if traced is None:
        traced = runs[run.run_id] = RunTrace(run.run_id, run.created_unix_s)
    for event in source.events(run.run_id, after_seq=traced.after_seq, types=TRACED_EVENTS):
        traced.after_seq = event.seq
        traced.observe(t, event)
    if len(runs) > MAX_TRACED_RUNS:  # forget finished runs, oldest first
        for run_id in [r for r, v in runs.items() if v.ended][: len(runs) // 2]:
            runs.pop(run_id)


# -- a rank -----------------------------------------------------------------------------------


class RankTracer:
    """Spans of one training process: its generation's launch span is their parent."""

    def __init__(self, run_id: str, generation: int, rank: int) -> None:
        self.t = tracer("worker")
        self.run_id, self.generation, self.rank = run_id, generation, rank
        self.parent = span_id_of(run_id, "launch", generation)
        self.ids = {
            "runwright.run_id": run_id,
            "runwright.generation": generation,
            "runwright.rank": rank,
        }
        every = os.environ.get(STEP_EVERY_ENV, "")
        self.step_every = max(int(every), 1) if every.isdigit() else STEP_EVERY
        self._staged: dict[str, float] = {}

    @property
    def on(self) -> bool:
        return self.t is not None

    def step(
        self,
        step: int,
        start_s: float,
        end_s: float,
        phases: list[tuple[str, float, float]],
        attributes: Mapping[str, Any],
    ) -> None:
        """A sampled step [start_s, end_s] and its phases as (name, start, end), seconds."""
        if self.t is None:
            return
        span = self.t.emit("runwright.step", start_s, end_s,
                           {**self.ids, "runwright.step": step, **attributes},
                           run_id=self.run_id, parent=self.parent)  # fmt: skip
        for name, began, ended in phases:
            self.t.emit(f"runwright.step.{name}", began, ended,
                        {**self.ids, "runwright.step": step},
                        run_id=self.run_id, parent=span)  # fmt: skip

    def checkpoint_event(
        self, kind: str, step: int | None, checkpoint_id: str | None, at: float, attrs: Mapping
    ) -> None:
        """Spans from the checkpointer's events: a restore, a save staged then committed."""
        if self.t is None:
            return
        ids = {**self.ids, "runwright.step": step, "runwright.checkpoint_id": checkpoint_id}
        if kind == EventType.RESTORED:
            seconds = float(attrs.get("seconds") or 0.0)
            self.t.emit("runwright.restore", at - seconds, at,
                        {**ids, "runwright.fresh": bool(attrs.get("fresh")),
                         "runwright.restore_mode": attrs.get("mode")},
                        run_id=self.run_id, parent=self.parent)  # fmt: skip
        elif kind == EventType.CHECKPOINT_STAGED and checkpoint_id:
            self._staged[checkpoint_id] = at
        elif kind == EventType.CHECKPOINT_COMMITTED:
            persist = float(attrs.get("persist_seconds") or 0.0)
            stage = float(attrs.get("stage") or 0.0)
            began = self._staged.pop(checkpoint_id or "", at - persist - stage)
            save = self.t.emit("runwright.checkpoint.save", began, at,
                               {**ids, "runwright.bytes": attrs.get("bytes"),
                                "runwright.stall_seconds": attrs.get("stall_seconds")},
                               run_id=self.run_id, parent=self.parent)  # fmt: skip
            self.t.emit("runwright.checkpoint.stage", began, began + stage, ids,
                        run_id=self.run_id, parent=save)  # fmt: skip
            self.t.emit("runwright.checkpoint.commit", at - persist, at, ids,
                        run_id=self.run_id, parent=save)  # fmt: skip


def wall_of(perf: float) -> float:
    """A `time.perf_counter()` reading as wall-clock seconds since the epoch."""
    return time.time() - (time.perf_counter() - perf)
