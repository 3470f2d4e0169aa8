"""Object storage: the one place that opens an fsspec file system for a URL.

Checkpoints (`ckpt/`), datasets (`data/`) and the object-store fence all reach `s3://` through
`open_filesystem`, so every remote call has the same bounds (docs/ckpt.md, "Object stores"):

- a connect timeout and a read timeout on every request (botocore's `connect_timeout` and
  `read_timeout`), so a server that accepts and never answers cannot hang a rank;
- bounded retries with exponential backoff and jitter: botocore's `standard` retry mode
  (`max_attempts` tries of each request; connection errors, timeouts, throttling and 5xx), inside
  s3fs's own loop (`S3FS_RETRIES` tries of a call and its body read, which botocore cannot
  retry). A server that refuses connections fails a call within about
  S3FS_RETRIES x (1 + 2 + 4) s of backoff; one that hangs within
  S3FS_RETRIES x max_attempts x (connect + read timeout).

Credentials and the endpoint come from the standard AWS configuration (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL` or `AWS_ENDPOINT_URL_S3`, `AWS_DEFAULT_REGION`,
`~/.aws/config`, instance roles) or fsspec's (`FSSPEC_S3_ENDPOINT_URL`), never from the job spec:
the same spec runs against AWS, MinIO or a test server. The bounds can be changed per process
with RUNWRIGHT_S3_CONNECT_TIMEOUT_SECONDS, RUNWRIGHT_S3_READ_TIMEOUT_SECONDS and
RUNWRIGHT_S3_MAX_ATTEMPTS.

Errors: a missing driver is `MissingDriverError` (one line: what to install); a call that fails
after its retries is turned into `RemoteStorageError`, an OSError, by `translated`, so code that
handles a failing disk handles a failing store the same way, and the control plane classifies it
as a `storage` failure. Imports nothing of runwright but errors.py; fsspec and s3fs are imported
only when a URL is opened (the CLI's start-up stays light).
"""

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import Any

from runwright.errors import RunwrightError

DRIVERS = {"s3": ("s3fs", "s3")}
"""URL scheme -> (the fsspec driver package, the runwright extra that installs it)."""
CONNECT_TIMEOUT_SECONDS = 10.0
"""Default bound on opening one connection to the store."""
READ_TIMEOUT_SECONDS = 30.0
"""Default bound on waiting for the next bytes of one response (not on a whole transfer)."""
MAX_ATTEMPTS = 4
"""Default tries of one request by botocore (the first and 3 retries)."""
S3FS_RETRIES = 2
"""Tries of one call (request and body read) by s3fs around botocore's."""
CONNECT_TIMEOUT_ENV = "RUNWRIGHT_S3_CONNECT_TIMEOUT_SECONDS"
READ_TIMEOUT_ENV = "RUNWRIGHT_S3_READ_TIMEOUT_SECONDS"
MAX_ATTEMPTS_ENV = "RUNWRIGHT_S3_MAX_ATTEMPTS"


class MissingDriverError(RunwrightError):
    """A URL's scheme needs an fsspec driver that is not installed."""


class RemoteStorageError(RunwrightError, OSError):
    """A call to an object store failed after its bounded retries (unreachable, timed out,
    refused). An OSError, so storage code handles it like a failing disk; the control plane
    classifies it as `storage`."""


def is_url(location: str) -> bool:
    """True for `scheme://...` other than `file://` (a local path in URL form)."""
    return "://" in location and not location.startswith("file://")


def scheme_of(location: str) -> str | None:
    """`s3` for `s3://bucket/key`; None for a local path (or `file://`)."""
    return location.split("://", 1)[0].lower() if is_url(location) else None


def require_driver(location: str) -> None:
    """Raise `MissingDriverError` (one actionable line) when `location`'s scheme needs a driver
    that is not installed."""
    scheme = scheme_of(location)
    if scheme not in DRIVERS:
        return
    package, extra = DRIVERS[scheme]
    if importlib.util.find_spec(package) is None:
        raise MissingDriverError(
            f"{location} needs {package}, which is not installed: "
            f"pip install 'runwright[{extra}]' (or pip install {package})"
        )


def _env_number(name: str, default: float, *, integer: bool = False) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise RunwrightError(
            f"{name}={text!r} is not a {'whole ' if integer else ''}number; unset it or give "
            f"e.g. {int(default) if integer else default}"
        ) from None
    if value <= 0:
        raise RunwrightError(f"{name}={text!r} must be more than 0; unset it for {default}")
    return value


def storage_options(location: str) -> dict[str, Any]:
    """The fsspec options `location` is opened with: timeouts and retries for `s3://`."""
    if scheme_of(location) != "s3":
        return {}
    return {
        # Listings are read fresh: another process (a rank, the controller, GC) may have written
        # or deleted since, and a cached listing would hide a commit or show a deleted folder.
        "use_listings_cache": False,
        "config_kwargs": {
            "connect_timeout": _env_number(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_SECONDS),
            "read_timeout": _env_number(READ_TIMEOUT_ENV, READ_TIMEOUT_SECONDS),
            "retries": {
                "mode": "standard",
                "max_attempts": int(_env_number(MAX_ATTEMPTS_ENV, MAX_ATTEMPTS, integer=True)),
            },
        },
    }


def open_filesystem(location: str) -> tuple[Any, str]:
    """(file system, path within it) for a URL, opened with `storage_options`. fsspec caches
    the file system per options, so DCP's readers and writers, given the same options, share it."""
    require_driver(location)
    import fsspec

    with translated(location):
        fs, path = fsspec.core.url_to_fs(location, **storage_options(location))
    return bound(fs), path


def bound(fs: Any) -> Any:
    """`fs` with s3fs's own retry count set (a class attribute in s3fs, not an option, so it is
    set on the instance: fsspec caches one per thread and options, and DCP opens its own)."""
    protocol = getattr(fs, "protocol", ())
    if "s3" in (protocol if isinstance(protocol, tuple | list) else (protocol,)):
        fs.retries = S3FS_RETRIES
    return fs


def remote_errors() -> tuple[type[BaseException], ...]:
    """What a remote call raises besides OSError: botocore's own errors (connection, timeouts,
    credentials) and aiohttp's, where those packages are installed."""
    found: list[type[BaseException]] = []
    with contextlib.suppress(ImportError):
        from botocore.exceptions import BotoCoreError, ClientError

        found += [BotoCoreError, ClientError]
    with contextlib.suppress(ImportError):
        from aiohttp import ClientError as AiohttpClientError

        found.append(AiohttpClientError)
    return tuple(found)


def describe(exc: BaseException) -> str:
    """`Type: message` on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def translated(location: str) -> Iterator[None]:
    """Turn a remote call's non-OSError failure (botocore, aiohttp) into `RemoteStorageError`
    naming `location`; OSErrors (s3fs's own translation: missing key, permission) pass as they
    are."""
    try:
        yield
    except OSError:
        raise
    except Exception as exc:
        # botocore and aiohttp are imported only once a call has failed: importing them took
        # 0.85 s here, which the first local checkpoint read of every process paid
        if not isinstance(exc, remote_errors()):
            raise
        raise RemoteStorageError(
            f"{location}: {describe(exc)} (after the bounded retries; check the endpoint "
            f"({endpoint_hint()}), the credentials and that the store is up)"
        ) from exc


def endpoint_hint() -> str:
    """Where the endpoint came from, for messages."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]}"
    return "AWS's default endpoint; set AWS_ENDPOINT_URL for another server"
