"""The fence: the one place that decides whether a checkpoint becomes the run's latest.

ARCHITECTURE.md ("Fencing"): every write that changes shared state carries the writer's
generation and is applied only if it equals the run's current generation, checked atomically.
`ckpt/` never imports the store; it publishes through this Protocol. Under the control plane the
runtime's client implements it with the store's compare-and-set; `LocalFence` implements it for
standalone scripts with a lock file and an atomically replaced pointer file.

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
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.manifest import CommitRecord, LatestPointer
from runwright.ckpt.storage import fsync_dir

LOCK_FILE = "FENCE.lock"
GENERATION_FILE = "GENERATION"
LATEST_FILE = "LATEST.json"


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


class LocalFence:
    """A Fence for standalone scripts on a local or shared POSIX file system.

    Files under the run's checkpoint folder: `FENCE.lock` (flock taken around every read-modify-
    write), `GENERATION` (the current generation as text) and `LATEST.json` (the pointer). Both
    data files are replaced atomically (tmp, fsync, os.replace, fsync folder). A script calls
    `advance_generation()` once at start-up, which fences off any writer still running from an
    earlier start.
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
        with open(self.root / LOCK_FILE, "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _replace(self, name: str, text: str) -> None:
        tmp = self.root / f"{name}.tmp-{os.getpid()}"
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.root / name)
        fsync_dir(self.root)

    def _read_generation(self) -> int:
        path = self.root / GENERATION_FILE
        return int(path.read_text().strip()) if path.exists() else 0

    def current_generation(self) -> int:
        with self._locked():
            return self._read_generation()

    def advance_generation(self) -> int:
        """Bump and return the generation: every writer holding an older one is now stale."""
        with self._locked():
            generation = self._read_generation() + 1
            self._replace(GENERATION_FILE, f"{generation}\n")
            return generation

    def latest(self) -> LatestPointer | None:
        path = self.root / LATEST_FILE
        if not path.exists():
            return None
        return LatestPointer.model_validate_json(path.read_text())

    def publish(self, record: CommitRecord, generation: int) -> PublishOutcome:
        with self._locked():
            if generation != self._read_generation():
                return PublishOutcome.STALE_GENERATION
            current = self.latest()
            if current is not None and current.checkpoint_id == record.checkpoint_id:
                return PublishOutcome.ALREADY_APPLIED
            self._replace(LATEST_FILE, LatestPointer.from_record(record).model_dump_json())
            return PublishOutcome.APPLIED
