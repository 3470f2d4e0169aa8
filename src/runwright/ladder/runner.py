"""`runwright ladder SPEC`: the scale-up ladder against real runs (docs/ladder.md).

For each rung (rungs.py), in order:
1. a fresh run of the spec at the rung's shape, driven to its end by a controller in this
   process (drill/drivers.py), measured from its events: state, steps, newest checkpoint,
   throughput (govern/throughput.py), rank 0's losses, and its ledger against the previous
   rung's run (govern/compare.py);
2. the rung's own gates (gates.py: ran, loss, efficiency); the first that fails ends the ladder;
3. from the second rung on, the carry run: the same shape, `checkpoint.resume_from` the previous
   rung's run and `carry_steps` more steps, so the previous rung's last checkpoint is saved,
   restored and resharded into this rung's layout; the reshard gate judges it.
ladder.json and ladder.html (page.py) go to the ladder's folder whatever the outcome.
"""

import time
import uuid
from pathlib import Path

from rich.console import Console

from runwright.control.supervise import write_atomically
from runwright.drill.drivers import InProcessDriver
from runwright.errors import RunwrightError
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.govern.throughput import run_throughput
from runwright.ladder.gates import LadderSettings, RungMeasure, RungResult, judge
from runwright.ladder.page import render_page
from runwright.ladder.rungs import LadderError, Rung, ladder_rungs, rung_spec
from runwright.layout import ladders_dir
from runwright.observe.rank_steps import per_rank
from runwright.records import Record
from runwright.spec import JobSpec
from runwright.store import Store


class LadderReport(Record):
    """What `runwright ladder` writes to ladder.json."""

    ladder_id: str
    spec_name: str
    spec_hash: str
    settings: LadderSettings
    rungs: list[Rung]
    """Every rung planned, climbed or not."""
    results: list[RungResult]
    """The rungs climbed, in order; the last one failed when `ok` is false."""
    ok: bool
    """Every rung passed every gate."""
    stopped: str | None
    """Why the ladder stopped early: the rung and the gate that failed, with its evidence."""
    started_unix_s: float
    wall_seconds: float
    json_path: str
    html_path: str


def _losses(store: Store, run_id: str) -> dict[int, float]:
    events = store.events(run_id, types=[EventType.STEP_HEALTHY])
    return {
        int(e.step): float(e.attributes["loss"])
        for e in per_rank(events)
        if e.step is not None and e.attributes.get("rank") == 0 and "loss" in e.attributes
    }


def _restored(store: Store, run_id: str) -> tuple[int | None, str | None]:
    """(step, mode) of the run's first restore that loaded a checkpoint."""
    for e in store.events(run_id, types=[EventType.RESTORED]):
        if e.attributes.get("rank", 0) == 0 and not e.attributes.get("fresh"):
            return (None if e.step is None else int(e.step)), e.attributes.get("mode")
    return None, None


