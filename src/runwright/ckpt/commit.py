"""The commit protocol for one snapshot (ARCHITECTURE.md, "Checkpoint commit"; seed 003).

    ALLOCATE        id `g<generation>-<token>` chosen under the writer's generation
    STAGE           state captured at the step boundary (copied to host for async saves)
    WRITE_SHARDS    every rank writes its DCP shards into the staging folder, hashing as it goes
    VERIFY          coordinator: every shard DCP referenced exists with its recorded size, every
                    logical key some rank asked to save is in DCP's metadata
    WRITE_MANIFEST  coordinator: manifest.json (fsynced) in the staging folder
    MOVE            local disk: one rename staging/<id> -> <step>-<id>, then fsync both parents
    WRITE_COMMIT    COMMITTED (names the manifest's sha256) written last: from here it is visible
    PUBLISH         compare-and-set of the latest pointer through the fence
    DONE

A crash before WRITE_COMMIT completes leaves residue that restore ignores and GC removes; a crash
after it leaves a complete checkpoint. A save that fails (a full volume, an I/O error, DCP's
`CheckpointException` from any rank) is cleaned up at once: the coordinator removes what it
wrote once every rank has failed or finished, and every rank raises the same
`CheckpointStorageError` (path, cause, bytes needed and free); the pointer does not move.
`CommitProbe.reached(step)` is called before each step (and `WRITE_SHARDS` before every 64 KiB
written when a probe is set): the crash-consistency tests kill the process there.
"""

import hashlib
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from runwright.ckpt.errors import CheckpointError, CheckpointStorageError
from runwright.ckpt.failures import describe, free_bytes, payload_bytes, root_cause
from runwright.ckpt.fence import Fence, PublishOutcome
from runwright.ckpt.manifest import (
    COMMIT_FILE,
    MANIFEST_FILE,
    REJECTED_FILE,
    CheckpointManifest,
    CommitRecord,
    FileEntry,
    HealthVerdict,
    ProbeRecord,
)
from runwright.ckpt.metadata import logical_keys
from runwright.ckpt.records import StorageFailure
from runwright.ckpt.storage import CheckpointStorage, folder_name
from runwright.ckpt.verify import check_staged
from runwright.ckpt.writer import DCP_METADATA, make_writer

SAVE_FAILURES: tuple[type[BaseException], ...] = (OSError, CheckpointException)
"""What a failed save raises below runwright: storage errors, and DCP's wrapper of every rank's
error (which derives from BaseException: catch it by name)."""


class CommitStep(StrEnum):
    """Steps of the commit protocol, in order."""

    ALLOCATE = "allocate"
    STAGE = "stage"
    WRITE_SHARDS = "write_shards"
    VERIFY = "verify"
    WRITE_MANIFEST = "write_manifest"
    MOVE = "move"
    WRITE_COMMIT = "write_commit"
    PUBLISH = "publish"
    DONE = "done"


class CommitProbe(Protocol):
    """Observes protocol progress (crash tests, tracing). Called on every rank."""

    def reached(self, step: CommitStep, bytes_written: int = 0) -> None:
        """Called before `step` starts; during WRITE_SHARDS with the rank's running byte count."""
        ...


@dataclass(frozen=True)
class RunFacts:
    """Facts about the run recorded in every manifest."""

    world_size: int
    rank: int
    parallel_layout: dict[str, int]
    spec_hash: str | None
    data_manifest_id: str | None
    tokenizer_hash: str | None


@dataclass
class Snapshot:
    """One staged state, ready to persist."""

    checkpoint_id: str
    step: int
    generation: int
    state_dict: dict[str, Any]
    staged_unix_seconds: float
    parent_checkpoint_id: str | None
    data_cursor: dict[str, Any] | None
    counters: dict[str, int]
    loss: float | None
    health: HealthVerdict
    probe: ProbeRecord | None = None
    timings_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PersistResult:
    """What persisting one snapshot did (identical on every rank)."""

    outcome: PublishOutcome
    folder: str
    total_bytes: int
    manifest_sha256: str
    timings_seconds: dict[str, float]


def _probe_bytes(probe: CommitProbe | None) -> Callable[[int], None] | None:
    if probe is None:
        return None
    total = [0]

    def on_bytes(count: int) -> None:
        total[0] += count
        probe.reached(CommitStep.WRITE_SHARDS, total[0])

    return on_bytes


