"""`runwright drill`: the fault matrix against real runs of one spec (docs/drill.md).

1. the spec: the given one, or the reference trainer on the demo's dataset with the drill's
   shorter detection timeouts (`DRILL_SETTINGS`);
2. every fault is checked against it first (drill/faults.py `refusal`), so a drill that cannot
   run as asked says why before anything starts;
3. one fault-free reference run, shared by every fault;
4. each fault in turn: a fresh run of the spec (with the fault's knob or second node) under its
   own run id in the same store, the fault injected from outside when the run reaches its step
   (drill/injectors.py), the run driven to its end, whatever the fault left undone, the outcome
   measured from the run's events (drill/outcome.py) and compared with the reference;
5. drill.json and drill.html (drill/page.py) in the drill's folder.
"""

import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from runwright.control.supervise import write_atomically
from runwright.demo.run import RunProgress, build_demo_dataset, demo_spec
from runwright.drill.drivers import InProcessDriver, ProcessDriver
from runwright.drill.faults import FAULTS, Fault
from runwright.drill.injectors import Injection, Injector, Target
from runwright.drill.outcome import FaultResult, measure
from runwright.drill.page import render_page
from runwright.errors import DrillError, RunwrightError
from runwright.events import EventType, NewEvent
from runwright.govern.compare import Comparison, compare_runs
from runwright.layout import drills_dir
from runwright.records import Record
from runwright.spec import JobSpec, spec_from_mapping
from runwright.spec.overrides import apply_overrides
from runwright.store import EventRecord, Store

DRILL_SETTINGS = {
    "training": {"steps": 30},
    "recovery": {
        "heartbeat_interval_seconds": 0.5,
        "heartbeat_timeout_seconds": 5,
        "progress_timeout_seconds": 45,
    },
}
"""The default spec's changes to the demo's: 30 steps hold three checkpoints (every 10), enough
for a fault after the second; a hang shows in 5 s of silence. The progress timeout is also the
allowance for a rank's first heartbeat after launch, which took up to 23 s here under a load of
8 on 2 cores (interpreter and torch imports), so 45 s keeps a slow start from reading as a
hang, at the price of a blocked collective taking that long to be noticed."""

SHOWN = frozenset(
    {
        EventType.FAULT_INJECTED,
        EventType.FAILURE_CLASSIFIED,
        EventType.RECOVERY_STARTED,
        EventType.RESTORE_FALLBACK,
        EventType.RECOVERY_SUCCEEDED,
        EventType.RECOVERY_VERIFIED,
        EventType.RECOVERY_DIVERGED,
        EventType.RECOVERY_UNVERIFIED,
        EventType.WORKER_GROUP_ADOPTED,
        EventType.CONTROLLER_TAKEOVER,
        EventType.STALE_WRITE_REJECTED,
        EventType.NAN_DETECTED,
        EventType.RUN_FINISHED,
    }
)
"""The events a run's progress display gives a line: the fault and what the platform did."""

REFERENCE_LIMIT_SECONDS = 1800.0
"""The most the fault-free reference run may take: a bound that marks a hang."""


class DrillReport(Record):
    """What `runwright drill` writes to drill.json."""

    drill_id: str
    spec_name: str
    spec_hash: str
    """The drilled spec's; a fault's run may differ by a knob or a node (its `spec_change`)."""
    reference_run_id: str
    reference_wall_seconds: float
    faults: list[FaultResult]
    ok: bool
    """Every fault ended as expected."""
    started_unix_s: float
    wall_seconds: float
    """The whole drill: reference and faults (not the dataset build)."""
    json_path: str
    html_path: str


def default_spec(
    root: Path, store: Store, overrides: Sequence[str] = (), *, console: Console, show: bool
) -> JobSpec:
    """The reference trainer on the demo's dataset (built once per root), with DRILL_SETTINGS
    and then `--set` overrides."""
    built = build_demo_dataset(root, store, console=console, show=show)
    data = demo_spec(built.folder, built.dataset_id).model_dump(mode="json")
    for section, values in DRILL_SETTINGS.items():
        data[section].update(values)
    data["name"] = "drill"
    if not overrides:
        return spec_from_mapping(data, "the drill's default spec")
    source = f"the drill's default spec with --set {' '.join(overrides)}"
    return spec_from_mapping(apply_overrides(data, overrides), source)


