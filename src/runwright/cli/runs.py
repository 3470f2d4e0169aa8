"""`runwright submit|controller`: start runs and drive them; the options the commands that act
on a run share (`RUN_HELP`, `reason_option`, `LeaseOption`). The commands that look at runs are
in run_views.py.

What only some commands need (the controller, the spec loader) is imported inside them."""

import signal
from pathlib import Path
from typing import Any

import typer

from runwright.cli.backend import drive, ended, open_backend, start_controller
from runwright.cli.options import (
    JsonOption,
    PoolsOption,
    RootOption,
    SetOption,
    StoreOption,
    bounded_text,
    open_store,
    run_id_argument,
)
from runwright.cli.render import console, guarded, print_json
from runwright.control.leasing import LEASE_SECONDS
from runwright.control.summary import event_line

app = typer.Typer()

RUN_HELP = "Run id or a unique prefix of it."
MAX_KEY_CHARS = 200
"""Longest idempotency key."""
MAX_REASON_CHARS = 2000
"""Longest cancel reason recorded with a run."""


def reason_option(default: str, help: str = "Recorded with the run.") -> Any:
    """`--reason` of a person's action on a run (cancel, pause, an operator's action)."""
    return typer.Option(
        default, "--reason", help=help, callback=bounded_text("--reason", MAX_REASON_CHARS)
    )


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
    "controller died; a controller that stops cleanly hands its runs over at once. Through "
    "--server, the server's controller decides.",
)


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
    pools: Path | None = PoolsOption,
    lease_seconds: float = LeaseOption,
    overrides: list[str] = SetOption,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Submit a run and drive it to a terminal state (Ctrl-C cancels it). A spec its pool can
    never place (more nodes than the partition has, say) is refused with exit 2 and no run.

    Prints the events a person reads (state changes, checkpoints, failures, recoveries) and one
    progress line for the steps, with the loss and an ETA."""
    from runwright.cli.progress import SubmitProgress
    from runwright.spec import load_spec

    spec = load_spec(spec_file, overrides)
    be = open_backend(root, store, pools)
    progress = SubmitProgress(console, spec.plan.total_steps.value)
    # Locally in the foreground this process is the run's controller, and holds the new run's
    # lease from the transaction that creates it; a detached one leaves it to the controller
    # it starts, a server's to the server's controller.
    controller = None
    if not be.remote and not detach:
        from runwright.control.controller import Controller

        controller = Controller(
            be.store,  # type: ignore[union-attr]
            be.root,
            on_event=None if json_out else progress.on_event,
            lease_seconds=lease_seconds,
            pools_file=be.pools_file,  # type: ignore[union-attr]
        )
    # --- server seam: the backend records the run (locally, or through --server) ---
    submitted = be.submit(
        spec,
        idempotency_key=idempotency_key,
        workdir=None if be.remote else spec_file.resolve().parent,
        source=str(spec_file),
        **({"controller": controller} if controller is not None else {}),
    )
    run_id, state = submitted["run_id"], submitted["state"]
    if not submitted["created"]:
        if json_out:
            print_json({"run_id": run_id, "created": False, "state": state})
        else:
            console.print(
                f"idempotency key already used: existing run {run_id} ({state}); nothing started"
            )
        return
    if detach and be.remote:
        if json_out:
            print_json({"run_id": run_id, "created": True, "detached": True})
        else:
            console.print(f"submitted {run_id}; the server's controller drives it")
        return
    # ---
    if detach:
        log = start_controller(be.root, run_id, lease_seconds, store, pools)
        if json_out:
            print_json(
                {
                    "run_id": run_id,
                    "created": True,
                    "detached": True,
                    "controller_log": str(log),
                }
            )
        else:
            console.print(f"submitted {run_id}; controller log {log}")
        return
    if not json_out:
        console.print(f"run {run_id} (spec {spec.spec_hash[:12]})")
    with progress:
        final = drive(be, run_id, None if json_out else progress.on_event, controller)
    ended(final, json_out)


@app.command("controller")
@guarded
def controller_cmd(
    run_id: str | None = run_id_argument(
        "Drive this run only; without it, every unfinished run in the store.", None
    ),
    daemon: bool = typer.Option(False, "--daemon", help="Keep watching for new runs."),
    pools: Path | None = PoolsOption,
    inventory: Path | None = typer.Option(
        None,
        "--inventory",
        help="Inventory file (YAML, docs/sched.md): queued runs start only once the scheduler "
        "admits their whole gang onto these nodes, within their project's quota (the file's "
        "`quotas:`), and say why they wait. `slurm`: the Slurm pools' nodes, read live from the "
        "cluster with what other jobs hold there. Without it a run is admitted at once.",
        show_default=False,
    ),
    lease_seconds: float = LeaseOption,
    root: Path | None = RootOption,
    store: str | None = StoreOption,
) -> None:
    """Run the controller: reconcile runs from the store (what `submit --detach` starts). A
    restarted controller adopts live worker groups and kills orphans of older generations; a
    run placed through a pool keeps that pool's executor whatever --pools says now.
    Several controllers may share one store (on several hosts): each run is driven by the one
    holding its lease, and the others stand by to take it over if that one dies. SIGTERM stops
    this controller cleanly: it hands its runs over and leaves their workers running."""
    resolved, st = open_store(root, store, ride_out_outage=True)
    from runwright.control.controller import Controller
    from runwright.sched.sources import load_scheduler_file

    nodes, quotas = None, None
    if inventory is not None:
        listed, quotas = (
            ("slurm", None) if str(inventory) == "slurm" else load_scheduler_file(inventory)
        )
        if isinstance(listed, str):
            from runwright.control.cluster_inventory import SlurmPoolsInventory
            from runwright.control.pools import load_pools, pools_path

            nodes = SlurmPoolsInventory(load_pools(pools_path(resolved, pools)))
        else:
            nodes = listed
        from runwright.control.node_health import (
            HealthGatedInventory,
            NodeHealthLedger,
            load_drain_policy,
        )

        # Nodes whose GPUs reported ECC errors or hardware Xids past the file's `node_health:`
        # thresholds are drained (docs/sched.md).
        policy = load_drain_policy(None if str(inventory) == "slurm" else inventory)
        nodes = HealthGatedInventory(nodes, NodeHealthLedger(resolved), policy)
    controller = Controller(
        st,
        resolved,
        on_event=_printer(False),
        lease_seconds=lease_seconds,
        pools_file=pools,
        inventory=nodes,
        quotas=quotas,
    )
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
