"""`runwright data ...` commands."""

import typer

app = typer.Typer(help="data commands.", no_args_is_help=True)
