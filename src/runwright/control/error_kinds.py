"""What an exception names (control/failures.py classifies with it): the failure classes whose
cause travels with the code or data (DETERMINISTIC), the words that name a class in a rank's
error (PATTERNS), and whether runwright's own platform code raised it (`platform_fault`: then it
is `storage` or `infrastructure`, never `user_code`), decided by the deepest frame of the
traceback inside runwright's platform packages.
"""

import builtins
import re
from pathlib import Path

import runwright
from runwright.ckpt import errors as ckpt_errors
from runwright.spec import FailureClass

# Classes whose cause travels with the code or data: retrying the same inputs fails the same way.
DETERMINISTIC = frozenset(
    {FailureClass.USER_CODE, FailureClass.OOM, FailureClass.DATA, FailureClass.NAN_INF}
)

# Exception names and message fragments, checked in order against the first failing rank's error.
PATTERNS: list[tuple[FailureClass, re.Pattern[str]]] = [
    (FailureClass.OOM, re.compile(r"OutOfMemoryError|out of memory|MemoryError", re.I)),
    # Without the group's SDC_DETECTED (control/sdc.py reads it first), its ranks' error; before
    # nan_inf, whose words ("non-finite") an invariant's message may carry.
    (FailureClass.SDC, re.compile(r"SilentDataCorruptionError")),
    (FailureClass.NAN_INF, re.compile(r"NonFiniteError|LossSpikeError|non-finite", re.I)),
    (
        FailureClass.DATA,
        re.compile(
            r"ShardCorruptError|CursorMismatchError|SourceExhaustedError|ManifestError|DataError"
        ),
    ),
    (
        FailureClass.STORAGE,
        re.compile(
            # RemoteStorageError / DataStorageError: an object store still failing after the
            # bounded retries of runwright.remote (checkpoints, the fence, datasets).
            r"CheckpointStorageError|BackgroundSaveError|RemoteStorageError|DataStorageError|"
            r"No space left|Errno 28|Errno 5\]|Read-only file system|Stale file handle",
            re.I,
        ),
    ),
    (
        FailureClass.INFRASTRUCTURE,
        re.compile(
            r"RendezvousError|DistNetworkError|DistStoreError|CollectiveCheckError|"
            r"Address already in use|"
            r"Connection reset by peer|Broken pipe|Gloo.*(timeout|connect)",
            re.I,
        ),
    ),
]


def _subclass_names(cls: type) -> set[str]:
    names = {cls.__name__}
    for sub in cls.__subclasses__():
        names |= _subclass_names(sub)
    return names


# A checkpoint that cannot be written, read or published is a storage fault wherever it is raised
# (the names are distinctive). CheckpointStorageError is named too, for a checkpoint package that
# defines it outside ckpt/errors.py.
CHECKPOINT_ERRORS = frozenset(
    _subclass_names(ckpt_errors.CheckpointError) | {"CheckpointStorageError"}
)
# These names are common (a user's sqlite3.OperationalError, their own StoreError): they count as
# the platform's only when runwright's platform code raised them, or by their qualified name.
STORE_ERRORS = frozenset(
    {
        "StoreError",
        "LaunchError",
        "OperationalError",
        "DatabaseError",
        "InterfaceError",
        "DBAPIError",
    }
)
QUALIFIED_PLATFORM_ERRORS = re.compile(
    r"^runwright\.(errors|store\.[\w.]+)\.(StoreError|LaunchError)\b"
)
OS_ERRORS = frozenset(
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, OSError)
)
NETWORK_OS_ERRORS = frozenset(
    name
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, ConnectionError)
)
# runwright's platform packages. train/ and demo/ are built on the public API as a user's script
# is, so an error raised in them is treated like one raised in the user's code.
PLATFORM_PACKAGES = frozenset({"ckpt", "control", "data", "observe", "runtime", "store"})
RUNWRIGHT_DIR = Path(runwright.__file__).resolve().parent.as_posix()
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)', re.M)
INSTALLED_RUNWRIGHT = re.compile(r"/(?:site|dist)-packages/runwright/(?P<rest>.+)$")
LIBRARY = re.compile(r"/(?:site|dist)-packages/|/lib/python3\.\d+/|^<")


def _runwright_module(path: str) -> str | None:
    """`ckpt/restore.py` for a frame in runwright's code (this installation, or runwright
    installed on another machine), else None."""
    path = path.replace("\\", "/")
    if path.startswith(RUNWRIGHT_DIR + "/"):
        return path[len(RUNWRIGHT_DIR) + 1 :]
    installed = INSTALLED_RUNWRIGHT.search(path)
    return installed.group("rest") if installed else None


def _deciding_frame(traceback: str) -> tuple[str, int] | None:
    """The innermost frame in code that is runwright's or the user's, skipping the standard
    library and third-party packages between (an OSError from `open()` inside pathlib is raised
    by whoever called pathlib): (runwright module or user path, line); None without frames."""
    frames = [(m.group("path"), int(m.group("line"))) for m in FRAME.finditer(traceback)]
    for path, line in reversed(frames):
        module = _runwright_module(path)
        if module is not None:
            return f"runwright/{module}", line
        if not LIBRARY.search(path.replace("\\", "/")):
            return path, line
    return None


def exception_line(text: str) -> str:
    """The final exception's `Name: message` line of a traceback (or the text's last line)."""
    block = text.rsplit("Traceback (most recent call last)", 1)[-1]
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith((" ", "\t"))]
    return lines[-1].strip() if lines else ""


def platform_fault(message: str, traceback: str) -> tuple[FailureClass, str] | None:
    """(storage or infrastructure, where it was raised) when runwright's platform code caused the
    failure; None for the user's own errors.

    `message` is the exception's `Name: text` line, `traceback` the formatted traceback (the
    last one decides when exceptions were chained)."""
    last = traceback.rsplit("Traceback (most recent call last)", 1)[-1]
    line = exception_line(last) or message.strip()
    qualified = re.split(r"[:\s]", line, maxsplit=1)[0]
    name = qualified.rsplit(".", 1)[-1]
    frame = _deciding_frame(last)
    where = f"raised in {frame[0]}:{frame[1]}" if frame else "raised without a traceback"
    if name == "IncompatibleCheckpointError":
        # The newest checkpoint does not fit this run's tokenizer, data or model: the run's own
        # inputs, which fail the same way on every retry (deterministic), not its storage.
        return FailureClass.DATA, where
    if name in CHECKPOINT_ERRORS:
        return FailureClass.STORAGE, where
    if QUALIFIED_PLATFORM_ERRORS.match(qualified):
        return FailureClass.INFRASTRUCTURE, where
    package = frame[0].split("/")[1] if frame and frame[0].startswith("runwright/") else None
    if package not in PLATFORM_PACKAGES:
        return None
    if name in STORE_ERRORS or name in NETWORK_OS_ERRORS or package == "store":
        return FailureClass.INFRASTRUCTURE, where
    if name in OS_ERRORS:
        return FailureClass.STORAGE, where
    return None
