"""One run of a baseline's workload (govern/baseline.py): submitted to an in-process controller
on the local executor, its drill fault injected from outside when the run reaches the fault's
step (as `runwright drill` injects a fault: drill/injectors.py), driven to its end, and measured
(govern/baseline_figures.py)."""

import time
from pathlib import Path

from rich.console import Console

from runwright.demo.run import RunProgress
from runwright.drill.drivers import InProcessDriver
from runwright.drill.injectors import Injection, Injector, Target
from runwright.drill.outcome import FaultResult, measure
from runwright.drill.runner import check_faults, fault_step
from runwright.errors import RunwrightError
from runwright.events import EventType, NewEvent
from runwright.govern.baseline_figures import WorkloadFigures, workload_figures
from runwright.spec import JobSpec
from runwright.store import EventRecord, Store

RUN_LIMIT_SECONDS = 1800.0
"""The most one run of the workload may take before it is cancelled (a hang)."""


class BaselineError(RunwrightError):
    """A baseline cannot be recorded or checked; the message says why and what to do."""


class _Hook:
    """The run's display and its fault's injector (as the drill drives a fault's run)."""

    def __init__(self, store: Store, run_id: str, progress: RunProgress) -> None:
        self.store, self.run_id, self.progress = store, run_id, progress
        self.injector: Injector | None = None
        self.fault = ""

    def __call__(self, event: EventRecord) -> None:
        self.progress(event)
        if self.injector is None:
            return
        injection = self.injector(event)
        if injection is not None:
            self._record(event, injection)

    def _record(self, event: EventRecord, injection: Injection) -> None:
        self.store.append_event(
            NewEvent(
                event_id=f"{self.run_id}:fault:{self.fault}",
                run_id=self.run_id,
                generation=event.generation,
                type=EventType.FAULT_INJECTED,
                step=injection.step,
                time_unix_s=injection.time_unix_s,
                attributes={"fault": self.fault, "detail": injection.detail,
                            "rank": injection.rank, "pids": list(injection.pids)},
            ),
            fenced=False,
        )  # fmt: skip


def run_workload(
    root: Path,
    store: Store,
    spec: JobSpec,
    fault_name: str | None,
    workdir: Path,
    folder: Path,
    console: Console,
    image_digest: str | None = None,
) -> WorkloadFigures:
    """One run of the workload (with its fault), driven to its end and measured."""
    fault = check_faults(spec, [fault_name])[0] if fault_name else None
    step = fault_step(spec, fault) if fault else 0
    run_spec = fault.adapt(spec, step, folder) if fault else spec
    driver = InProcessDriver(store, root)
    run = driver.submit(run_spec, workdir)
    steps = int(spec.plan.total_steps.value)
    hook = _Hook(store, run.run_id, RunProgress(None, console, spec.name, steps, frozenset()))
    began = time.monotonic()
    if fault:
        hook.fault = fault.name
        hook.injector = fault.injector(
            Target(store=store, root=root, run_id=run.run_id, step=step,
                   checkpoints_before=fault.checkpoints_before, folder=folder, spec=run_spec)
        )  # fmt: skip
    try:
        ended = driver.drive(run.run_id, hook, RUN_LIMIT_SECONDS)
    finally:
        cleanup = hook.injector.finish() if hook.injector else None
    if ended.state != "SUCCEEDED":
        raise BaselineError(
            f"the workload's run {ended.run_id} ended {ended.state} ({ended.state_detail}): a "
            f"baseline needs a run that succeeds (runwright status {ended.run_id})"
        )
    result: FaultResult | None = None
    if fault:
        result = measure(
            fault=fault.name, mechanism=fault.mechanism, expected=fault.expect(run_spec),
            detected_by=fault.detected_by, run=ended, events=store.events(run.run_id),
            comparison=None, wall_seconds=time.monotonic() - began, cleanup=cleanup,
        )  # fmt: skip
    return workload_figures(store, run.run_id, spec, result, image_digest)
