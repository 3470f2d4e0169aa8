"""The fence on an object store: one object, changed only by compare-and-swap.

An object store has no lock and no rename, but S3 (and S3-compatible servers) make a PUT
conditional: `IfNoneMatch="*"` creates an object only if none exists, `IfMatch=<ETag>` replaces it
only if it is still the version that was read; otherwise the store answers 412 Precondition Failed
(409 ConditionalRequestConflict while another conditional write to the key is in flight) and
changes nothing. So the fence is one object, `<checkpoint root>/FENCE.json`, holding the generation
and the latest pointer together (`FenceState`), and every change is read -> decide -> conditional
PUT of the whole state, retried from the read when the condition fails:

- `publish(record, g)` writes the new pointer only if the state it read has generation g, and its
  PUT succeeds only if nothing changed since that read. A controller that raised the generation in
  between changed the object (new ETag), so the stale writer's PUT fails, its re-read sees the
  higher generation, and the publish returns STALE_GENERATION.
- `raise_to` and `advance_generation` write a higher generation the same way.

Each change is atomic at its PUT (a PUT replaces an object whole), so publishes and generation
bumps are linearizable in the order of their successful PUTs, with no lock: this is the
`LocalFence` contract (flock + atomically replaced files) on a store without either. Every state
written carries `version` (one more than the state it replaced), so no two writes have the same
bytes and an ETag is never reused (no ABA). docs/ckpt.md ("Object stores") says what a store
without conditional writes would need instead.
"""

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import Field, ValidationError

from runwright.ckpt.errors import CheckpointError, CheckpointRootError, CheckpointStorageError
from runwright.ckpt.failures import storage_error
from runwright.ckpt.fence import FENCE_OBJECT, PublishOutcome
from runwright.ckpt.manifest import RECORD_MAX_BYTES, CommitRecord, LatestPointer
from runwright.ckpt.records import StorageFailure
from runwright.records import Record
from runwright.remote import endpoint_hint, open_filesystem, scheme_of, translated

CAS_DEADLINE_SECONDS = 60.0
"""How long one change may keep losing compare-and-swap races before it gives up. Each loss
means another change landed, so a loser only waits while others make progress; a minute of
nothing but losses is a store or a swarm gone wrong, reported as a storage failure."""
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_CONFLICT_STATUS = frozenset({409, 412})
_T = TypeVar("_T")


class FenceState(Record):
    """The content of `FENCE.json`: everything the fence decides on, in one object."""

    generation: int = Field(default=0, ge=0)
    """The current generation: only writers holding it may publish."""
    latest: LatestPointer | None = None
    """The newest published checkpoint."""
    published_unix_seconds: float | None = None
    """When `latest` was published."""
    version: int = Field(default=0, ge=0)
    """Writes of this object so far; makes each write's bytes (and so its ETag) unique."""


def _is_conflict(exc: BaseException) -> bool:
    """Whether a failed PUT lost a compare-and-swap (s3fs turns the store's 412/409 into an
    OSError whose cause is botocore's ClientError)."""
    for candidate in (exc, exc.__cause__, exc.__context__):
        response = getattr(candidate, "response", None)
        if not isinstance(response, dict):
            continue
        code = response.get("Error", {}).get("Code")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _CONFLICT_CODES or status in _CONFLICT_STATUS:
            return True
    return False


