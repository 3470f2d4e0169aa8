"""The fence: the one place that decides whether a checkpoint becomes the run's latest.

ARCHITECTURE.md ("Fencing"): every write that changes shared state carries the writer's
generation and is applied only if it equals the run's current generation, checked atomically.
`ckpt/` never imports the store; it publishes through this Protocol. `LocalFence` implements it
with a lock file, a generation file and an atomically replaced pointer file, and it is the
authority for checkpoints both in a standalone script and under the control plane: a worker holds
no database connection, and a stale writer must be rejected even while no controller runs. The
control plane's store does not hold a second pointer or a second counter that could disagree: its
generation bump raises this fence first (`raise_to`), and its "latest checkpoint" is read from
this fence's pointer (docs/ckpt.md, "Which checkpoint is latest").

Contract for implementations:
- `publish` is atomic: it compares `generation` with the current generation and, only if they
  are equal, replaces the latest pointer with `LatestPointer.from_record(record)`, in one critical
  section (a transaction, a lock).
- Publishing the checkpoint the pointer already names returns ALREADY_APPLIED (retries are safe).
- A stale generation returns STALE_GENERATION and changes nothing; it is an expected outcome, not
  an exception.
"""

import contextlib
import fcntl
import os
import re
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from runwright.ckpt.errors import CheckpointError, CheckpointRootError
from runwright.ckpt.failures import storage_error
from runwright.ckpt.faultfs import inner_url
from runwright.ckpt.manifest import RECORD_MAX_BYTES, CommitRecord, LatestPointer
from runwright.ckpt.storage import read_local_record, replace_file

LOCK_FILE = "FENCE.lock"
GENERATION_FILE = "GENERATION"
LATEST_FILE = "LATEST.json"
FENCE_OBJECT = "FENCE.json"
"""The object-store fence's one object: generation and latest pointer together (object_fence.py)."""
_GENERATION_TEXT = re.compile(r"\s*(?P<generation>[0-9]{1,18})\s*", re.ASCII)
"""What `GENERATION` holds: ASCII digits (at most 18, so any value fits in an int64) and
whitespace; `int()` alone would also take `-3`, `+3`, `1_0` and non-ASCII digits."""


_WITHOUT = {
    LATEST_FILE: "restore the newest committed checkpoint instead (`runwright ckpt list` shows "
    "it; a folder a fenced writer committed after the last publish would count too)",
    GENERATION_FILE: "start again from generation 0 (safe only when no writer of this run is "
    "still running)",
}


class PublishOutcome(StrEnum):
    """What the fence did with a publish."""

    APPLIED = "applied"
    """The pointer now names this checkpoint."""
    ALREADY_APPLIED = "already_applied"
    """The pointer already named this checkpoint; nothing changed."""
    STALE_GENERATION = "stale_generation"
    """The writer's generation is not the run's current one; nothing changed."""


@runtime_checkable
class Fence(Protocol):
    """Compare-and-set of a run's latest checkpoint pointer under its generation."""

    def current_generation(self) -> int:
        """The run's current generation (fencing token)."""
        ...

    def latest(self) -> LatestPointer | None:
        """The newest published checkpoint, or None before the first publish."""
        ...

    def publish(self, record: CommitRecord, generation: int) -> PublishOutcome:
        """Make `record` the latest checkpoint iff `generation` is current (see module doc)."""
        ...


@runtime_checkable
class GenerationFence(Fence, Protocol):
    """A Fence that is also the generation authority of its checkpoint root: what a standalone
    start advances, the control plane's store raises, and the operator commands read."""

    def peek_generation(self) -> int:
        """The current generation, read without taking anything (commands that only look)."""
        ...

    def advance_generation(self, make_room: Callable[[int], object] | None = None) -> int:
        """Bump and return the generation (a standalone start)."""
        ...

    def raise_to(self, generation: int) -> int:
        """Raise the generation to at least `generation`; returns the fence's generation."""
        ...

    def latest_published(self) -> tuple[LatestPointer, float] | None:
        """The latest pointer and when it was published (unix seconds); None before the first
        publish."""
        ...


def open_fence(checkpoint_root: str | os.PathLike[str]) -> GenerationFence:
    """The fence of a checkpoint root: `LocalFence` for a folder, `ObjectFence` for `s3://`
    (docs/ckpt.md, "Object stores"); a `faulty+` drill root's is that of the root it wraps. Any
    other URL raises `CheckpointError`: the fence needs a lock or conditional writes, which
    runwright uses on these two only."""
    # A storage drill's root (`faulty+file://`, `faulty+s3://`) is fenced where it wraps: the
    # faults are injected into the checkpoint's files, never into the fence (faultfs.py).
    text = inner_url(os.fspath(checkpoint_root))
    if "://" not in text or text.startswith("file://"):
        return LocalFence(text)
    if text.split("://", 1)[0].lower() == "s3":
        from runwright.ckpt.object_fence import ObjectFence  # s3fs only when a URL needs it

        return ObjectFence(text)
    raise CheckpointError(
        f"no fence for {text}: runwright's fence needs a local folder (flock) or s3:// "
        "(conditional writes); keep checkpoints there, or pass a Fence of your own"
    )


