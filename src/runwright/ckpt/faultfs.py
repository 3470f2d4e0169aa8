"""A fault-injecting fsspec file system for storage drills (issue 16): `faulty+<protocol>://`.

`checkpoint.location: faulty+file:///data/ckpt` (or `faulty+s3://bucket/prefix`) keeps a run's
checkpoints where `file:///data/ckpt` (`s3://bucket/prefix`) would, through the same file system,
except that before each write-side operation it reads a control file and applies the faults armed
there. Only that URL prefix selects it: a location without it never reaches this module, so no
production run takes a faulted path. A `faulty+` root is written the object-store way (no
`staging/`, no rename: shards straight into `<step>-<id>/`, `COMMITTED` last), the path every
`s3://` run takes; its fence is the wrapped root's own (`LocalFence` on the folder, `ObjectFence`
on `s3://`), which no fault touches (the drill is about the checkpoint's bytes).

The control file is named by RUNWRIGHT_FAULTFS_CONTROL in every process that writes (the ranks
inherit the controller's environment; `environment.env` in the spec sets it for them alone); with
none, or while the file does not exist, nothing is injected. It is JSON, read at every operation,
so a drill arms and disarms faults at any moment from outside (`arm`, `disarm`, or any atomic
write of the file):

    {"faults": [{"kind": "full", "path": "*/0000000006-*", "times": 1}]}

| kind | open | write | close | put | makedirs | mutate |
|---|---|---|---|---|---|---|
| slow | | | `seconds` longer | `seconds` longer | | |
| timeout | | blocks `seconds`, ETIMEDOUT | | blocks `seconds`, ETIMEDOUT | | |
| full | | ENOSPC | | ENOSPC | ENOSPC | |
| read_only | EROFS | EROFS | | EROFS | EROFS | EROFS |

(open: a file opened for writing; close: of a file opened for writing; put: a whole object at
once, as the manifest and commit record are written; mutate: mv, rm, touch.)
`path` is a glob (fnmatch: `*` also crosses `/`) matched against the path inside the wrapped file
system; `times` limits a fault to its next K operations across every process sharing the control
file (counted in the file itself, under a lock), after which it is removed; `operations` limits
it to some of its row's operations (a volume that turns read-only once the shards are written is
`read_only` on `put` and `mutate`). Injected errors are real `OSError`s with the real errno, and
their text says they were injected and from which control file. Reads are never faulted.
"""

import contextlib
import errno as errnos
import fcntl
import fnmatch
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import fsspec
from fsspec.spec import AbstractFileSystem
from fsspec.utils import stringify_path
from pydantic import Field, ValidationError, model_validator

from runwright.errors import RunwrightError
from runwright.records import Record
from runwright.remote import bound, require_driver, storage_options

PREFIX = "faulty+"
CONTROL_ENV = "RUNWRIGHT_FAULTFS_CONTROL"
WRAPPED = ("file", "s3")
"""Protocols a `faulty+` URL may wrap: those a checkpoint location may use."""

FaultKind = Literal["slow", "timeout", "full", "read_only"]
Operation = Literal["open", "write", "close", "put", "makedirs", "mutate"]
"""What a file system call is, for the table in the module doc (`mutate`: mv, rm, touch)."""

_APPLIES: dict[FaultKind, frozenset[str]] = {
    "slow": frozenset({"close", "put"}),
    "timeout": frozenset({"write", "put"}),
    "full": frozenset({"write", "put", "makedirs"}),
    "read_only": frozenset({"open", "write", "put", "makedirs", "mutate"}),
}
_ERRNO: dict[FaultKind, int] = {
    "timeout": errnos.ETIMEDOUT,
    "full": errnos.ENOSPC,
    "read_only": errnos.EROFS,
}


class FaultPlanError(RunwrightError):
    """The fault control file is not valid JSON of the documented shape; the message names the
    file, the field and the fix. Not an OSError: a broken drill is not a storage fault."""


