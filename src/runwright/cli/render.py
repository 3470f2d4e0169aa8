"""Shared rendering helpers: JSON output, tables, and user-facing errors without tracebacks."""

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from runwright.errors import RunwrightError, StoreUnavailableError

console = Console()
err_console = Console(stderr=True)


def print_unclipped(renderable: Any) -> None:
    """Print at the renderable's natural width when the terminal is narrower, so no cell is
    truncated or folded."""
    natural = console.measure(renderable, options=console.options.update_width(100_000)).maximum
    if natural <= console.width:
        console.print(renderable)
    else:
        Console(width=natural, force_terminal=console.is_terminal).print(renderable)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


JSON_FLAGS = ("json_out", "as_json")
"""The parameter names commands give their `--json` flag."""


@contextmanager
def user_errors(as_json: bool = False) -> Iterator[None]:
    """Turn runwright's own errors, and store errors no retry fixes, into a one-paragraph
    message and exit status 2; under `--json`, into one JSON object on stdout
    (`{"error": MESSAGE, "exit_code": 2}`), so a script reading the output gets JSON either way."""
    try:
        yield
    except StoreUnavailableError as exc:
        _fail(
            f"{exc}; another process holds its lock or its server is down or unreachable: run "
            "the command again once it is back",
            as_json,
        )
    except RunwrightError as exc:
        _fail(str(exc), as_json)
    except Exception as exc:
        # SQLAlchemy is imported by the commands that open a store; only they can raise its errors.
        sqlalchemy = sys.modules.get("sqlalchemy")
        if sqlalchemy is None or not isinstance(exc, sqlalchemy.exc.SQLAlchemyError):
            raise
        from runwright.store import describe_fault

        _fail(describe_fault(exc), as_json)


def _fail(message: str, as_json: bool = False) -> NoReturn:
    if as_json:
        sys.stdout.write(json.dumps({"error": message, "exit_code": 2}) + "\n")
    else:
        err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2) from None


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of `user_errors` for typer commands; a command's `--json` flag (named as in
    JSON_FLAGS) makes its errors JSON too."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with user_errors(any(bool(kwargs.get(flag)) for flag in JSON_FLAGS)):
            return fn(*args, **kwargs)

    return wrapper
