"""`runwright` entry point: assembles the command groups."""

import typer

from runwright.cli import ckpt, data, plan

app = typer.Typer(
    name="runwright",
    help="Turn a PyTorch training program into a run that can be started, observed, recovered "
    "and audited.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(data.app, name="data")
app.add_typer(ckpt.app, name="ckpt")
app.add_typer(plan.app, name="plan")


def main() -> None:
    app()