class Fault(Record):
    """One fault armed in the control file."""

    kind: FaultKind
    """slow (files take longer), timeout (a write blocks, then ETIMEDOUT), full (ENOSPC),
    read_only (EROFS)."""
    seconds: float = Field(default=0.0, ge=0.0, le=3600.0, allow_inf_nan=False)
    """slow: added to each matching file's close or put; timeout: how long a write blocks
    before it fails."""
    path: str = Field(default="*", min_length=1, max_length=1000)
    """Glob over the path inside the wrapped file system (`*` crosses `/`): `*/0000000006-*`
    is every file of step 6's checkpoint, `*/COMMITTED` every commit marker."""
    times: int | None = Field(default=None, ge=1, le=1_000_000)
    """Only the next K matching operations (all processes together); None: until disarmed."""
    operations: list[Operation] | None = Field(default=None, min_length=1)
    """Only these of the operations the kind applies to (the table); None: all of them. A
    volume that turns read-only once the shards are written: read_only on [put, mutate]."""

    @model_validator(mode="after")
    def _seconds_where_needed(self) -> "Fault":
        never = sorted(set(self.operations or ()) - _APPLIES[self.kind])
        if never:
            raise ValueError(
                f"a {self.kind} fault never applies to {', '.join(never)}; it applies to "
                + ", ".join(sorted(_APPLIES[self.kind]))
            )
        if self.kind in ("slow", "timeout") and self.seconds <= 0:
            raise ValueError(
                f"a {self.kind} fault needs seconds > 0 (how long each "
                f"{'file takes longer' if self.kind == 'slow' else 'write blocks'}), e.g. 2"
            )
        return self

    def applies(self, operation: Operation, path: str) -> bool:
        if operation not in (self.operations or _APPLIES[self.kind]):
            return False
        return fnmatch.fnmatchcase(path, self.path)


class FaultPlan(Record):
    """The control file's content."""

    faults: list[Fault] = Field(default_factory=list, max_length=100)
    """Armed faults; the first one matching an operation applies."""


def control_path() -> Path | None:
    """The control file this process reads (RUNWRIGHT_FAULTFS_CONTROL), if one is named."""
    named = os.environ.get(CONTROL_ENV)
    return Path(named) if named else None


