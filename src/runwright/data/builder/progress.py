"""The progress bar of long data-plane work (build, import, export): one rich layout for all."""

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress_bar(show: bool, console: Console | None) -> Iterator[Progress | None]:
    """A Progress to add tasks to, or None when nothing is to be shown (e.g. `--json`)."""
    if not show:
        yield None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        yield progress