class ObjectFence:
    """A Fence (and generation authority) for a checkpoint root on an object store (`s3://`).

    Same contract and methods as `LocalFence`; see the module doc for how it stays atomic. A
    store call that fails after the bounded retries (`runwright.remote`) raises
    `CheckpointStorageError`; an unreadable `FENCE.json` raises `CheckpointRootError` naming it
    and the fix."""

    def __init__(
        self, checkpoint_root: str, *, cas_deadline_seconds: float = CAS_DEADLINE_SECONDS
    ) -> None:
        if scheme_of(checkpoint_root) != "s3":
            raise CheckpointError(
                f"ObjectFence needs an s3:// checkpoint root, got {checkpoint_root}; a local "
                "folder takes LocalFence (`open_fence` picks the right one)"
            )
        self.root = checkpoint_root.rstrip("/")
        self.url = f"{self.root}/{FENCE_OBJECT}"
        self.fs, path = open_filesystem(self.url)
        self.bucket, _, self.key = path.partition("/")
        self.cas_deadline_seconds = cas_deadline_seconds

    # store calls -------------------------------------------------------------------------
    def _call(self, action: str, coroutine: Callable[[], Any]) -> Any:
        """Run one s3fs coroutine on its loop; failures after the retries become storage
        errors (412/409 are left to the caller as a lost race)."""
        from fsspec.asyn import sync

        try:
            with translated(self.url):
                return sync(self.fs.loop, coroutine)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) or _is_conflict(exc):
                raise
            raise storage_error(
                action,
                self.url,
                exc,
                remedy=f"The store's endpoint: {endpoint_hint()}; retries were bounded "
                "(runwright.remote).",
            ) from exc

    def _read(self) -> tuple[FenceState, str | None]:
        """The state and its ETag; (the initial state, None) when the object does not exist."""

        async def get() -> tuple[bytes, str]:
            response = await self.fs._call_s3("get_object", Bucket=self.bucket, Key=self.key)
            async with response["Body"] as body:
                data = await body.read(RECORD_MAX_BYTES + 1)
            return data, response["ETag"]

        try:
            raw, etag = self._call(f"reading {FENCE_OBJECT}", get)
        except FileNotFoundError:
            return FenceState(), None
        if len(raw) > RECORD_MAX_BYTES:
            raise self._corrupt(f"it is more than {RECORD_MAX_BYTES} bytes")
        try:
            return FenceState.model_validate_json(raw), etag
        except ValidationError as exc:
            raise self._corrupt(
                f"{exc.error_count()} errors, first: {exc.errors()[0]['msg']}"
            ) from exc

    def _corrupt(self, why: str) -> CheckpointRootError:
        return CheckpointRootError(
            f"{self.url} is not a fence state ({why}); it holds the generation and the latest "
            f"pointer, so no start or restore can go on. Put back a copy, or delete it to start "
            f"again from generation 0 with restore taking the newest committed checkpoint (safe "
            f"only when no writer of this run is still running)."
        )

    def _put(self, state: FenceState, etag: str | None) -> bool:
        """Write `state` iff the object is still the one with `etag` (None: iff it does not
        exist); False when another change won the race."""
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        body = state.model_dump_json().encode()

        async def put() -> None:
            await self.fs._call_s3(
                "put_object", Bucket=self.bucket, Key=self.key, Body=body, **condition
            )

        try:
            self._call(f"writing {FENCE_OBJECT}", put)
        except FileExistsError:
            return False  # IfNoneMatch lost: someone created it first
        except OSError as exc:
            if _is_conflict(exc):
                return False
            raise
        return True

    def _change(self, decide: Callable[[FenceState], tuple[FenceState | None, _T]]) -> _T:
        """Read, decide, conditionally write; from the read again when another change won.
        `decide(state)` returns (the new state or None to write nothing, the result)."""
        deadline = time.monotonic() + self.cas_deadline_seconds
        losses = 0
        while True:
            state, etag = self._read()
            new, result = decide(state)
            if new is None:
                return result
            if self._put(new.model_copy(update={"version": state.version + 1}), etag):
                return result
            losses += 1
            if time.monotonic() > deadline:
                raise CheckpointStorageError(
                    StorageFailure(
                        action=f"changing {FENCE_OBJECT}",
                        path=self.url,
                        cause=f"lost {losses} compare-and-swap races in "
                        f"{self.cas_deadline_seconds:g} s",
                        remedy="Another process keeps changing the fence: check that only one "
                        "controller and one worker group use this checkpoint root.",
                    )
                )
            # Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015):
            # up to 10 ms x 2^losses, capped at 1 s, so racing writers spread out.
            time.sleep(random.uniform(0, min(1.0, 0.01 * 2**losses)))

    # the Fence protocol ------------------------------------------------------------------
    def current_generation(self) -> int:
        return self._read()[0].generation

    def peek_generation(self) -> int:
        """The current generation; a plain read, as `current_generation` (no lock to avoid)."""
        return self.current_generation()

    def latest(self) -> LatestPointer | None:
        return self._read()[0].latest

    def latest_published(self) -> tuple[LatestPointer, float] | None:
        """The latest pointer with the time it was published (unix seconds)."""
        state = self._read()[0]
        if state.latest is None:
            return None
        return state.latest, state.published_unix_seconds or 0.0

    def publish(self, record: CommitRecord, generation: int) -> PublishOutcome:
        pointer = LatestPointer.from_record(record)

        def decide(state: FenceState) -> tuple[FenceState | None, PublishOutcome]:
            if state.generation != generation:
                return None, PublishOutcome.STALE_GENERATION
            if state.latest is not None and state.latest.checkpoint_id == record.checkpoint_id:
                return None, PublishOutcome.ALREADY_APPLIED
            changed = state.model_copy(
                update={"latest": pointer, "published_unix_seconds": time.time()}
            )
            return changed, PublishOutcome.APPLIED

        return self._change(decide)

    def raise_to(self, generation: int) -> int:
        """Make `generation` current unless the fence is already past it; returns the fence's
        generation. Never lowers it (see `LocalFence.raise_to`)."""

        def decide(state: FenceState) -> tuple[FenceState | None, int]:
            if state.generation < generation:
                return state.model_copy(update={"generation": generation}), generation
            return None, state.generation

        return self._change(decide)

    def advance_generation(self, make_room: Callable[[int], object] | None = None) -> int:
        """Bump and return the generation. `make_room(new_generation)` runs after the bump, not
        before it as on a local disk: with no lock to hold, collecting first could delete the
        folder of a writer that still publishes before the bump lands; after it, every writer
        of an older generation is already fenced (and an object store has no full volume to
        make room on)."""

        def decide(state: FenceState) -> tuple[FenceState | None, int]:
            return state.model_copy(update={"generation": state.generation + 1}), (
                state.generation + 1
            )

        generation = self._change(decide)
        if make_room is not None:
            make_room(generation)
        return generation