@contextlib.contextmanager
def _locked(control: Path) -> Iterator[None]:
    """The control file's lock (`<file>.lock`, flock): its readers that count and its writers
    take it, so a `times` count is never lost between processes."""
    with open(f"{control}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(control: Path) -> FaultPlan:
    try:
        text = control.read_text()
    except FileNotFoundError:
        return FaultPlan()
    try:
        return FaultPlan.model_validate(json.loads(text) if text.strip() else {})
    except (ValueError, ValidationError) as exc:
        raise FaultPlanError(
            f"fault control file {control} is not a fault plan: {_first_error(exc)}. Write "
            '{"faults": [{"kind": "full", "path": "*", "times": 1}]} (kinds: slow, timeout, '
            "full, read_only), or remove the file to inject nothing"
        ) from None


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "the top level"
        return f"{where}: {error['msg']}"
    return str(exc)


def _write(control: Path, plan: FaultPlan) -> None:
    tmp = control.with_name(f"{control.name}.tmp-{os.getpid()}")
    tmp.write_text(plan.model_dump_json(indent=1, exclude_none=True))
    os.replace(tmp, control)


def arm(control: Path, *faults: Fault) -> None:
    """Replace the armed faults with `faults` (every process sees them at its next operation)."""
    with _locked(control):
        _write(control, FaultPlan(faults=list(faults)))


def disarm(control: Path) -> None:
    """Inject nothing from now on."""
    arm(control)


def armed(control: Path) -> FaultPlan:
    """What is armed now (counts already spent are gone)."""
    with _locked(control):
        return _read(control)


def take(operation: Operation, path: str, control: Path | None = None) -> Fault | None:
    """The fault that applies to `operation` on `path` now, its `times` spent by one; None when
    none does (or no control file is named).

    Read without the lock first (`arm` replaces the file atomically, so a reader sees a whole
    plan): most operations match nothing, and a shard's many writes should not queue on a lock.
    Only a match with a count is taken again under the lock, re-read, and counted."""
    control = control if control is not None else control_path()
    if control is None or _first_match(_cached(control), operation, path) is None:
        return None
    with _locked(control):
        plan = _read(control)
        found = _first_match(plan, operation, path)
        if found is None:
            return None  # spent by another process meanwhile
        index, fault = found
        if fault.times is not None:
            left = fault.model_copy(update={"times": fault.times - 1})
            faults = [*plan.faults[:index], *([left] if left.times else []),
                      *plan.faults[index + 1 :]]  # fmt: skip
            _write(control, FaultPlan(faults=faults))
        return fault


def _first_match(plan: FaultPlan, operation: Operation, path: str) -> tuple[int, Fault] | None:
    for index, fault in enumerate(plan.faults):
        if fault.applies(operation, path):
            return index, fault
    return None


_seen: dict[Path, tuple[tuple[int, int, int], FaultPlan]] = {}
"""control file -> (its inode, size and mtime when parsed, the plan): parsed once per change."""


def _cached(control: Path) -> FaultPlan:
    try:
        info = control.stat()
    except FileNotFoundError:
        return FaultPlan()
    key = (info.st_ino, info.st_size, info.st_mtime_ns)
    seen = _seen.get(control)
    if seen is None or seen[0] != key:
        seen = (key, _read(control))
        _seen[control] = seen
    return seen[1]


def inject(operation: Operation, path: str) -> None:
    """Apply the fault that applies to `operation` on `path`, if any: sleep, block or raise."""
    fault = take(operation, path)
    if fault is None:
        return
    if fault.kind == "slow":
        time.sleep(fault.seconds)
        return
    if fault.kind == "timeout":
        time.sleep(fault.seconds)
    code = _ERRNO[fault.kind]
    raise OSError(
        code,
        f"{os.strerror(code)} (injected: {fault.kind} fault from {control_path()})",
        path,
    )


def inner_url(location: str) -> str:
    """`file:///x` for `faulty+file:///x`; any other location as it is."""
    scheme, sep, rest = location.partition("://")
    if sep and scheme.lower().startswith(PREFIX):
        return f"{scheme[len(PREFIX) :]}://{rest}"
    return location


def is_faulty(location: str) -> bool:
    return inner_url(location) != location


class _FaultyFile:
    """A file open for writing in the wrapped file system, faulted per write and at close."""

    def __init__(self, raw: Any, path: str) -> None:
        self._raw, self._path = raw, path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def write(self, data: Any) -> int:
        inject("write", self._path)
        return self._raw.write(data)

    def close(self) -> None:
        if self._raw.closed:
            return
        try:
            inject("close", self._path)
        finally:
            self._raw.close()

    def __enter__(self) -> "_FaultyFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FaultFileSystem(AbstractFileSystem):
    """`faulty+<protocol>://`: the `<protocol>` file system, with the control file's faults
    injected into its write-side operations (module doc)."""

    protocol = tuple(PREFIX + wrapped for wrapped in WRAPPED)
    root_marker = ""

    def __init__(self, target_protocol: str = "file", **options: Any) -> None:
        super().__init__(**options)
        if target_protocol not in WRAPPED:
            raise ValueError(
                f"{PREFIX}{target_protocol}:// wraps nothing runwright checkpoints to; use "
                + " or ".join(f"{PREFIX}{w}://" for w in WRAPPED)
            )
        require_driver(f"{target_protocol}://")
        self.target_protocol = target_protocol
        self.inner = bound(
            fsspec.filesystem(target_protocol, **storage_options(f"{target_protocol}://"))
        )

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        text = stringify_path(path)
        inner = inner_url(text)
        if inner == text:
            return text  # already a path inside the wrapped file system
        scheme = inner.split("://", 1)[0]
        return fsspec.get_filesystem_class(scheme)._strip_protocol(inner)

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        scheme = stringify_path(path).split("://", 1)[0]
        return {"target_protocol": scheme[len(PREFIX) :]} if scheme.startswith(PREFIX) else {}

    def unstrip_protocol(self, name: str) -> str:
        return f"{PREFIX}{self.target_protocol}://{name}"

    # reads: as they are --------------------------------------------------------------------------
    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        return self.inner.ls(self._strip_protocol(path), detail=detail, **kwargs)

    def info(self, path: str, **kwargs: Any) -> Any:
        return self.inner.info(self._strip_protocol(path), **kwargs)

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.inner.exists(self._strip_protocol(path), **kwargs)

    def isdir(self, path: str) -> bool:
        return self.inner.isdir(self._strip_protocol(path))

    def find(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return self.inner.find(self._strip_protocol(path), *args, **kwargs)

    def cat_file(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return self.inner.cat_file(self._strip_protocol(path), *args, **kwargs)

    # writes: faulted ------------------------------------------------------------------------------
    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if not any(flag in mode for flag in "wax+"):
            return self.inner.open(path, mode, **kwargs)
        inject("open", path)
        return _FaultyFile(self.inner.open(path, mode, **kwargs), path)

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        inject("put", path)
        self.inner.pipe_file(path, value, *args, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        inject("makedirs", path)
        self.inner.makedirs(path, exist_ok=exist_ok)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        inject("makedirs", path)
        self.inner.mkdir(path, create_parents=create_parents, **kwargs)

    def mv(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> None:
        source, target = self._strip_protocol(path1), self._strip_protocol(path2)
        inject("mutate", target)
        self.inner.mv(source, target, *args, **kwargs)

    def rm_file(self, path: str) -> None:
        path = self._strip_protocol(path)
        inject("mutate", path)
        self.inner.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        path = self._strip_protocol(path)
        for one in [path] if isinstance(path, str) else path:
            inject("mutate", one)
        self.inner.rm(path, recursive=recursive, maxdepth=maxdepth)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        inject("mutate", path)
        self.inner.touch(path, truncate=truncate, **kwargs)


def register() -> None:
    """Make `faulty+file://` and `faulty+s3://` known to fsspec in this process (idempotent)."""
    for name in FaultFileSystem.protocol:
        fsspec.register_implementation(name, FaultFileSystem, clobber=True)
