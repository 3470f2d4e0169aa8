"""Shared rendering helpers: JSON output, tables, and user-facing errors without tracebacks."""

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.markup import escape

from runwright.errors import RunwrightError, StoreUnavailableError
from runwright.store import describe_fault

console = Console()
err_console = Console(stderr=True)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn runwright's own errors, and store errors no retry fixes, into a one-paragraph
    message and exit status 2."""
    try:
        yield
    except StoreUnavailableError as exc:
        _fail(
            f"{exc}; another process holds its lock or its server is down or unreachable: run "
            "the command again once it is back"
        )
    except RunwrightError as exc:
        _fail(str(exc))
    except sa.exc.SQLAlchemyError as exc:
        _fail(describe_fault(exc))


def _fail(message: str) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2) from None


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of `user_errors` for typer commands."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with user_errors():
            return fn(*args, **kwargs)

    return wrapper
