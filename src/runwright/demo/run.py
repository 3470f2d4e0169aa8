"""`runwright demo`: one honest run that fails, recovers, and proves it.

1. build the demo dataset from the standard library (reused when it exists: same dataset id);
2. submit a 2-rank run of the reference trainer through the controller;
3. SIGKILL one rank at a random step after the first committed checkpoint;
4. the controller detects, classifies and recovers it from the last committed checkpoint;
5. run the same spec without faults and prove recovery equivalence (`compare_runs`);
6. summarise, and write report.json and report.html.
"""

import os
import random
import signal
import sysconfig
import time
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from runwright.control.controller import Controller
from runwright.data import BuildResult, build_dataset, load_recipe
from runwright.events import EventType
from runwright.govern.compare import Comparison, compare_runs
from runwright.govern.incidents import REPLAY_VERDICTS, replay_verdict
from runwright.govern.report import build_report
from runwright.layout import recipes_dir, run_paths
from runwright.observe.rank_steps import rank_view
from runwright.records import Record
from runwright.spec import JobSpec, parse_text, spec_from_mapping
from runwright.store import EventRecord, NewEvent, Store


class DemoResult(Record):
    """What `runwright demo --json` prints."""

    run_id: str
    reference_run_id: str
    recovered: bool
    equivalence: str
    first_difference: str | None
    fault_step: int | None
    lost_steps: int | None
    recovery_seconds: float | None
    replay_check: str | None
    """The controller's own check of the replayed steps (RECOVERY_VERIFIED/DIVERGED/UNVERIFIED),
    which needs no reference run: verified, diverged or unverified, with what it compared."""
    ettr: float | None
    loss_tokens_per_second: float | None
    input_wait_share: float | None
    checkpoint_exposure: float | None
    final_loss: float | None
    state_history: list[str]
    dataset_id: str
    dataset_path: str
    checkpoint_paths: list[str]
    report_path: str
    report_html_path: str


def _resource(name: str) -> str:
    return resources.files("runwright.demo").joinpath(name).read_text()


def demo_spec(dataset_folder: Path, dataset_id: str) -> JobSpec:
    data = parse_text(_resource("tiny_gpt.yaml"), "yaml", "tiny_gpt.yaml")
    data["data"]["dataset"] = str(dataset_folder)
    data["data"]["manifest_id"] = dataset_id
    return spec_from_mapping(data, "tiny_gpt.yaml")


class RunProgress:
    """A progress bar of healthy steps plus one line per event a person cares about."""

    QUIET = frozenset(
        {
            EventType.STEP_HEALTHY,
            "HEARTBEAT",
            EventType.WORKER_STARTED,
            EventType.CHECKPOINT_STAGED,
            EventType.RESIDUE_COLLECTED,
            EventType.INTERVAL_CHOSEN,
            EventType.DATA_STAGE_READY,
            EventType.RESTORED,
        }
    )

    def __init__(
        self,
        progress: Progress | None,
        console: Console,
        label: str,
        steps: int,
        only: frozenset[str] | None = None,
    ):
        """`only`: the event types given a line (default: all but QUIET)."""
        self.progress, self.console, self.only = progress, console, only
        self.task = progress.add_task(label, total=steps) if progress else None

    def __call__(self, event: EventRecord) -> None:
        if self.progress is None:
            return
        if rank_view(event, 0) is not None:
            self.progress.update(self.task, completed=event.step)
        elif event.type in self.only if self.only is not None else event.type not in self.QUIET:
            self.progress.console.print(f"  {describe_event(event)}", highlight=False)


def describe_event(event: EventRecord) -> str:
    a = event.attributes
    text = {
        EventType.STATE_CHANGED: lambda: (
            f"{a.get('from_state')} -> {a.get('to_state')}"
            + (f" ({a['reason']})" if a.get("reason") else "")
        ),
        EventType.CHECKPOINT_COMMITTED: lambda: (
            f"checkpoint {event.checkpoint_id} at step {event.step}"
        ),
        EventType.FAULT_INJECTED: lambda: (
            f"{a['detail']}" + (f" at step {event.step}" if event.step is not None else "")
            if a.get("detail")
            else f"SIGKILL rank {a.get('rank')} (pid {a.get('pid')}) after step {event.step}"
        ),
        EventType.FAILURE_CLASSIFIED: lambda: (
            f"{a.get('failure_class')} on rank {a.get('rank')}: {a.get('message')}"
        ),
        EventType.RECOVERY_SUCCEEDED: lambda: (
            f"recovered from step {a.get('restored_step')}: lost "
            f"{a.get('lost_steps')} steps, {a.get('recovery_seconds')} s"
        ),
    }.get(event.type, lambda: "")()
    return f"{event.type.lower().replace('_', ' ')} {text}".rstrip()


