"""Rank 0's copy of a run's metrics to the experiment trackers its spec names
(`observability.trackers`: TensorBoard, MLflow); docs/trackers.md.

The run context hands every event it sends to `TrackerSink.observe` (runtime/context.py), on the
training thread, so that call only picks the step's numbers out and appends them to a buffer
(a few microseconds: benchmarks/tracker_overhead.py). Each tracker has a writer thread of its
own, which opens it at once (its imports, the MLflow run, its parameters), then sends what is
buffered every `flush_steps` steps or `flush_seconds`, whichever comes first, and at close
attaches the evidence and closes the tracker's run.

A tracker's failure never fails or slows training: the first failure of each tracker is logged,
every one is counted, and the run goes on. A tracker that could not start is tried again at the
next flush, holding at most MAX_PENDING_POINTS (the oldest are dropped and counted); points a
started tracker refused are dropped and counted. The counts and where each tracker wrote are in
`<run folder>/trackers.json`, which `runwright report` reads to attach report.json/html to the
same MLflow run.
"""

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runwright.events import EventType
from runwright.layout import RunPaths
from runwright.observe.tracker_backends import (
    TAG_PREFIX,
    MLflowTracker,
    Point,
    RunFacts,
    TensorBoardTracker,
    Tracker,
    attach_files,
    flatten,
)
from runwright.spec import JobSpec

log = logging.getLogger(__name__)

TRACKERS_FILE = "trackers.json"
"""In the run folder: where each tracker wrote, what it wrote and what failed. (Named here, not
in runwright.layout, because only this module and its readers know it.)"""
METRICS = ("loss", "lr", "grad_norm", "step_seconds", "data_wait_seconds")
"""Step event attributes sent as they are; `tokens_per_second` is derived (see `_points`)."""
_NUMBER = (int, float)
MAX_PENDING_POINTS = 100_000
"""Points held per tracker while it cannot start: ~17 minutes of 6 metrics at 100 steps/s."""


