"""The step loop helper: step boundaries, stop requests, the non-finite guard and the per-rank
timeline of phases.

    loop = ctx.step_loop(start_step=restored_step, total_steps=plan_steps)
    for step in loop:                        # stops early, at a boundary, on a stop request
        with loop.phase("data_wait"): batch = next(batches)
        with loop.phase("forward"): loss = model(batch)
        with loop.phase("backward"): loss.backward()
        loop.guard(step, loss=loss, grad_norm=norm)   # raises before the optimizer commits
        with loop.phase("optimizer"): opt.step()
        loop.complete(step, loss=loss, lr=lr, device_tokens=..., loss_tokens=...)
    if loop.stop_request: ...save and exit

The timeline is one JSON line per step per rank in `<run_dir>/timeline/gen<G>-rank<R>.jsonl`,
written with a plain buffered append (no fsync): it is telemetry, not state.
"""

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.layout import RunPaths
from runwright.runtime.collective_log import process_log
from runwright.runtime.stop import OverlappedStopVote, StopRequest
from runwright.runtime.tracing import rank_tracer

if TYPE_CHECKING:
    from runwright.runtime.context import RunContext

PHASES = (
    "data_wait",
    "h2d",
    "forward",
    "backward",
    "grad_sync",
    "optimizer",
    "checkpoint_stall",
    "logging",
)


_SECONDS_KEYS = {name: f"{name}_seconds" for name in PHASES}
"""A phase's field name in a step's record (formatted once, not per step)."""


class NonFiniteError(RunwrightError):
    """A loss or gradient norm was NaN/Inf; the step did not commit. The controller's policy
    (recovery.on_nan) decides between rolling back past the batch range and failing."""

    def __init__(self, step: int, what: str, value: float) -> None:
        self.step, self.what, self.value = step, what, value
        super().__init__(f"non-finite {what}={value} at step {step}; the step was not committed")


class LossSpikeError(RunwrightError):
    """The loss jumped far above its recent average; treated like a non-finite step."""


class PhaseTimer:
    """One timed phase. A slotted class rather than a @contextmanager generator: a step opens
    about seven phases, and in the benchmark's loop (caches cold after the step's compute) the
    generator form cost about 8 us per phase, a third of it here
    (benchmarks/runtime_overhead.py, in situ)."""

    __slots__ = ("_before", "_loop", "_name", "_started")

    def __init__(self, loop: "StepLoop", name: str) -> None:
        self._loop = loop
        self._name = name

    def __enter__(self) -> None:
        # What a hang's dump says this rank was doing (runtime/collective_log.py).
        log = self._loop._log
        self._before = log.phase
        log.phase = (self._name, time.monotonic(), time.time(), None)
        self._started = time.perf_counter()

    def __exit__(self, *_exc: object) -> None:
        ended = time.perf_counter()
        loop, name = self._loop, self._name
        loop._log.phase = self._before
        loop._phases[name] = loop._phases.get(name, 0.0) + ended - self._started
        if loop._traced is not None:
            loop._traced.append((name, self._started, ended))