class _Climber:
    def __init__(self, root: Path, store: Store, workdir: Path, settings: LadderSettings,
                 console: Console, show: bool) -> None:  # fmt: skip
        self.root, self.store, self.workdir, self.settings = root, store, workdir, settings
        self.console, self.show = console, show
        self.driver = InProcessDriver(store, root)

    def _run(self, spec: JobSpec, what: str) -> str:
        run = self.driver.submit(spec, self.workdir)
        if self.show:
            self.console.print(f"{what}: run {run.run_id}", highlight=False)
        self.driver.drive(run.run_id, lambda _event: None, self.settings.run_limit_seconds)
        return run.run_id

    def measure(self, spec: JobSpec, rung: Rung, prev: RungMeasure | None) -> RungMeasure:
        what = f"rung {rung.index} ({rung.name}, {rung.nodes} x {rung.devices_per_node})"
        run_id = self._run(rung_spec(spec, rung), what)
        run = self.store.get_run(run_id)
        latest = self.store.checkpoints.latest(run_id)
        fields: dict[str, object] = {}
        try:
            fields["tokens_per_second"] = run_throughput(self.store, run_id)[1]
        except RunwrightError as exc:
            fields["measure_error"] = str(exc)
        if prev is not None and run.state == "SUCCEEDED" and prev.state == "SUCCEEDED":
            try:
                comparison = compare_runs(self.store, prev.run_id, run_id)
                fields.update(equivalence=comparison.equivalence,
                              first_difference=comparison.first_difference)  # fmt: skip
            except RunwrightError as exc:
                fields.update(equivalence="incomparable", first_difference=str(exc))
        return RungMeasure(
            rung=rung,
            run_id=run_id,
            state=run.state,
            terminal_reason=run.terminal_reason,
            steps=int(spec.training.steps or 0),
            last_step=run.last_step,
            committed_step=None if latest is None else latest.step,
            losses=_losses(self.store, run_id),
            **fields,
        )

    def carry(self, spec: JobSpec, prev: RungMeasure, m: RungMeasure) -> RungMeasure:
        steps = m.steps + self.settings.carry_steps
        carried = rung_spec(spec, m.rung, steps=steps, resume_from=prev.run_id)
        what = f"rung {m.rung.index} carry from rung {prev.rung.index}'s checkpoint"
        run_id = self._run(carried, what)
        run = self.store.get_run(run_id)
        step, mode = _restored(self.store, run_id)
        return m.model_copy(
            update={
                "carry_run_id": run_id,
                "carry_state": run.state,
                "restored_step": step,
                "restore_mode": mode,
                "carry_last_step": run.last_step,
            }
        )


def run_ladder(root: Path, store: Store, spec: JobSpec, *, workdir: Path,
               settings: LadderSettings | None = None, node_devices: int | None = None,
               out: Path | None = None, console: Console | None = None,
               show: bool = True) -> LadderReport:  # fmt: skip
    """Climb the ladder of `spec`, stopping at the first failed gate; write the report."""
    settings = settings or LadderSettings()
    console = console or Console(stderr=True)
    if not spec.training.steps:
        raise LadderError(
            "training.steps: the ladder compares every rung step by step, so give the spec a "
            "step count (a token budget alone does not fix one)"
        )
    rungs = ladder_rungs(spec, node_devices)
    ladder_id = f"ladder-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    folder = out or ladders_dir(root) / ladder_id
    folder.mkdir(parents=True, exist_ok=True)
    climber = _Climber(root, store, workdir, settings, console, show)
    started = time.time()
    results: list[RungResult] = []
    stopped: str | None = None
    first: RungMeasure | None = None
    for rung in rungs:
        prev = results[-1].measure if results else None
        m = climber.measure(spec, rung, prev)
        first = first or m
        result = judge(first if prev else None, prev, m, settings, reshard=False)
        if result.passed and prev is not None:
            m = climber.carry(spec, prev, m)
            result = judge(first, prev, m, settings)
        results.append(result)
        if show:
            marks = ", ".join(f"{g.name} {'ok' if g.passed else 'FAILED'}" for g in result.gates)
            console.print(f"rung {rung.index} ({rung.name}): {marks}", highlight=False)
        if not result.passed:
            gate = next(g for g in result.gates if not g.passed)
            stopped = f"rung {rung.index} ({rung.name}) failed its {gate.name} gate: "
            stopped += gate.evidence
            break
    report = LadderReport(
        ladder_id=ladder_id,
        spec_name=spec.name,
        spec_hash=spec.spec_hash,
        settings=settings,
        rungs=rungs,
        results=results,
        ok=stopped is None,
        stopped=stopped,
        started_unix_s=started,
        wall_seconds=time.time() - started,
        json_path=str(folder / "ladder.json"),
        html_path=str(folder / "ladder.html"),
    )
    write_atomically(Path(report.json_path), report.model_dump_json(indent=2) + "\n")
    write_atomically(Path(report.html_path), render_page(report))
    return report
