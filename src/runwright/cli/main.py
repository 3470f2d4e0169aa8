"""`runwright` entry point: the command groups, each imported only when it is run.

`runwright --help` and every command must start fast (issue 19: under 1 s on a 2-core machine),
so nothing below the CLI is imported until a command runs: each command lives in its module
(`COMMANDS`), which is imported when the command is looked up. The root's own help lists the
commands from `COMMANDS` without importing any of them; tests/cli check that each summary is the
command's own first help line.

Global options: `--root` and `--store` set RUNWRIGHT_ROOT and RUNWRIGHT_STORE for this process,
which every command's own `--root`/`--store` default to (the command's own option wins);
`--server URL` (RUNWRIGHT_SERVER) makes the run, queue, data and ckpt commands work through a
`runwright server` (cli/backend.py); `--version` prints the version.
"""

import importlib
import logging
import os
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from runwright import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "submit": ("runs", "Submit a run and drive it to a terminal state (Ctrl-C cancels it)."),
    "cancel": (
        "intervene",
        "Cancel a run: record the intent and fence the workers first, then let "
        "them save at the next step boundary; the controller kills them after "
        "recovery.stop_grace_seconds.",
    ),
    "pause": (
        "intervene",
        "Pause a run: a live one saves at its next step boundary, gives its devices back and "
        "waits (PAUSED) until `runwright resume`; a queued one is held at once.",
    ),
    "resume": (
        "intervene",
        "Resume a paused run: back to the queue, placed again and restored from its newest "
        "checkpoint, then driven here as submit does (exit 0 succeeded, 3 paused again, 1 "
        "otherwise) unless --detach.",
    ),
    "rollback": (
        "operator",
        "Roll a live run back to a chosen committed checkpoint: it stops at its next step boundary "
        "without a save, later checkpoints are kept but marked abandoned, and a new generation "
        "goes on from the chosen one with its data cursor.",
    ),
    "skip-shard": (
        "operator",
        "Skip a named bad shard: a live run saves at its next step boundary and restarts without "
        "it; the data cursor records the skip, so every rank and every restart agrees.",
    ),
    "move": (
        "operator",
        "Move a run to another pool (an operator's action): a live one saves, gives its "
        "allocation back and is queued again there; a queued or paused one moves at once.",
    ),
    "stop": (
        "operator",
        "Stop a live run with a save: it saves at its next step boundary, even where "
        "checkpoint.save_on_stop is off, and ends CANCELLED.",
    ),
    "controller": (
        "runs",
        "Run the controller: reconcile runs from the store (what `submit --detach` starts).",
    ),
    "status": ("run_views", "Show a run's state, history and what it is doing, in words."),
    "events": ("run_views", "Print a run's append-only event log in order."),
    "logs": (
        "run_views",
        "Print what a run's ranks wrote (stderr and stdout), by global rank, newest "
        "generation first shown unless --generation says otherwise; --follow keeps "
        "printing.",
    ),
    "list": ("run_views", "List runs, newest first."),
    "compare": (
        "run_views",
        "Prove recovery equivalence: final parameters bit-identical, "
        "consumed-sample ledgers identical, loss curves identical after the restored "
        "step.",
    ),
    "demo": (
        "demo",
        "Build a dataset, run the reference trainer on 2 ranks, kill one rank, "
        "recover, run a fault-free reference, prove the two are bitwise the same run, and "
        "write the report.",
    ),
    "drill": (
        "drill",
        "Run a matrix of faults against real runs of one spec and measure each: detection, "
        "class, action, lost steps and seconds, time to the first step past the restore, and "
        "bitwise equality with one fault-free reference run.",
    ),
    # --- change safety (issue 27) ---
    "ladder": (
        "ladder",
        "Climb the scale-up ladder: one rank, one node, two nodes, the target shape, each rung "
        "gated on the loss curve, E(N) and a resharded checkpoint restore (ladder.json, "
        "ladder.html).",
    ),
    "gc": (
        "gc",
        "Release what ended runs left behind under a root: processes, temporary folders, "
        "checkpoint staging, leases, credentials, and this host's cached datasets past their "
        "retention (--dry-run lists them).",
    ),
    "baseline": (
        "baseline",
        "Record a fixed workload's baseline and check a later run of it against it.",
    ),
    "experiment": (
        "experiment",
        "Group runs into experiments, compute their comparability, mark contaminated steps.",
    ),
    "report": (
        "report",
        "Write a run's report: code, environment, spec, plan, data, "
        "checkpoint lineage, incidents, interventions, cost split and final metrics, with "
        "loss, throughput, system and data charts on one time axis.",
    ),
    "spec": ("spec", "Validate, hash and explain job specs."),
    "lineage": (
        "lineage",
        "Which runs and checkpoints used a dataset, and what a checkpoint was trained on.",
    ),
    "postmortem": (
        "postmortem",
        "Assemble a failed or recovered run's postmortem: the incidents with their evidence, "
        "the timeline, what the platform did, the diagnostics bundles, what the incidents "
        "cost, and a template for the cause and the follow-ups (postmortem.json and "
        "postmortem.html).",
    ),
    "release": (
        "release",
        "Release a checkpoint through gates into the model registry, and approve it.",
    ),
    "preflight": (
        "preflight",
        "Check a spec before it runs: named checks with a verdict, the evidence and the fix.",
    ),
    "data": ("data", "Build, inspect and verify datasets."),
    "ckpt": ("ckpt", "Inspect, verify, clean up and export checkpoints."),
    "plan": (
        "plan",
        "Capacity planning: memory and communication ledgers, checkpoint "
        "interval, parallel layout search, scaling efficiency, capacity (device-hours, "
        "storage, failures, cost), fleet simulation (ETTR under failures).",
    ),
    # --- the shared server (issue 14) ---
    "queue": ("queue", "List the unfinished runs, oldest first, with what each is waiting for."),
    "server": (
        "server",
        "Serve the API of a shared deployment and run the controller beside it.",
    ),
    "token": ("access", "Make, list, save and revoke API tokens."),
    "project": ("access", "Create projects and grant or remove roles in them."),
    "audit": (
        "access",
        "Show the audit log: who did what, through the API or a CLI, and how it went.",
    ),
}
"""command -> (its module under runwright.cli, the first sentence of its help)."""

