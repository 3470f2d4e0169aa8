"""`runwright rollback|skip-shard|move|stop`: an operator's actions on a run, through the store or
a server (control/operator.py; the same role rules either way, each audited and written into the
run's log with who asked). Exit 0 when the action is asked or applied, 1 when it is refused."""

from pathlib import Path
from typing import Any

import typer

from runwright.cli.backend import open_backend
from runwright.cli.options import (
    JsonOption,
    PoolsOption,
    RootOption,
    StoreOption,
    run_id_argument,
)
from runwright.cli.render import console, guarded, print_json
from runwright.cli.runs import RUN_HELP, reason_option

app = typer.Typer()
REASON_HELP = "Recorded with the run, the audit log and the report."


def _answer(result: dict[str, Any], json_out: bool, asked: str) -> None:
    """Print the outcome; a refusal (INVALID_TRANSITION) exits 1 with the reason in words."""
    if json_out:
        print_json(result)
    elif result["outcome"] == "APPLIED":
        console.print(asked)
    else:
        console.print(f"nothing done: {result['detail'] or result['outcome']}")
    if result["outcome"] == "INVALID_TRANSITION":
        raise typer.Exit(code=1)


@app.command()
@guarded
def rollback(
    run_id: str = run_id_argument(RUN_HELP),
    to: str = typer.Option(
        ..., "--to", help="The committed checkpoint to continue from: its step, id or folder."
    ),
    reason: str = reason_option("rolled back by an operator", REASON_HELP),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Roll a live run back to a chosen committed checkpoint: it stops at its next step boundary
    without a save, later checkpoints are kept but marked abandoned, and a new generation goes on
    from the chosen one with its data cursor."""
    result = open_backend(root, store).rollback(run_id, reason, to)
    _answer(result, json_out, f"rollback of {result['run_id']} to {to} asked: it applies at the "
            "group's next step boundary (`runwright status` shows it)")  # fmt: skip


@app.command("skip-shard")
@guarded
def skip_shard(
    run_id: str = run_id_argument(RUN_HELP),
    shard: str = typer.Argument(..., help="A train shard of the run's dataset, by name."),
    reason: str = reason_option("skipped by an operator", REASON_HELP),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Skip a named bad shard: a live run saves at its next step boundary and restarts without
    it; the data cursor records the skip, so every rank and every restart agrees."""
    result = open_backend(root, store).skip_shard(run_id, reason, shard)
    _answer(result, json_out, f"{result['run_id']} skips shard {shard} from the step it next "
            "starts at; the report counts the tokens lost")  # fmt: skip


@app.command()
@guarded
def move(
    run_id: str = run_id_argument(RUN_HELP),
    pool: str = typer.Option(..., "--pool", help="The pool to move the run to."),
    reason: str = reason_option("moved by an operator", REASON_HELP),
    pools: Path | None = PoolsOption,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Move a run to another pool (an operator's action): a live one saves, gives its allocation
    back and is queued again there; a queued or paused one moves at once."""
    result = open_backend(root, store, pools).move_pool(run_id, reason, pool)
    _answer(result, json_out, f"{result['run_id']} moves to pool {pool} "
            f"(now {result['state']})")  # fmt: skip


@app.command()
@guarded
def stop(
    run_id: str = run_id_argument(RUN_HELP),
    reason: str = reason_option("stopped by an operator", REASON_HELP),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Stop a live run with a save: it saves at its next step boundary, even where
    checkpoint.save_on_stop is off, and ends CANCELLED."""
    result = open_backend(root, store).stop_with_save(run_id, reason)
    _answer(result, json_out, f"stop with a save asked for {result['run_id']}: it saves at its "
            "next step boundary and ends CANCELLED")  # fmt: skip