def persist(
    snap: Snapshot,
    storage: CheckpointStorage,
    fence: Fence,
    facts: RunFacts,
    *,
    process_group: dist.ProcessGroup | None,
    probe: CommitProbe | None = None,
    thread_count: int = 1,
    on_outcome: Callable[[PersistResult], None] | None = None,
) -> PersistResult:
    """Steps WRITE_SHARDS..DONE for one snapshot. Collective when a process group is given.

    `on_outcome` is called on the coordinator (rank 0) as soon as the publish has been decided,
    before the outcome is broadcast: a rank lost after the publish makes the broadcast fail, and
    the commit, already durable and pointed to, must still be reported."""
    reach = probe.reached if probe is not None else (lambda step, n=0: None)
    timings = dict(snap.timings_seconds)
    started = time.perf_counter()
    reach(CommitStep.WRITE_SHARDS)
    path = storage.write_path(snap.step, snap.checkpoint_id)
    writer = make_writer(
        path,
        is_local=storage.is_local,
        rank=facts.rank,
        probe=_probe_bytes(probe),
        thread_count=thread_count,
        options=storage.options,
    )
    result: list[Any] = [None]
    try:
        with warnings.catch_warnings():
            # single-process saves are intended; DCP warns about them on every call
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.save(
                snap.state_dict,
                storage_writer=writer,
                process_group=process_group,
                no_dist=process_group is None,
            )
        timings["write"] = time.perf_counter() - started
        if facts.rank == 0:
            try:
                result[0] = _commit_as_coordinator(snap, storage, fence, facts, writer, path, reach)
            except Exception as exc:
                result[0] = exc
            if on_outcome is not None and not isinstance(result[0], Exception):
                on_outcome(_result(result[0], timings, started))
        if process_group is not None:
            dist.broadcast_object_list(result, src=0, group=process_group)
        if isinstance(result[0], Exception):
            raise result[0]
    except (Exception, CheckpointException) as exc:
        # Every rank is here together: DCP raises only after gathering every rank's result,
        # and a coordinator failure reaches the others through the broadcast above.
        error = _after_failure(snap, storage, fence, facts, writer, path, exc, process_group)
        if error is exc:
            raise
        raise error from exc
    finally:
        writer.shutdown()
    reach(CommitStep.DONE)
    return _result(result[0], timings, started)


def _result(coordinated: Any, timings: dict[str, float], started: float) -> PersistResult:
    """The coordinator's (outcome, folder, bytes, manifest sha256, timings) as a result, with
    the persist time up to now."""
    outcome, folder, total_bytes, manifest_sha256, coordinator_timings = coordinated
    return PersistResult(
        outcome=outcome,
        folder=folder,
        total_bytes=total_bytes,
        manifest_sha256=manifest_sha256,
        timings_seconds={
            **timings,
            **coordinator_timings,
            "persist": time.perf_counter() - started,
        },
    )


def _after_failure(
    snap: Snapshot,
    storage: CheckpointStorage,
    fence: Fence,
    facts: RunFacts,
    writer: Any,
    path: str,
    exc: BaseException,
    process_group: dist.ProcessGroup | None,
) -> BaseException:
    """On every rank after a failed save: the coordinator removes what the save wrote and, for a
    storage failure, describes it; every rank returns the same `CheckpointStorageError` (or
    `exc` itself for any other failure, which is re-raised unchanged)."""
    verdict: list[StorageFailure | None] = [None]
    if facts.rank == 0:
        try:
            verdict[0] = _describe_failure(snap, storage, fence, writer, path, exc)
        except Exception:
            verdict[0] = None
    if process_group is not None:
        dist.broadcast_object_list(verdict, src=0, group=process_group)
    return exc if verdict[0] is None else CheckpointStorageError(verdict[0])


