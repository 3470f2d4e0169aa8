"""The seam under the commands: one object with the same methods whether the CLI works on the
store itself or through a `runwright server` (`--server URL` or $RUNWRIGHT_SERVER).

Locally it is `runwright.access.Access` for the local actor (`local:<os user>`: whoever can open
the store may do anything in it, and is audited as such); remotely `cli/remote.py` asks the
server the same questions over HTTP. Each command calls one method and renders what comes back,
so its output and `--json` are the same both ways. httpx is imported only for the remote one.
"""

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.errors import RunwrightError

if TYPE_CHECKING:
    from runwright.access.service import Access
    from runwright.cli.remote import RemoteBackend
    from runwright.control.controller import Controller
    from runwright.events import EventRecord

SERVER_ENV = "RUNWRIGHT_SERVER"


def server_url() -> str | None:
    return os.environ.get(SERVER_ENV) or None


def open_backend(
    root: Path | None, store: str | None, pools: Path | None = None
) -> "Access | RemoteBackend":
    """`pools`: the pools file (--pools) a local submit places its run through."""
    url = server_url()
    if url is not None:
        if store:
            raise RunwrightError(
                "--store and --server both given: a command works on the store itself or "
                "through the server, not both; leave one out"
            )
        if pools:
            raise RunwrightError(
                "--pools and --server both given: the server places runs through its own pools "
                "file; leave --pools out (the spec's resources.pool picks one of the server's)"
            )
        from runwright.cli.remote import RemoteBackend

        return RemoteBackend(url)
    from runwright.access.base import local_actor
    from runwright.access.service import Access
    from runwright.cli.options import open_store
    from runwright.layout import resolve_root

    return Access(
        lambda: open_store(root, store)[1],
        resolve_root(root),
        local_actor(),
        root_given=root is not None,
        pools_file=pools,
    )


def drive(
    backend: "Access | RemoteBackend",
    run_id: str,
    on_event: "Callable[[EventRecord], None] | None" = None,
    controller: "Controller | None" = None,
) -> dict[str, Any]:
    """`submit` in the foreground: locally, drive the run here (this process is its controller,
    as `torchrun` is: `controller`, the one that submitted the run holding its lease, or a new
    one); through a server, follow its events while the server's controller drives it. Either
    way Ctrl-C cancels the run and waits for it to wind down. The run's summary, as
    `status --json` gives it, once it has finished."""
    if not backend.remote:
        if controller is None:
            from runwright.control.controller import Controller

            controller = Controller(
                backend.store,  # type: ignore[union-attr]
                backend.root,  # type: ignore[union-attr]
                on_event=on_event,
                pools_file=backend.pools_file,  # type: ignore[union-attr]
            )
        controller.drive(run_id)
        return backend.status(run_id)
    from runwright.events import EventRecord

    seen = 0

    def show(after: int) -> None:
        nonlocal seen
        for event in backend.follow(run_id, after):
            seen = event["seq"]
            if on_event is not None:
                on_event(EventRecord.model_validate(event))

    try:
        show(0)
    except KeyboardInterrupt:
        backend.cancel(run_id, "interrupted by the user (Ctrl-C)")
        show(seen)
    return backend.status(run_id)


PAUSED_EXIT_CODE = 3
"""What a command that drives a run exits with when the run stopped PAUSED (not a failure, not
finished: it waits for `runwright resume`)."""


def ended(final: dict[str, Any], json_out: bool) -> None:
    """Say how a run a command drove ended, and exit as a script waiting on it needs: 0
    SUCCEEDED, PAUSED_EXIT_CODE paused, 1 otherwise."""
    import typer

    from runwright.cli.render import console, print_json

    run_id, state = final["run_id"], final["state"]
    if json_out:
        print_json(final)
    elif state == "PAUSED":
        console.print(f"run {run_id} is PAUSED: {final.get('state_detail') or ''}", highlight=False)
    else:
        console.print(f"run {run_id} ended {state} ({final['terminal_reason']})")
    if state == "PAUSED":
        raise typer.Exit(code=PAUSED_EXIT_CODE)
    if state != "SUCCEEDED":
        raise typer.Exit(code=1)


def start_controller(
    root: Path, run_id: str, lease_seconds: float, store: str | None, pools: Path | None
) -> Path:
    """Start `runwright controller RUN` in the background, in its own session, writing to the
    run's controller log (what `--detach` does); returns that log's path."""
    import subprocess
    import sys

    from runwright.control.pools import pools_path
    from runwright.layout import run_paths

    log = run_paths(root, run_id).controller_log
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "runwright.cli.main", "controller", run_id,
            "--root", str(root), "--lease-seconds", str(lease_seconds)]  # fmt: skip
    if store:
        argv += ["--store", store]
    # The detached controller drives the run through the same pools as the command that
    # started it.
    source = pools_path(root, pools)
    if source is not None:
        argv += ["--pools", str(source)]
    with open(log, "ab") as out:
        subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)  # fmt: skip
    return log
