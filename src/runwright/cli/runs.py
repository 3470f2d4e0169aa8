"""`runwright submit|status|events|list|controller`: start runs and look at them."""

import difflib
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer
from rich.table import Table

from runwright.cli.options import (
    JsonOption,
    RootOption,
    StoreOption,
    bounded_text,
    open_store,
    run_id_argument,
)
from runwright.cli.render import console, guarded, print_json
from runwright.control.cancel import request_cancel
from runwright.control.controller import Controller
from runwright.control.leasing import LEASE_SECONDS
from runwright.control.states import TERMINAL
from runwright.control.summary import describe_run, event_line, run_summary
from runwright.events import EventType
from runwright.govern.compare import compare_runs
from runwright.layout import run_paths
from runwright.spec import load_spec
from runwright.store import EventRecord

app = typer.Typer()

RUN_HELP = "Run id or a unique prefix of it."
MAX_LIST_RUNS = 100_000
"""Most runs one `runwright list` prints."""
MAX_KEY_CHARS = 200
"""Longest idempotency key."""
MAX_REASON_CHARS = 2000
"""Longest cancel reason recorded with a run."""
EVENT_TYPES = [str(t) for t in EventType]
MIN_LEASE_SECONDS = 1.0
"""Shortest controller lease: it is renewed every pass (0.2 s apart), and a lease much shorter
than a busy machine's slowest pass would change hands while its holder is alive."""
MAX_LEASE_SECONDS = 3600.0

LeaseOption = typer.Option(
    LEASE_SECONDS,
    "--lease-seconds",
    min=MIN_LEASE_SECONDS,
    max=MAX_LEASE_SECONDS,
    help="How long this controller's lease of each run it drives lasts unless renewed (every "
    "pass). Another controller sharing the store takes a run over this long after its "
    "controller died; a controller stopping cleanly hands its runs over at once.",
)