class LocalFence:
    """A Fence for standalone scripts on a local or shared POSIX file system.

    Files under the run's checkpoint folder: `FENCE.lock` (flock taken around every read-modify-
    write), `GENERATION` (the current generation as text) and `LATEST.json` (the pointer). Both
    data files are replaced atomically (`<name>.tmp-<pid>`, fsync, os.replace, fsync folder); a
    failed replace removes its tmp file and raises `CheckpointStorageError`, and a tmp file left
    by a killed writer is never read (GC removes it once its pid is gone). A script calls
    `advance_generation()` once at start-up (or `ckpt.start.start_generation`, which makes room
    first), which fences off any writer still running from an earlier start. An unreadable or
    corrupt pointer or generation file raises `CheckpointRootError` naming the file and the fix.
    """

    def __init__(self, checkpoint_root: str | os.PathLike[str]) -> None:
        text = os.fspath(checkpoint_root)
        if "://" in text and not text.startswith("file://"):
            raise CheckpointError(
                f"LocalFence needs a local folder, got {text}; on an object store pass the "
                "control plane's fence (runwright's runtime client) instead."
            )
        self.root = Path(text.removeprefix("file://"))
        self.root.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        path = self.root / LOCK_FILE
        try:
            handle = open(path, "a+")  # noqa: SIM115 (closed by the with below; open may fail)
        except OSError as exc:
            raise storage_error("opening the fence lock", str(path), exc) from exc
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _replace(self, name: str, text: str) -> None:
        replace_file(self.root / name, text.encode(), action=f"replacing {name}")

    def _read(self, name: str) -> str | None:
        path = self.root / name
        try:
            return read_local_record(path, RECORD_MAX_BYTES).decode()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointRootError(
                f"cannot read {path}: {type(exc).__name__}: {exc}. Restore and every start need "
                f"it: make it a readable file again (permissions, the mount), or move it aside "
                f"(`mv {path} {path}.bad`) to {_WITHOUT[name]}."
            ) from exc

    def _read_generation(self) -> int:
        text = self._read(GENERATION_FILE)
        if text is None:
            return 0
        match = _GENERATION_TEXT.fullmatch(text)
        if match is None:
            raise CheckpointRootError(
                f"{self.root / GENERATION_FILE} holds {text[:40]!r}, not a generation number "
                f"(ASCII digits). Write the generation back (`runwright ckpt list` shows the "
                f"newest in use) or move it aside to {_WITHOUT[GENERATION_FILE]}."
            )
        return int(match["generation"])

    def current_generation(self) -> int:
        with self._locked():
            return self._read_generation()

    def peek_generation(self) -> int:
        """The current generation read without the lock, for commands that only look: the file
        is replaced atomically, so an unlocked read sees a whole old or new value, and nothing
        is created (the lock file is)."""
        return self._read_generation()

    def advance_generation(self, make_room: Callable[[int], object] | None = None) -> int:
        """Bump and return the generation: every writer holding an older one is now stale.

        `make_room(new_generation)` runs first, under the same lock as every publish (so no
        publish lands between the two): it may collect what the new generation fences off, so a
        full volume has room for the generation file. A failed write leaves no tmp file and
        raises `CheckpointStorageError`."""
        with self._locked():
            generation = self._read_generation() + 1
            if make_room is not None:
                make_room(generation)
            self._replace(GENERATION_FILE, f"{generation}\n")
            return generation

    def raise_to(self, generation: int) -> int:
        """Make `generation` current unless the fence is already past it; returns the fence's
        generation. Never lowers it, so a repeated or out-of-order raise is harmless, and every
        writer holding an older generation is stale from the moment this returns."""
        with self._locked():
            current = self._read_generation()
            if current < generation:
                self._replace(GENERATION_FILE, f"{generation}\n")
                return generation
            return current

    def latest(self) -> LatestPointer | None:
        text = self._read(LATEST_FILE)
        if text is None:
            return None
        try:
            return LatestPointer.model_validate_json(text)
        except ValidationError as exc:
            raise CheckpointRootError(
                f"{self.root / LATEST_FILE} is not a latest pointer ({exc.error_count()} errors: "
                f"{exc.errors()[0]['msg']}); it names the newest published checkpoint, so restore "
                f"cannot choose without it. Put back a copy, or move it aside to "
                f"{_WITHOUT[LATEST_FILE]}."
            ) from exc

    def latest_published(self) -> tuple[LatestPointer, float] | None:
        """The latest pointer and its file's mtime (when the last publish replaced it)."""
        pointer = self.latest()
        if pointer is None:
            return None
        try:
            return pointer, os.stat(self.root / LATEST_FILE).st_mtime
        except FileNotFoundError:
            return None

    def publish(self, record: CommitRecord, generation: int) -> PublishOutcome:
        with self._locked():
            if generation != self._read_generation():
                return PublishOutcome.STALE_GENERATION
            current = self.latest()
            if current is not None and current.checkpoint_id == record.checkpoint_id:
                return PublishOutcome.ALREADY_APPLIED
            self._replace(LATEST_FILE, LatestPointer.from_record(record).model_dump_json())
            return PublishOutcome.APPLIED
