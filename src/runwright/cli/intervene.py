"""`runwright cancel|pause|resume`: a person's interventions on a run, through the store or a
server (the same rules either way: the submitter on their own runs, an operator on any; each
audited and written into the run's log with who asked)."""

from pathlib import Path

import typer

from runwright.cli.backend import drive, ended, open_backend, start_controller
from runwright.cli.options import (
    JsonOption,
    PoolsOption,
    RootOption,
    StoreOption,
    run_id_argument,
)
from runwright.cli.render import console, guarded, print_json
from runwright.cli.runs import RUN_HELP, LeaseOption, reason_option

app = typer.Typer()


@app.command()
@guarded
def cancel(
    run_id: str = run_id_argument(RUN_HELP),
    reason: str = reason_option("cancelled by the user"),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Cancel a run: record the intent and fence the workers first, then let them save at the
    next step boundary; the controller kills them after recovery.stop_grace_seconds."""
    result = open_backend(root, store).cancel(run_id, reason)
    if json_out:
        print_json({k: result[k] for k in ("run_id", "outcome", "detail", "state")})
        return
    if result["outcome"] == "APPLIED":
        console.print(
            f"cancel recorded for {result['run_id']}; generation "
            f"{result['generation']} fences the old workers, which stop at their next "
            "step boundary"
        )
    else:
        console.print(f"nothing to cancel: {result['detail'] or result['outcome']}")


@app.command()
@guarded
def pause(
    run_id: str = run_id_argument(RUN_HELP),
    reason: str = reason_option("paused by the user"),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Pause a run: a live one saves at its next step boundary, gives its devices back and waits
    (PAUSED) until `runwright resume`; a queued one is held at once."""
    result = open_backend(root, store).pause(run_id, reason)
    if json_out:
        print_json(result)
    elif result["outcome"] == "APPLIED" and result["state"] == "PAUSED":
        console.print(f"{result['run_id']} is held (PAUSED); `runwright resume` queues it again")
    elif result["outcome"] == "APPLIED":
        console.print(
            f"pause recorded for {result['run_id']}: its workers save at their next step "
            "boundary and stop, then the run is PAUSED (`runwright status` shows it)"
        )
    else:
        console.print(f"nothing to pause: {result['detail'] or result['outcome']}")
    if result["outcome"] == "INVALID_TRANSITION":
        raise typer.Exit(code=1)


@app.command()
@guarded
def resume(
    run_id: str = run_id_argument(RUN_HELP),
    reason: str = reason_option("resumed by the user"),
    detach: bool = typer.Option(False, "--detach", help="Run the controller in the background."),
    pools: Path | None = PoolsOption,
    lease_seconds: float = LeaseOption,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Resume a paused run: back to the queue, placed again and restored from its newest
    checkpoint, then driven here as submit does (exit 0 succeeded, 3 paused again, 1 otherwise)
    unless --detach."""
    from runwright.cli.progress import SubmitProgress

    be = open_backend(root, store, pools)
    result = be.resume(run_id, reason)
    if result["outcome"] != "APPLIED":
        if json_out:
            print_json(result)
        else:
            console.print(f"nothing to resume: {result['detail'] or result['outcome']}")
        raise typer.Exit(code=1)
    run_id = result["run_id"]
    if detach:
        if be.remote:
            said = "the server's controller drives it"
        else:
            log = start_controller(be.root, run_id, lease_seconds, store, pools)  # type: ignore[union-attr]
            said = f"controller log {log}"
        if json_out:
            print_json({**result, "detached": True})
        else:
            console.print(f"resumed {run_id} (QUEUED); {said}")
        return
    progress = SubmitProgress(console, be.status(run_id, with_events=False)["total_steps"])
    if not json_out:
        console.print(f"resumed {run_id} from step {result['last_step'] or 0}")
    with progress:
        final = drive(be, run_id, None if json_out else progress.on_event)
    ended(final, json_out)