def _event_types(values: list[str]) -> list[str]:
    """typer callback: every `--type` is an event type, so a typo is not an empty listing."""
    for value in values:
        if value not in EVENT_TYPES:
            close = difflib.get_close_matches(value.upper(), EVENT_TYPES, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise typer.BadParameter(
                f"{value!r} is not an event type; {hint}valid: {', '.join(EVENT_TYPES)}"
            )
    return values


def _printer(json_out: bool):
    if json_out:
        return None
    return lambda event: console.print(event_line(event), highlight=False)


@app.command()
@guarded
def submit(
    spec_file: Path = typer.Argument(..., help="Job spec file."),
    idempotency_key: str | None = typer.Option(
        None,
        "--idempotency-key",
        help="Submitting the same key again returns the existing run and starts nothing.",
        callback=bounded_text("--idempotency-key", MAX_KEY_CHARS),
    ),
    detach: bool = typer.Option(False, "--detach", help="Run the controller in the background."),
    lease_seconds: float = LeaseOption,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Submit a run and drive it to a terminal state (Ctrl-C cancels it)."""
    spec = load_spec(spec_file)
    resolved, st = open_store(root, store)
    controller = Controller(st, resolved, on_event=_printer(json_out), lease_seconds=lease_seconds)
    # In the foreground this controller holds the new run's lease from its first moment; a
    # detached one leaves it to the controller it starts.
    run, created = controller.submit(
        spec, spec_file.resolve().parent, idempotency_key, hold=not detach
    )
    if not created:
        if json_out:
            print_json({"run_id": run.run_id, "created": False, "state": run.state})
        else:
            console.print(
                f"idempotency key already used: existing run {run.run_id} "
                f"({run.state}); nothing started"
            )
        return
    if detach:
        log = run_paths(resolved, run.run_id).controller_log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            argv = [
                sys.executable,
                "-m",
                "runwright.cli.main",
                "controller",
                run.run_id,
                "--root",
                str(resolved),
                "--lease-seconds",
                str(lease_seconds),
            ]
            if store:
                argv += ["--store", store]
            subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if json_out:
            print_json(
                {
                    "run_id": run.run_id,
                    "created": True,
                    "detached": True,
                    "controller_log": str(log),
                }
            )
        else:
            console.print(f"submitted {run.run_id}; controller log {log}")
        return
    if not json_out:
        console.print(f"run {run.run_id} (spec {spec.spec_hash[:12]})")
    final = controller.drive(run.run_id)
    if json_out:
        print_json(run_summary(st, final.run_id))
    else:
        console.print(f"run {final.run_id} ended {final.state} ({final.terminal_reason})")
    if final.state != "SUCCEEDED":
        raise typer.Exit(code=1)


@app.command()
@guarded
def cancel(
    run_id: str = run_id_argument(RUN_HELP),
    reason: str = typer.Option(
        "cancelled by the user",
        "--reason",
        help="Recorded with the run.",
        callback=bounded_text("--reason", MAX_REASON_CHARS),
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Cancel a run: record the intent and fence the workers first, then let them save at the
    next step boundary; the controller kills them after recovery.stop_grace_seconds."""
    _, st = open_store(root, store)
    result = request_cancel(st, run_id, reason)
    if json_out:
        print_json(
            {
                "run_id": result.run.run_id if result.run else run_id,
                "outcome": str(result.outcome),
                "detail": result.detail,
                "state": result.run.state if result.run else None,
            }
        )
        return
    if result.outcome.value == "APPLIED":
        console.print(
            f"cancel recorded for {result.run.run_id}; generation "
            f"{result.run.generation} fences the old workers, which stop at their next "
            "step boundary"
        )
    else:
        console.print(f"nothing to cancel: {result.detail or result.outcome}")


@app.command("controller")
@guarded
def controller_cmd(
    run_id: str | None = run_id_argument(
        "Drive this run only; without it, every unfinished run in the store.", None
    ),
    daemon: bool = typer.Option(False, "--daemon", help="Keep watching for new runs."),
    lease_seconds: float = LeaseOption,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
) -> None:
    """Run the controller: reconcile runs from the store (what `submit --detach` starts). A
    restarted controller adopts live worker groups and kills orphans of older generations.
    Several controllers may share one store (on several hosts): each run is driven by the one
    holding its lease, and the others stand by to take it over if that one dies. SIGTERM stops
    this controller cleanly: it hands its runs over and leaves their workers running."""
    resolved, st = open_store(root, store, ride_out_outage=True)
    controller = Controller(st, resolved, on_event=_printer(False), lease_seconds=lease_seconds)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if run_id is not None:
        controller.drive(run_id)
        return
    try:
        finished = controller.drive_all(until_idle=not daemon)
    except KeyboardInterrupt:
        console.print(
            "controller stopped; unfinished runs keep running and are adopted by the "
            "next controller"
        )
        return
    console.print(f"{len(finished)} run(s) reached a terminal state")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds the controller (its `finally` hands the leases back), unlike the default
    action, which ends the process on the spot. Not KeyboardInterrupt: to `drive` that means
    cancel the run."""
    raise SystemExit(128 + signum)


@app.command()
@guarded
def status(
    run_id: str = run_id_argument(RUN_HELP),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Show a run's state, history and what it is doing, in words."""
    _, st = open_store(root, store)
    summary = run_summary(st, run_id)
    if json_out:
        print_json(summary)
        return
    console.print(describe_run(summary), highlight=False)


@app.command()
@guarded
def events(
    run_id: str = run_id_argument(RUN_HELP),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new events until the run ends."
    ),
    event_type: list[str] = typer.Option(
        [], "--type", help="Only events of this type (repeatable).", callback=_event_types
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Print a run's append-only event log in order."""
    _, st = open_store(root, store)
    run = st.get_run(run_id)
    seen = 0

    def show(batch: list[EventRecord]) -> None:
        for event in batch:
            if json_out:
                sys.stdout.write(event.model_dump_json() + "\n")
            else:
                console.print(event_line(event), highlight=False)

    quiet_polls = 0
    while True:
        batch = st.events(run.run_id, after_seq=seen)
        if json_out and not follow:
            print_json(
                [e.model_dump(mode="json") for e in batch if not event_type or e.type in event_type]
            )
            return
        show([e for e in batch if not event_type or e.type in event_type])
        if batch:
            seen = batch[-1].seq
        if not follow or any(e.type == EventType.RUN_FINISHED for e in batch):
            return
        # A terminal run whose controller is gone writes nothing more: stop after a quiet second.
        terminal = st.get_run(run.run_id).state in TERMINAL
        quiet_polls = quiet_polls + 1 if terminal and not batch else 0
        if quiet_polls >= 2:
            return
        time.sleep(0.5)


@app.command("list")
@guarded
def list_runs(
    limit: int = typer.Option(
        20, "--limit", min=1, max=MAX_LIST_RUNS, help="How many of the newest runs."
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """List runs, newest first."""
    _, st = open_store(root, store)
    runs = st.list_runs(limit=limit)
    if json_out:
        print_json([r.model_dump(mode="json", exclude={"spec", "plan"}) for r in runs])
        return
    table = Table(title="runs")
    for col in ("run id", "name", "state", "reason", "gen", "step", "created"):
        table.add_column(col)
    for r in runs:
        table.add_row(
            r.run_id,
            r.name,
            r.state,
            r.terminal_reason or "",
            str(r.generation),
            "" if r.last_step is None else str(r.last_step),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_unix_s)),
        )
    console.print(table)


@app.command()
@guarded
def compare(
    run_a: str = run_id_argument("A run (e.g. one that failed and recovered)."),
    run_b: str = run_id_argument("The run to compare it with (e.g. a fault-free one)."),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Prove recovery equivalence: final parameters bit-identical, consumed-sample ledgers
    identical, loss curves identical after the restored step. Exit 1 when they differ."""
    _, st = open_store(root, store)
    result = compare_runs(st, run_a, run_b)
    if json_out:
        print_json(result.model_dump(mode="json"))
    else:
        console.print(
            f"{result.equivalence}: {result.parameters_compared} parameters, "
            f"{result.steps_compared} steps compared (restored steps "
            f"{result.restored_steps or '-'})"
            + (f"; first difference {result.first_difference}" if result.first_difference else "")
        )
    if result.equivalence != "bitwise-equal":
        raise typer.Exit(code=1)