def fault_step(spec: JobSpec, fault: Fault) -> int:
    """The step a fault is aimed at: a third of an interval past the checkpoints it needs, so
    the restore replays real steps and the fault lands before the next save (0: the launch)."""
    if fault.at_launch:
        return 0
    every = int(spec.checkpoint.interval.every_steps or 0)
    return fault.checkpoints_before * every + max(1, every // 3)


def check_faults(spec: JobSpec, names: list[str]) -> list[Fault]:
    """The faults to run, each checked against the spec; DrillError naming every problem."""
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise DrillError(
            f"unknown fault(s) {', '.join(unknown)}: --faults takes a comma-separated list of "
            f"{', '.join(FAULTS)}"
        )
    problems = []
    interval = spec.checkpoint.interval
    aimed = spec.checkpoint.enabled and interval.policy == "steps"
    if not aimed:
        problems.append(
            "each fault is aimed between two checkpoints: set checkpoint.enabled: true and "
            "checkpoint.interval.policy: steps with every_steps"
        )
    if spec.resources.world_size < 2:
        problems.append(
            f"the faults act on rank 1 or on a second node: resources give a world of "
            f"{spec.resources.world_size}; set resources.devices_per_node >= 2"
        )
    faults = [FAULTS[n] for n in dict.fromkeys(names)]
    total = int(spec.plan.total_steps.value)
    for fault in faults:
        refusal = fault.refusal(spec)
        if refusal:
            problems.append(refusal)
        elif aimed and fault_step(spec, fault) + 2 > total:
            step = fault_step(spec, fault)
            problems.append(
                f"training.steps={total} is too short for {fault.name}: it is aimed at step "
                f"{step} (after {fault.checkpoints_before} checkpoint(s) every "
                f"{interval.every_steps} steps); set training.steps >= {step + 2}"
            )
    if problems:
        raise DrillError("the drill cannot run:\n" + "\n".join(f"  - {p}" for p in problems))
    return faults


class _Run:
    """One run's display, injection and bookkeeping."""

    def __init__(self, store: Store, run_id: str, fault: str, progress: RunProgress) -> None:
        self.store, self.run_id, self.fault, self.progress = store, run_id, fault, progress
        self.injector: Injector | None = None
        self.error: str | None = None

    def __call__(self, event: EventRecord) -> None:
        self.progress(event)
        if self.injector is None or self.error is not None:
            return
        try:
            injection = self.injector(event)
        except (OSError, RuntimeError, RunwrightError) as exc:
            self.error = f"the injection failed: {exc}"
            self.progress.console.print(f"  [red]{self.error}[/]")
            return
        if injection is not None:
            self._record(event, injection)

    def _record(self, event: EventRecord, injection: Injection) -> None:
        recorded = NewEvent(
            event_id=f"{self.run_id}:fault:{self.fault}",
            run_id=self.run_id,
            generation=event.generation,
            type=EventType.FAULT_INJECTED,
            step=injection.step,
            time_unix_s=injection.time_unix_s,
            attributes={
                "fault": self.fault,
                "detail": injection.detail,
                "rank": injection.rank,
                "pids": list(injection.pids),
            },
        )
        # The controller hands the stored event to this hook too: the display shows it then.
        self.store.append_event(recorded, fenced=False)


def run_drill(
    root: Path,
    store: Store,
    spec: JobSpec,
    names: list[str],
    *,
    workdir: Path,
    out: Path | None,
    console: Console,
    show: bool = True,
) -> DrillReport:
    faults = check_faults(spec, names)
    started = time.time()
    drill_id = f"drill-{time.strftime('%Y%m%d-%H%M%S')}"
    folder = out or drills_dir(root) / drill_id
    folder.mkdir(parents=True, exist_ok=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, disable=not show) as progress:
        drill = _Drill(root, store, spec, workdir, folder, progress if show else None, console)
        console.print(f"reference run of {spec.name}, no faults")
        reference_id, reference_seconds = drill.reference()
        results = []
        for index, fault in enumerate(faults, 1):
            console.print(f"[bold]{index}/{len(faults)}[/] {fault.name}: {fault.mechanism}")
            results.append(drill.fault(fault))
            verdict = "[green]as expected[/]" if results[-1].ok else "[red]NOT as expected[/]"
            console.print(f"    {verdict}: " + "; ".join(results[-1].mismatches or ["ok"]))
    report = DrillReport(
        drill_id=drill_id,
        spec_name=spec.name,
        spec_hash=spec.spec_hash,
        reference_run_id=reference_id,
        reference_wall_seconds=reference_seconds,
        faults=results,
        ok=all(r.ok for r in results),
        started_unix_s=started,
        wall_seconds=time.time() - started,
        json_path=str(folder / "drill.json"),
        html_path=str(folder / "drill.html"),
    )
    write_atomically(Path(report.json_path), report.model_dump_json(indent=2) + "\n")
    write_atomically(Path(report.html_path), render_page(report))
    return report


class _Drill:
    """The runs of one drill: the reference, then each fault's, in one store."""

    def __init__(
        self,
        root: Path,
        store: Store,
        spec: JobSpec,
        workdir: Path,
        folder: Path,
        progress: Progress | None,
        console: Console,
    ) -> None:
        self.root, self.store, self.spec = root, store, spec
        self.workdir, self.folder = workdir, folder
        self.progress, self.console = progress, console
        self.reference_id = ""
        self.limit_seconds = REFERENCE_LIMIT_SECONDS

    def display(self, label: str) -> RunProgress:
        steps = int(self.spec.plan.total_steps.value)
        return RunProgress(self.progress, self.console, label, steps, SHOWN)

    def reference(self) -> tuple[str, float]:
        driver = InProcessDriver(self.store, self.root)
        run = driver.submit(self.spec, self.workdir)
        began = time.monotonic()
        ended = driver.drive(run.run_id, self.display("reference"), REFERENCE_LIMIT_SECONDS)
        seconds = time.monotonic() - began
        if ended.state != "SUCCEEDED":
            raise DrillError(
                f"the fault-free reference run {ended.run_id} ended {ended.state} "
                f"({ended.state_detail}): the drill needs a spec that succeeds without faults "
                f"(runwright status {ended.run_id})"
            )
        self.reference_id = run.run_id
        # A fault's run is the reference's plus a detection (at most the progress timeout), a
        # backoff and a second start: past four reference runs, two timeouts and five minutes,
        # the platform failed to end it.
        self.limit_seconds = 4 * seconds + 2 * self.spec.recovery.progress_timeout_seconds + 300
        return run.run_id, seconds

    def fault(self, fault: Fault) -> FaultResult:
        step = fault_step(self.spec, fault)
        folder = self.folder / fault.name
        faulted = fault.adapt(self.spec, step, folder)
        driver = (
            ProcessDriver(self.store, self.root, folder)
            if fault.controller == "process"
            else InProcessDriver(self.store, self.root)
        )
        began = time.monotonic()
        run = driver.submit(faulted, self.workdir)
        hook = _Run(self.store, run.run_id, fault.name, self.display(fault.name))
        target = Target(
            store=self.store,
            root=self.root,
            run_id=run.run_id,
            step=step,
            checkpoints_before=fault.checkpoints_before,
            folder=folder,
            restart_controller=driver.restart_controller,
            spec=faulted,
        )
        hook.injector = fault.injector(target)
        try:
            ended = driver.drive(run.run_id, hook, self.limit_seconds)
        finally:
            cleanup = hook.injector.finish()
        wall_seconds = time.monotonic() - began
        try:
            comparison: Comparison | None = compare_runs(self.store, run.run_id, self.reference_id)
        except RunwrightError:
            comparison = None  # it did not finish its training: nothing to compare
        return measure(
            fault=fault.name,
            mechanism=fault.mechanism,
            expected=fault.expect(faulted),
            detected_by=fault.detected_by,
            run=ended,
            events=self.store.events(run.run_id),
            comparison=comparison,
            wall_seconds=wall_seconds,
            spec_change=_difference(self.spec, faulted),
            cleanup=cleanup,
            injection_error=hook.error,
        )


def _difference(spec: JobSpec, faulted: JobSpec) -> str | None:
    if faulted.spec_hash == spec.spec_hash:
        return None
    changes = []
    added = faulted.code.args[len(spec.code.args) :]
    if added:
        changes.append(f"code.args + {' '.join(added)}")
    if faulted.checkpoint.location != spec.checkpoint.location:
        changes.append(f"checkpoint.location {faulted.checkpoint.location}")
    if faulted.checkpoint.save_timeout_seconds != spec.checkpoint.save_timeout_seconds:
        changes.append(
            f"checkpoint.save_timeout_seconds {faulted.checkpoint.save_timeout_seconds:g}"
        )
    if faulted.data.dataset != spec.data.dataset:
        changes.append(f"data.dataset {faulted.data.dataset} (a copy)")
    if faulted.resources.nodes != spec.resources.nodes:
        changes.append(
            f"resources.nodes {faulted.resources.nodes} x devices_per_node "
            f"{faulted.resources.devices_per_node}"
        )
    return ", ".join(changes) or "changed"