class StepLoop:
    """Iterates optimizer steps and records what each one cost."""

    def __init__(
        self,
        ctx: "RunContext",
        start_step: int,
        total_steps: int,
        spike_factor: float | None = None,
        spike_window: int = 20,
    ) -> None:
        self.ctx = ctx
        self.start_step = start_step
        self.total_steps = total_steps
        self.stop_request: StopRequest | None = None
        self.spike_factor = spike_factor
        self._recent: list[float] = []
        self._spike_window = spike_window
        self._phases: dict[str, float] = {}
        # Tensors already read to the host this step, with their values: guard() and complete()
        # both need the loss and the grad norm, and on a GPU every .item() waits for the device.
        self._read: list[tuple[Any, float]] = []
        self._step_started = 0.0
        self._log = process_log()
        self._tracer = rank_tracer(ctx)  # None unless an OTLP endpoint is configured
        self._traced: list[tuple[str, float, float]] | None = None
        """A sampled step's phases as (name, perf_counter start, end); None: not traced."""
        self.timeline_path: Path = RunPaths(ctx.run_dir).timeline_file(ctx.generation, ctx.rank)
        self.timeline_path.parent.mkdir(parents=True, exist_ok=True)
        self._timeline = open(self.timeline_path, "a", encoding="utf-8")  # noqa: SIM115

    def __iter__(self) -> Iterator[int]:
        step = self.start_step
        vote = OverlappedStopVote()
        try:
            while step < self.total_steps:
                request = vote.boundary(self.ctx.stop_watcher.local_request())
                if request is not None:
                    self.stop_request = self.ctx.acknowledge_stop(request, step)
                    return
                step += 1
                if not self._step_started:
                    self._phases = dict.fromkeys(PHASES, 0.0)
                    self._step_started = time.perf_counter()
                self._read = []
                self._log.step = step
                if self._tracer is not None:
                    sampled = step == self.start_step + 1 or step % self._tracer.step_every == 0
                    self._traced = [] if sampled else None
                yield step
            # Not in `finally`: after an exception a peer may be gone, and waiting on its vote
            # would hide the error that ended the loop.
            vote.finish()
        finally:
            # A loop left unfinished is closed when it is collected, which may be after the
            # run closed its timeline: there is nothing left to flush then.
            if not self._timeline.closed:
                self._timeline.flush()

    def phase(self, name: str) -> "PhaseTimer":
        """`with loop.phase(name):` adds the block's seconds to the step's phase `name`."""
        return PhaseTimer(self, name)

    def marking(self, name: str, **detail: Any) -> Any:
        """`with loop.marking("data_wait"):` says what the rank does in the block, for a hang's
        dump, without timing it (its seconds are measured elsewhere, e.g. the loader's wait)."""
        return self._log.doing(name, **detail)

    def add_phase_seconds(self, name: str, seconds: float) -> None:
        """Account time measured elsewhere (e.g. the loader's input wait, a checkpoint stall)."""
        self._phases[name] = self._phases.get(name, 0.0) + seconds
        if self._traced is not None:  # measured just before this call: it ended now
            now = time.perf_counter()
            self._traced.append((name, now - seconds, now))

    def guard(self, step: int, *, loss: Any, grad_norm: Any | None = None) -> None:
        """Refuse to commit a step whose loss or gradient norm is not finite (or spiked)."""
        for what, value in (("loss", loss), ("grad_norm", grad_norm)):
            if value is None:
                continue
            number = self._number(value)
            if not math.isfinite(number):
                self.ctx.event(
                    EventType.NAN_DETECTED,
                    step=step,
                    what=what,
                    value=str(number),
                    event_id=f"g{self.ctx.generation}-r{self.ctx.rank}-nan{step}",
                )
                raise NonFiniteError(step, what, number)
        if self.spike_factor and len(self._recent) >= self._spike_window:
            mean = sum(self._recent) / len(self._recent)
            number = self._number(loss)
            if number > self.spike_factor * mean:
                self.ctx.event(EventType.LOSS_SPIKE, step=step, loss=number, mean=mean)
                raise LossSpikeError(
                    f"loss {number:.4g} at step {step} exceeds "
                    f"{self.spike_factor} x recent mean {mean:.4g}"
                )

    def complete(self, step: int, **metrics: Any) -> None:
        """Record the step: STEP_HEALTHY to the controller, a line to the timeline (the same
        figures, encoded once: each step's compute leaves this code cold, benchmarks/
        runtime_overhead.py)."""
        loss = metrics.get("loss")
        if loss is not None:
            metrics["loss"] = self._number(loss)
            self._recent = [*self._recent[-(self._spike_window - 1) :], metrics["loss"]]
        started = time.perf_counter()
        attributes = {"step_seconds": started - self._step_started}
        for name, seconds in self._phases.items():
            attributes[_SECONDS_KEYS.get(name) or f"{name}_seconds"] = round(seconds, 6)
        for name, value in metrics.items():
            attributes[name] = self._plain(value)
        # The loader's facts fill in what the script did not say (what quarantined shards cost,
        # data_lost); a skipped step trained nothing, so it takes none.
        encoded = self.ctx.report_step(step, attributes, loader_facts=not metrics.get("skipped"))
        now = time.time()
        if encoded is not None and encoded != "{}":
            line = f'{{"step": {step}, "time_unix_s": {now!r}, {encoded[1:]}\n'
        else:  # a value the channel's json refused (NaN): the timeline keeps it as json can
            line = json.dumps({"step": step, "time_unix_s": now, **attributes}) + "\n"
        self._timeline.write(line)
        if self._traced is not None and self._tracer is not None:
            self._trace_step(step, started, attributes["step_seconds"], metrics.get("loss"))
        # The next step's record starts here, so what the script does after reporting (a save
        # of this step's state: its checkpoint stall) is the next step's, and the steps' wall
        # times add up to the loop's. Reporting before the save is what keeps a step's evidence
        # when a kill lands between the commit and the report (train/loop.py).
        self._phases = dict.fromkeys(PHASES, 0.0)
        self._phases["logging"] = time.perf_counter() - started
        self._step_started = started
        self._read = []

    def _trace_step(self, step: int, ended: float, step_seconds: float, loss: Any) -> None:
        assert self._tracer is not None and self._traced is not None
        offset = time.time() - time.perf_counter()  # perf_counter readings to wall-clock seconds
        phases = [(name, a + offset, b + offset) for name, a, b in self._traced]
        attributes = {"runwright.step_seconds": step_seconds, "runwright.loss": loss}
        self._tracer.step(step, self._step_started + offset, ended + offset, phases, attributes)
        self._traced = None

    def _number(self, value: Any) -> float:
        """`value` as a float, reading a tensor from the device at most once per step."""
        if not hasattr(value, "detach"):
            return float(value)
        for tensor, number in self._read:
            if tensor is value:
                return number
        number = float(value.item())  # no detach: .item() reads a grad-tracking tensor too
        self._read.append((value, number))
        return number

    def _plain(self, value: Any) -> Any:
        """A JSON-ready metric: scalar tensors become floats (read once), others lists."""
        if not hasattr(value, "detach"):
            return value
        if value.numel() == 1:
            return self._number(value)
        return value.detach().tolist()

    def close(self) -> None:
        if not self._timeline.closed:
            self._timeline.close()
