"""`runwright plan ...` commands."""

import typer

app = typer.Typer(help="plan commands.", no_args_is_help=True)
