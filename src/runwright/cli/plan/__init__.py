"""`runwright plan ...`: capacity planning from flags or a spec. Each command parses its flags,
calls one function in `runwright.plan` and renders a table with units (or `--json`); one module
per command, the options and unit formatting they share in `inputs`."""

import typer

from runwright.cli.plan import capacity, comm, fleet, interval, memory, parallel, scaling

app = typer.Typer(
    help="Capacity planning: memory and communication ledgers, checkpoint interval, parallel "
    "layout search, scaling efficiency, capacity (device-hours, storage, failures, cost), "
    "fleet simulation (ETTR under failures).",
    no_args_is_help=True,
)
for command in (
    memory.memory,
    comm.comm,
    interval.interval,
    parallel.parallel,
    scaling.scaling,
    capacity.capacity,
    fleet.fleet,
):
    app.command()(command)

__all__ = ["app"]