def _fault_injector(
    store: Store, run_id: str, rng: random.Random, every: int, steps: int, on_event: Any
):
    """After the first committed checkpoint at step c, SIGKILL rank 1 once at a random step in
    (c, c + every / 2), i.e. well before the next checkpoint, so the recovery replays real work."""
    plan: dict[str, int] = {}

    def hook(event: EventRecord) -> None:
        on_event(event)
        if event.generation != 1 or "done" in plan:
            return
        if event.type == EventType.CHECKPOINT_COMMITTED and "at" not in plan:
            committed = int(event.step or 0)
            # Early in the interval: the kill lands a poll (<= 0.05 s, a step or two) after the
            # report, and must land before the next checkpoint so recovery replays real steps.
            plan["at"] = min(steps - 1, committed + rng.randint(1, max(1, every // 2 - 1)))
        elif (
            rank_view(event, 0) is not None
            and "at" in plan
            and event.step is not None
            and event.step >= plan["at"]
        ):
            started = store.events(run_id, types=[EventType.WORKER_STARTED])
            pid = next(
                int(e.attributes["pid"])
                for e in started
                if e.generation == 1 and e.attributes.get("rank") == 1
            )
            os.kill(pid, signal.SIGKILL)
            plan["done"] = event.step
            store.append_event(
                NewEvent(
                    event_id=f"{run_id}:fault:{event.step}",
                    run_id=run_id,
                    generation=1,
                    type=EventType.FAULT_INJECTED,
                    step=event.step,
                    time_unix_s=time.time(),
                    attributes={"signal": "SIGKILL", "rank": 1, "pid": pid},
                ),
                fenced=False,
            )

    return hook, plan


def build_demo_dataset(root: Path, store: Store, *, console: Console, show: bool) -> BuildResult:
    """The demo's dataset, the Python standard library tokenized (reused when it exists: the
    same dataset id), registered in the store."""
    stdlib = sysconfig.get_paths()["stdlib"]
    console.print(f"dataset: Python standard library at {stdlib}")
    # The recipe is kept beside the datasets it built, as part of their record.
    recipe_file = recipes_dir(root) / "demo-stdlib.yaml"
    recipe_file.parent.mkdir(parents=True, exist_ok=True)
    recipe_file.write_text(_resource("stdlib.yaml"))
    recipe = load_recipe(recipe_file, {"STDLIB": stdlib})
    built = build_dataset(recipe, root, show_progress=show, console=console)
    store.datasets.register(
        dataset_id=built.dataset_id,
        name=built.manifest.name,
        path=str(built.folder),
        manifest=built.manifest.model_dump(mode="json"),
    )
    console.print(
        f"    dataset {built.dataset_id[:16]} in {built.folder} "
        f"({built.partitions_reused} partitions reused, {built.seconds:.1f} s)"
    )
    return built


def run_demo(
    root: Path, store: Store, *, console: Console, show: bool = True, seed: int | None = None
) -> DemoResult:
    rng = random.Random(seed)
    console.print("[bold]1/5[/] ", end="")
    built = build_demo_dataset(root, store, console=console, show=show)
    spec = demo_spec(built.folder, built.dataset_id)
    steps = int(spec.plan.total_steps.value)
    every = int(spec.checkpoint.interval.every_steps or steps)

    def drive(label: str, inject: bool) -> tuple[str, dict[str, int]]:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, disable=not show) as progress:
            printer = RunProgress(progress if show else None, console, label, steps)
            # A short poll keeps the injected fault close to the step it was aimed at.
            controller = Controller(
                store, root, on_event=printer, poll_seconds=0.05 if inject else 0.2
            )
            run, _ = controller.submit(spec, Path.cwd())
            plan: dict[str, int] = {}
            if inject:
                hook, plan = _fault_injector(store, run.run_id, rng, every, steps, printer)
                controller.on_event = hook
            controller.drive(run.run_id)
        return run.run_id, plan

    console.print("[bold]2/5[/] run with a fault: 2 ranks, SIGKILL one after the first checkpoint")
    run_id, fault = drive("faulted run  ", inject=True)
    console.print("[bold]3/5[/] reference run of the same spec, no faults")
    reference_id, _ = drive("reference run", inject=False)
    console.print("[bold]4/5[/] recovery equivalence")
    comparison = compare_runs(store, run_id, reference_id)
    console.print("[bold]5/5[/] report")
    paths = build_report(store, run_id, run_paths(root, run_id).report)
    return _result(store, run_id, reference_id, comparison, fault, built, paths)


def _replay_check(events: list[EventRecord]) -> str | None:
    verdicts = [e for e in events if e.type in REPLAY_VERDICTS]
    if not verdicts:
        return None
    found = replay_verdict(events, min(e.generation for e in verdicts) - 1)
    return f"{found['replay_check']}: {found['replay_detail']}" if found else None


def _result(
    store: Store,
    run_id: str,
    reference_id: str,
    comparison: Comparison,
    fault: dict[str, int],
    built: Any,
    paths: Any,
) -> DemoResult:
    import json

    run = store.get_run(run_id)
    events = store.events(run_id)
    recovered = [e for e in events if e.type == EventType.RECOVERY_SUCCEEDED]
    report = json.loads(Path(paths.json_path).read_text())
    metrics = report["final_metrics"]
    history = [
        "CREATED",
        *[e.attributes["to_state"] for e in events if e.type == EventType.STATE_CHANGED],
    ]
    checkpoints = [c.path for c in store.checkpoints.list(run_id) if c.status == "COMMITTED"]
    return DemoResult(
        run_id=run_id,
        reference_run_id=reference_id,
        recovered=bool(recovered) and run.state == "SUCCEEDED",
        equivalence=comparison.equivalence,
        first_difference=comparison.first_difference,
        fault_step=fault.get("done"),
        lost_steps=recovered[0].attributes.get("lost_steps") if recovered else None,
        recovery_seconds=recovered[0].attributes.get("recovery_seconds") if recovered else None,
        replay_check=_replay_check(events),
        ettr=metrics.get("ettr"),
        loss_tokens_per_second=metrics.get("loss_tokens_per_second"),
        input_wait_share=metrics.get("input_wait_share"),
        checkpoint_exposure=metrics.get("checkpoint_exposure"),
        final_loss=metrics.get("last_loss"),
        state_history=history,
        dataset_id=built.dataset_id,
        dataset_path=str(built.folder),
        checkpoint_paths=checkpoints,
        report_path=str(paths.json_path),
        report_html_path=str(paths.html_path),
    )
