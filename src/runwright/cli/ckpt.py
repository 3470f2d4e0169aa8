"""`runwright ckpt ...` commands."""

import typer

app = typer.Typer(help="ckpt commands.", no_args_is_help=True)