def _describe_failure(
    snap: Snapshot,
    storage: CheckpointStorage,
    fence: Fence,
    writer: Any,
    path: str,
    exc: BaseException,
) -> StorageFailure | None:
    """Coordinator: remove the failed save's folder (staging, or the final folder unless the
    pointer already names it) and describe a storage failure; None for any other failure."""
    leftovers = [path]
    final = storage.path(folder_name(snap.step, snap.checkpoint_id))
    if final != path and storage.exists(final):
        try:
            latest = fence.latest()
        except CheckpointError:
            latest = None  # cannot tell whether it was published: keep it
        else:
            leftovers += [] if latest and latest.checkpoint_id == snap.checkpoint_id else [final]
    not_removed = []
    for leftover in leftovers:
        try:
            if storage.exists(f"{leftover}/{COMMIT_FILE}"):
                storage.remove_file(f"{leftover}/{COMMIT_FILE}")  # uncommit first
            storage.remove_tree(leftover)
        except (OSError, CheckpointError) as cleanup:
            not_removed.append(f"{leftover} ({type(cleanup).__name__}: {cleanup})")
    if isinstance(exc, CheckpointStorageError):
        inner = exc.failure
        where, cause, errno = inner.path, inner.cause, inner.errno
    else:
        cause_exc = root_cause(exc)
        if not isinstance(exc, SAVE_FAILURES) and not isinstance(cause_exc, OSError):
            return None
        errno = cause_exc.errno if isinstance(cause_exc, OSError) else None
        filename = getattr(cause_exc, "filename", None)
        where, cause = (str(filename) if filename else path), describe(exc)
    planned = getattr(writer, "planned_bytes", None)
    cleaned = (
        "The failed save's files were removed"
        if not not_removed
        else "Could not remove " + "; ".join(not_removed) + " (run `runwright ckpt gc`)"
    )
    return StorageFailure(
        action=f"checkpoint save of step {snap.step} ({snap.checkpoint_id})",
        path=where,
        cause=cause,
        errno=errno,
        bytes_needed=planned if planned is not None else payload_bytes(snap.state_dict),
        bytes_free=free_bytes(storage.root),
        remedy=f"{cleaned}; the latest checkpoint is unchanged.",
    )


def _commit_as_coordinator(
    snap: Snapshot,
    storage: CheckpointStorage,
    fence: Fence,
    facts: RunFacts,
    writer: Any,
    path: str,
    reach: Callable[..., None],
) -> tuple[PublishOutcome, str, int, str, dict[str, float]]:
    timings: dict[str, float] = {}
    started = time.perf_counter()
    reach(CommitStep.VERIFY)
    # No folder fsync here: writing the manifest below fsyncs this same folder before the move,
    # which makes the shard names durable before anything can point at them.
    entries = check_staged(storage, path, writer.metadata, facts.world_size)
    size_bytes, checksum = writer.files[DCP_METADATA]
    entries.append(FileEntry(name=DCP_METADATA, size_bytes=size_bytes, checksum=checksum))
    timings["verify"] = time.perf_counter() - started

    reach(CommitStep.WRITE_MANIFEST)
    manifest = CheckpointManifest(
        checkpoint_id=snap.checkpoint_id,
        step=snap.step,
        generation=snap.generation,
        created_unix_seconds=snap.staged_unix_seconds,
        parent_checkpoint_id=snap.parent_checkpoint_id,
        world_size=facts.world_size,
        parallel_layout=facts.parallel_layout,
        spec_hash=facts.spec_hash,
        data_manifest_id=facts.data_manifest_id,
        tokenizer_hash=facts.tokenizer_hash,
        data_cursor=snap.data_cursor,
        counters=snap.counters,
        health=snap.health,
        loss_at_save=snap.loss,
        probe=snap.probe,
        rng_ranks=list(range(facts.world_size)),
        logical_keys=logical_keys(writer.metadata),
        files=sorted(entries, key=lambda e: e.name),
        torch_version=torch.__version__,
        timings_seconds={**snap.timings_seconds, **timings},
    )
    raw = manifest.model_dump_json(indent=1).encode()
    storage.write_durable(f"{path}/{MANIFEST_FILE}", raw)
    manifest_sha256 = hashlib.sha256(raw).hexdigest()

    reach(CommitStep.MOVE)
    final = storage.move_to_final(snap.step, snap.checkpoint_id)
    folder = folder_name(snap.step, snap.checkpoint_id)

    reach(CommitStep.WRITE_COMMIT)
    record = CommitRecord(
        checkpoint_id=snap.checkpoint_id,
        step=snap.step,
        generation=snap.generation,
        folder=folder,
        manifest_sha256=manifest_sha256,
        committed_unix_seconds=time.time(),
    )
    storage.write_durable(f"{final}/{COMMIT_FILE}", record.model_dump_json().encode())

    reach(CommitStep.PUBLISH)
    outcome = fence.publish(record, snap.generation)
    if outcome == PublishOutcome.STALE_GENERATION:
        storage.write_durable(
            f"{final}/{REJECTED_FILE}",
            f"generation {snap.generation} is stale; the fence refused this publish\n".encode(),
        )
    return outcome, folder, manifest.total_bytes, manifest_sha256, timings
