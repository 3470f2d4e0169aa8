"""`runwright status|events|logs|list|compare`: look at runs, never change them.

What only some commands need (the log reader, rich's table) is imported inside them, so
`status`, `list` and `events` start fast (tests/cli/test_startup.py)."""

import difflib
import json
import sys
import time
from pathlib import Path

import typer

from runwright.cli.backend import open_backend, server_url
from runwright.cli.options import JsonOption, RootOption, StoreOption, open_store, run_id_argument
from runwright.cli.render import console, guarded, print_json, print_unclipped
from runwright.cli.runs import RUN_HELP
from runwright.control.states import TERMINAL
from runwright.control.summary import describe_run, event_line
from runwright.errors import RunwrightError
from runwright.events import EventType

app = typer.Typer()

MAX_LIST_RUNS = 100_000
"""Most runs one `runwright list` prints."""
EVENT_TYPES = [str(t) for t in EventType]


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


@app.command()
@guarded
def status(
    run_id: str = run_id_argument(RUN_HELP),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Show a run's state, history and what it is doing, in words."""
    summary = open_backend(root, store).status(run_id, with_events=json_out)
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
    be = open_backend(root, store)

    def show(batch: list[dict]) -> None:
        # One write per batch, not one rich print per event: a long log prints in a blink, and an
        # attribute holding "[...]" is printed as it is, never read as rich markup.
        def render(e: dict) -> str:
            if json_out:
                return json.dumps(e, separators=(",", ":"))
            return event_line(e)

        if batch:
            sys.stdout.write("".join(render(event) + "\n" for event in batch))
            sys.stdout.flush()

    if not follow:
        batch = be.events(run_id, 0, event_type or None)
        if json_out:
            print_json(batch)
        else:
            show(batch)
        return
    # Until the run has finished (or, its controller gone, a terminal run stays quiet).
    for event in be.follow(run_id, 0, event_type or None):
        show([event])


@app.command()
@guarded
def logs(
    run_id: str = run_id_argument(RUN_HELP),
    rank: list[int] = typer.Option(
        [], "--rank", min=0, help="Only this global rank (repeatable); default every rank."
    ),
    generation: int | None = typer.Option(
        None, "--generation", "-g", min=0, help="Generation to show; default the newest."
    ),
    stream: str = typer.Option("both", "--stream", help="stderr, stdout or both."),
    lines: int = typer.Option(40, "--lines", "-n", min=0, max=1_000_000, help="Last N lines each."),
    agent: bool = typer.Option(False, "--agent", help="Also each node's torchrun agent output."),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new lines until the run ends."
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
) -> None:
    """Print what a run's ranks wrote (stderr and stdout), by global rank, newest generation
    first shown unless --generation says otherwise; --follow keeps printing."""
    from runwright.control import logs as run_logs

    if stream not in ("both", *run_logs.STREAMS):
        raise typer.BadParameter(f"--stream {stream!r}: use stderr, stdout or both")
    if server_url() is not None:  # the ranks' files may quote training data: not served
        raise RunwrightError(
            "`logs` reads the ranks' output files where the run ran: run it there, without "
            "--server (through a server, `status` shows a failure's last error lines to "
            "operators)"
        )
    _, st = open_store(root, store)
    run = st.get_run(run_id)
    run_root = Path(run.root)
    known = run_logs.generations(run_root, run.run_id)
    if not known:
        console.print(f"run {run.run_id} has launched no worker group yet; nothing to show")
        return
    gen = known[-1] if generation is None else generation
    if gen not in known:
        raise RunwrightError(
            f"run {run.run_id} has no generation {gen}; its generations are {known}"
        )
    note = run_logs.hang_note(st.events(run.run_id, types=[EventType.FAILURE_CLASSIFIED]), gen)
    if note is not None:  # whose output to read first
        console.print(note, highlight=False, markup=False, soft_wrap=True)
    files = [
        log
        for log in run_logs.rank_logs(run_root, run.run_id, gen)
        if (not rank or log.rank in rank) and stream in ("both", log.stream)
    ]
    agents = run_logs.agent_logs(run_root, run.run_id, gen) if agent else []
    if rank and not files:
        raise RunwrightError(f"generation {gen} of {run.run_id} has no output of rank(s) {rank}")
    named = [(f"gen {gen} node {a.node} torchrun agent", a.path) for a in agents] + [
        (f"gen {gen} rank {f.rank} (node {f.node}) {f.stream}", f.path) for f in files
    ]
    offsets = {}
    for title, path in named:
        tail_lines = run_logs.last_lines(path, lines)
        console.print(f"== {title}: {path} ==", highlight=False, markup=False, soft_wrap=True)
        if tail_lines:
            sys.stdout.write("\n".join(tail_lines) + "\n")
            sys.stdout.flush()
        offsets[path] = path.stat().st_size if path.exists() else 0
    if not follow:
        return
    quiet = 0
    while True:
        printed = False
        for title, path in named:
            for line, offset in run_logs.follow(path, offsets[path]):
                sys.stdout.write(f"[{title}] {line}\n")
                offsets[path] = offset
                printed = True
        sys.stdout.flush()
        # A finished run writes nothing more: stop after a quiet second.
        terminal = st.get_run(run.run_id).state in TERMINAL
        quiet = quiet + 1 if terminal and not printed else 0
        if quiet >= 2:
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
    runs = open_backend(root, store).list_runs(limit)
    if json_out:
        print_json(runs)
        return
    from rich.table import Table

    table = Table(title="runs")
    for col in ("run id", "name", "state", "reason", "gen", "step", "created"):
        table.add_column(col, no_wrap=True)
    for r in runs:
        table.add_row(
            r["run_id"],
            r["name"],
            r["state"],
            r["terminal_reason"] or "",
            str(r["generation"]),
            "" if r["last_step"] is None else str(r["last_step"]),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_unix_s"])),
        )
    # The id is what every other command takes: never cut a cell, however narrow the terminal
    # (which wraps the long lines instead, as it does `docker ps`).
    print_unclipped(table)


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
    identical, loss curves identical after the restored step.

    Runs of different world sizes (an elastic run that shrank) are coverage-equivalent instead:
    the same ledger and global batches, with the final parameters' distance (bitwise equality is
    not expected when the reduction order changes). Exit 1 when they differ or evidence is
    missing."""
    result = open_backend(root, store).compare(run_a, run_b)
    if json_out:
        print_json(result)
    else:
        console.print(
            f"{result['equivalence']}: {result['parameters_compared']} parameters, "
            f"{result['steps_compared']} steps compared (restored steps "
            f"{result['restored_steps'] or '-'})"
            + (
                f"; first difference {result['first_difference']}"
                if result["first_difference"]
                else ""
            )
        )
        for line in result.get("missing") or []:
            console.print(f"  missing {line}", highlight=False)
        if result.get("note"):
            same = {True: "identical", False: "DIFFERENT"}
            console.print(
                f"  world sizes {result['world_sizes_a']} and {result['world_sizes_b']}: "
                f"consumed-sample ledger {same[result['ledger_identical']]}, global batches "
                f"{same[result['global_batches_identical']]}",
                highlight=False,
            )
            diff = result.get("parameter_difference")
            if diff:
                console.print(
                    f"  parameter difference of the final checkpoints (step {diff['step_a']} "
                    f"and {diff['step_b']}, {diff['tensors']} tensors): max abs "
                    f"{diff['max_abs']:.3g}, relative L2 {diff['relative_l2']:.3g}",
                    highlight=False,
                )
            console.print(f"  note: {result['note']}", highlight=False)
    if result["equivalence"] not in ("bitwise-equal", "coverage-equivalent"):
        raise typer.Exit(code=1)