class _Writer:
    """One tracker and the thread that feeds it, so a slow tracker never holds up another."""

    def __init__(self, tracker: Tracker, facts: RunFacts, flush_seconds: float) -> None:
        self.tracker = tracker
        self.started = False
        self.points_written = 0
        self.points_dropped = 0
        self.failures = 0
        self.first_error: str | None = None
        self._facts = facts
        self._flush_seconds = flush_seconds
        self._lock = threading.Lock()
        self._buffer: list[Point] = []
        self._pending: deque[Point] = deque()
        self._wake = threading.Event()
        self._closing = False
        self._evidence: list[Path] = []
        self._completed = False
        self.on_started: Callable[[], None] = lambda: None
        self.thread = threading.Thread(
            target=self._run, name=f"runwright-{tracker.name}", daemon=True
        )

    # -- the training thread -------------------------------------------------------------------
    def add(self, points: list[Point], flush: bool) -> None:
        with self._lock:
            self._buffer.extend(points)
        if flush:
            self._wake.set()

    def close(self, evidence: list[Path], completed: bool) -> None:
        with self._lock:
            self._closing = True
            self._evidence = evidence
            self._completed = completed
        self._wake.set()

    # -- its own thread ------------------------------------------------------------------------
    def _run(self) -> None:
        self._start()  # at once: the imports and the run's parameters need not wait for steps
        while True:
            self._wake.wait(self._flush_seconds)
            self._wake.clear()
            with self._lock:
                batch, self._buffer = self._buffer, []
                closing = self._closing
            self._send(batch)
            if closing:
                if self.started:
                    try:
                        self.tracker.finish(self._evidence, self._completed)
                    except Exception as exc:
                        self._fail("finish", exc)
                return

    def _start(self) -> None:
        try:
            self.tracker.start(self._facts)
        except Exception as exc:
            self._fail("start", exc)
            return
        self.started = True
        self.on_started()

    def _send(self, batch: list[Point]) -> None:
        # While the tracker cannot start, points wait here; past MAX_PENDING_POINTS the oldest
        # are dropped and counted.
        self._pending.extend(batch)
        overflow = len(self._pending) - MAX_PENDING_POINTS
        for _ in range(max(0, overflow)):
            self._pending.popleft()
        self.points_dropped += max(0, overflow)
        if not self.started:
            self._start()
            if not self.started:
                return
        points = list(self._pending)
        self._pending.clear()
        if not points:
            return
        try:
            self.tracker.write(points)
            self.points_written += len(points)
        except Exception as exc:
            self.points_dropped += len(points)
            self._fail("write", exc)

    def _fail(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        if self.first_error is None:
            self.first_error = f"{what}: {type(exc).__name__}: {exc}"
            log.warning(
                "runwright: %s at %s failed (%s); training goes on, later failures are only "
                "counted (trackers.json)",
                self.tracker.name,
                self.tracker.where,
                self.first_error,
            )

    def status(self) -> dict[str, Any]:
        with self._lock:
            unsent = len(self._buffer)
        return {
            **self.tracker.status(),
            "started": self.started,
            "points_written": self.points_written,
            # What never reached the tracker: refused, dropped, or still held at the end.
            "points_dropped": self.points_dropped + len(self._pending) + unsent,
            "failures": self.failures,
            "first_error": self.first_error,
            "finished": not self.thread.is_alive(),
        }


class TrackerSink:
    """Buffers rank 0's step metrics and sends them to its trackers, each from its own thread."""

    def __init__(
        self,
        trackers: list[Tracker],
        facts: RunFacts,
        run_dir: Path,
        *,
        dp_size: int,
        flush_steps: int,
        flush_seconds: float,
        finish_seconds: float,
    ) -> None:
        self._facts = facts
        self._run_dir = run_dir
        self._dp_size = dp_size
        self._flush_steps = flush_steps
        self._finish_seconds = finish_seconds
        self._steps_since_flush = 0
        self._last_step: tuple[int, float] | None = None
        self._writers = [_Writer(t, facts, flush_seconds) for t in trackers]
        for writer in self._writers:
            # trackers.json names a run as soon as it exists (a report may want it mid-run).
            writer.on_started = lambda: self._write_status(self.status())
            writer.thread.start()

    # -- the training thread -------------------------------------------------------------------
    def observe(self, type_: str, step: int | None, attributes: dict[str, Any]) -> None:
        """Take the numbers of a STEP_HEALTHY; every other event is ignored. Never raises."""
        if type_ != EventType.STEP_HEALTHY or step is None:
            return
        try:
            points = self._points(step, attributes, time.time())
        except (TypeError, ValueError, OverflowError):  # a script's odd value: not a failure
            return
        self._steps_since_flush += 1
        flush = self._steps_since_flush >= self._flush_steps
        if flush:
            self._steps_since_flush = 0
        for writer in self._writers:
            writer.add(points, flush)

    def _points(self, step: int, attributes: dict[str, Any], now: float) -> list[Point]:
        values = {}
        for name in METRICS:
            value = attributes.get(name)
            if isinstance(value, _NUMBER) and not isinstance(value, bool):
                values[name] = float(value)
        # The two-line integration reports no step time: the time since the previous step is it.
        previous, self._last_step = self._last_step, (step, now)
        if "step_seconds" not in values and previous is not None and step > previous[0]:
            values["step_seconds"] = (now - previous[1]) / (step - previous[0])
        tokens = attributes.get("device_tokens")
        seconds = values.get("step_seconds")
        if isinstance(tokens, _NUMBER) and seconds:
            # rank 0's tokens x data-parallel ranks (equal shares of the global batch) / its step
            # time: e.g. 1,024 tokens x 2 ranks / 0.5 s = 4,096 tokens/s for the whole run.
            values["tokens_per_second"] = tokens * self._dp_size / seconds
        return [Point(k, v, step, now) for k, v in values.items() if math.isfinite(v)]

    def close(self, *, completed: bool) -> dict[str, Any]:
        """Send what is buffered, attach the run's evidence (its final parameter digests, a
        report already written), close the trackers' runs and write trackers.json. Waits at
        most `finish_seconds` (spec `observability.trackers`), so a dead server cannot hold
        the exit up to the stop grace; what was not sent by then is counted as dropped."""
        paths = RunPaths(self._run_dir)
        evidence = [paths.final_parameters, paths.report / "report.json"]
        evidence = [p for p in evidence if p.is_file()]
        for writer in self._writers:
            writer.close(evidence, completed)
        deadline = time.monotonic() + self._finish_seconds
        for writer in self._writers:
            writer.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        status = self.status()
        self._write_status(status)
        return status

    # -- status ----------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "run_id": self._facts.run_id,
            "generation": self._facts.generation,
            **{w.tracker.name: w.status() for w in self._writers},
        }

    def _write_status(self, status: dict[str, Any]) -> None:
        path = self._run_dir / TRACKERS_FILE
        try:
            tmp = path.with_name(f"{TRACKERS_FILE}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(status, indent=1) + "\n")
            tmp.replace(path)
        except OSError as exc:
            log.warning("runwright: cannot write %s: %s", path, exc)


def run_facts(spec: JobSpec, run_id: str, generation: int) -> RunFacts:
    """The run's identity, its spec and plan as parameters, and both as JSON evidence."""
    spec_json = spec.model_dump(mode="json")
    plan = spec.plan.values()
    governance = spec.governance
    tags = {
        f"{TAG_PREFIX}run_id": run_id,
        f"{TAG_PREFIX}spec_hash": spec.spec_hash,
        f"{TAG_PREFIX}name": spec.name,
        f"{TAG_PREFIX}owner": governance.owner,
        **{f"{TAG_PREFIX}tag.{k}": v for k, v in governance.tags.items()},
    }
    if governance.hypothesis:
        tags[f"{TAG_PREFIX}hypothesis"] = governance.hypothesis
    return RunFacts(
        run_id=run_id,
        name=spec.name,
        generation=generation,
        spec_hash=spec.spec_hash,
        params=flatten(spec_json) | flatten({"plan": plan}),
        tags=tags,
        evidence={
            "spec.json": json.dumps(spec_json, indent=1, sort_keys=True),
            "plan.json": spec.plan.model_dump_json(indent=1),
        },
    )


def open_trackers(
    spec: JobSpec, run_id: str, generation: int, run_dir: Path, dp_size: int
) -> TrackerSink | None:
    """The sink for the trackers `spec` switches on, or None when it names none."""
    config = spec.observability.trackers
    trackers: list[Tracker] = []
    if config.tensorboard is not None:
        log_dir = (
            Path(config.tensorboard.log_dir).expanduser() / run_id
            if config.tensorboard.log_dir
            else run_dir / "tensorboard"
        )
        trackers.append(TensorBoardTracker(log_dir))
    if config.mlflow is not None:
        trackers.append(MLflowTracker(config.mlflow, default_experiment=spec.name))
    if not trackers:
        return None
    return TrackerSink(
        trackers,
        run_facts(spec, run_id, generation),
        run_dir,
        dp_size=dp_size,
        flush_steps=config.flush_steps,
        flush_seconds=config.flush_seconds,
        finish_seconds=config.finish_seconds,
    )


def attach_report(run_dir: Path, files: list[Path]) -> list[str]:
    """Attach a written report (report.json, report.html) to the MLflow run the run's rank 0
    wrote to, if it wrote to one (its trackers.json says); one line per tracker saying where the
    files went or why they did not. Never raises: the report is written either way."""
    path = run_dir / TRACKERS_FILE
    try:
        status = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        return [f"not attached to the run's trackers: {path} is unreadable ({exc})"]
    if not isinstance(status, dict) or not (status.get("mlflow") or {}).get("run_id"):
        return []
    try:
        return [f"attached to {where}" for where in attach_files(status, files)]
    except Exception as exc:  # the tracking server is down, the run deleted, ...
        where = status["mlflow"].get("tracking_uri")
        return [f"not attached to MLflow at {where}: {type(exc).__name__}: {exc}"]
