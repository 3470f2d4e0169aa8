"""`runwright` entry point: assembles the command groups."""

import logging

import typer

from runwright.cli import ckpt, data, demo, plan, report, runs, spec

app = typer.Typer(
    name="runwright",
    help="Turn a PyTorch training program into a run that can be started, observed, recovered "
    "and audited.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(spec.app, name="spec")
app.add_typer(data.app, name="data")
app.add_typer(ckpt.app, name="ckpt")
app.add_typer(plan.app, name="plan")
app.registered_commands.extend(runs.app.registered_commands)
app.registered_commands.extend(demo.app.registered_commands)
app.registered_commands.extend(report.app.registered_commands)


def main() -> None:
    # Warnings from below the CLI (e.g. the controller's store-outage line) as one timestamped
    # line on stderr, which is the controller log of `submit --detach`.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    app()


if __name__ == "__main__":
    main()