ROOT_ENV, STORE_ENV, SERVER_ENV = "RUNWRIGHT_ROOT", "RUNWRIGHT_STORE", "RUNWRIGHT_SERVER"


def load_command(name: str) -> TyperCommand | TyperGroup:
    """The click command `name` from its module's typer app: the app's command of that name
    (`runs`, `run_views`, `demo`, `report` hold top-level commands), else the app itself as a
    group."""
    module_name, _ = COMMANDS[name]
    module = importlib.import_module(f"runwright.cli.{module_name}")
    group = typer.main.get_group(module.app)
    command = group.commands.get(name)
    if command is None:
        group.name = name
        return group
    return command


class LazyCommands(TyperGroup):
    """The root group: commands come from `COMMANDS`, each module imported on first look-up.

    While the root's help is formatted, look-ups answer a stub carrying the summary from
    `COMMANDS`, so `runwright --help` imports no command module."""

    _listing = False

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return TyperCommand(name=cmd_name, help=COMMANDS[cmd_name][1])
        return load_command(cmd_name)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"runwright {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="runwright",
    cls=LazyCommands,
    help="Turn a PyTorch training program into a run that can be started, observed, recovered "
    "and audited.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    root: str | None = typer.Option(
        None,
        "--root",
        help="Default --root of every command: the folder of runs, datasets and the embedded "
        "store (sets $RUNWRIGHT_ROOT; default ./.runwright).",
        show_default=False,
    ),
    store: str | None = typer.Option(
        None,
        "--store",
        help="Default --store of every command: sqlite:///PATH or postgresql://USER@HOST:PORT/DB "
        "(sets $RUNWRIGHT_STORE; default <root>/state.db).",
        show_default=False,
    ),
    server: str | None = typer.Option(
        None,
        "--server",
        help="Work through a `runwright server` at this URL instead of on the store itself "
        "(sets $RUNWRIGHT_SERVER; the token comes from $RUNWRIGHT_TOKEN or "
        "~/.config/runwright/credentials).",
        show_default=False,
    ),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    for key, value in ((ROOT_ENV, root), (STORE_ENV, store), (SERVER_ENV, server)):
        if value is None:
            continue
        before = os.environ.get(key)
        os.environ[key] = value
        # Put it back when the command ends, so an in-process caller (tests, the server later)
        # is left as it was.
        ctx.call_on_close(lambda k=key, v=before: _restore(k, v))


def _restore(key: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def main(argv: Any = None) -> None:
    # Warnings from below the CLI (e.g. the controller's store-outage line) as one timestamped
    # line on stderr, which is the controller log of `submit --detach`.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    app(args=argv)


if __name__ == "__main__":
    main()
