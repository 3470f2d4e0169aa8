"""Restore: choose the newest committed checkpoint that verifies, check it fits, load it.

Only committed checkpoints count (catalog.py). Candidates are tried newest first; one that fails
verification (or the optional smoke check) is skipped with a recorded reason and the next older
one is tried. The compatibility check (compat.py) decides exact load, DCP resharding, or refusal.
Loading is `torch.distributed.checkpoint.load` into a state dict shaped like the live one, with
nothing unpickled freely: DCP's `.metadata` is read with metadata.py's allow-list, object entries
with torch's weights-only unpickler, and runwright's own values with values.py's allow-list. A
checkpoint refused on load (it holds code, or a value does not decode) is skipped like one that
fails verification, and the next older one is tried.

Verification is split around the load (verify.py, `ChecksumPass`): what reads no shard bytes
(sizes, the folder's listing, DCP's metadata) is checked before loading; the checksums are
computed by rank 0 on a thread while DCP reads the same files. Rank 0 applies nothing but tensor
bytes (no RNG stream, counter, scheduler or data cursor) until every checksum matched; the other
ranks apply as they load, and every rank returns only once all agreed (`Ranks.any`). A mismatch
skips the checkpoint on every rank as a failed verification did before the load: the next older
one's load overwrites everything applied (restore is strict), and when none is left restore
raises, so a run never continues from the skipped bytes. Overlapping saves a second pass over the
state in series: a full verification was 1.19x a plain `dcp.load` of 537 MB (docs/ckpt.md,
"Cost").
"""

import math
import time
import warnings
from collections.abc import Callable

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from pydantic import Field
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from runwright.ckpt.catalog import CommittedCheckpoint, restore_candidates
from runwright.ckpt.compat import CurrentRun, RestoreMode, decide
from runwright.ckpt.errors import (
    CheckpointCorruptError,
    IncompatibleCheckpointError,
    NoUsableCheckpointError,
)
from runwright.ckpt.failures import root_cause, storage_error
from runwright.ckpt.fence import Fence
from runwright.ckpt.manifest import CheckpointManifest
from runwright.ckpt.metadata import SafeFileSystemReader, SafeFsspecReader
from runwright.ckpt.probe import DEFAULT_TOLERANCE, ProbeVerdict, RestoreProbe, judge
from runwright.ckpt.ranks import Ranks
from runwright.ckpt.state import TrainState, apply, apply_rng, capture_rng, skeleton
from runwright.ckpt.storage import CheckpointStorage
from runwright.ckpt.values import SafeLoadPlanner
from runwright.ckpt.verify import ChecksumPass, VerifyMode, VerifyReport, verify_checkpoint
from runwright.records import Record
from runwright.remote import remote_errors


class Fallback(Record):
    """A committed checkpoint restore skipped, and why."""

    checkpoint_id: str
    """The skipped checkpoint."""
    step: int
    """Its step."""
    reason: str
    """Why it was skipped (names the failing file or the smoke-check figures)."""


class SmokeCheck(Record):
    """One forward step after loading, compared with the loss recorded at save time."""

    expected_loss: float
    """Loss recorded in the manifest."""
    observed_loss: float
    """Loss the smoke check computed after loading."""
    relative_tolerance: float
    """Allowed |observed - expected| / max(1, |expected|)."""
    passed: bool
    """Whether the difference is within tolerance."""


class RestoreResult(Record):
    """What restore loaded; identical on every rank except `rng_restored`."""

    checkpoint_id: str
    """The checkpoint loaded."""
    step: int
    """Its step: training continues at step + 1."""
    folder: str
    """Its folder under the checkpoint root."""
    mode: RestoreMode
    """exact, or reshard (world size or layout changed)."""
    counters: dict[str, int]
    """Progress counters restored into TrainState.counters."""
    data_cursor: dict[str, object] | None
    """The data cursor recorded in the manifest (rank 0's loader state)."""
    rng_restored: bool
    """True if this rank got back its own RNG streams (exact mode); after resharding the
    trainer reseeds, since rank k of the new layout has no stream of its own."""
    fallbacks: list[Fallback] = Field(default_factory=list)
    """Newer committed checkpoints skipped, newest first."""
    verify_mode: VerifyMode
    """How checksums were checked."""
    smoke: SmokeCheck | None = None
    """Smoke check result, if one ran."""
    probe: ProbeVerdict | None = None
    """The probe check that passed (probe.py), if the checkpoint recorded a reading and the
    caller gave a probe."""
    seconds: float
    """Wall time of the restore."""


def current_run(
    state: TrainState,
    world_size: int,
    layout: dict[str, int],
    tokenizer_hash: str | None,
    data_manifest_id: str | None,
) -> CurrentRun:
    schema = {
        name: (list(value.shape), str(value.dtype))
        for name, value in get_model_state_dict(state.model).items()
    }
    return CurrentRun(
        world_size=world_size,
        parallel_layout=layout,
        tokenizer_hash=tokenizer_hash,
        data_manifest_id=data_manifest_id,
        model_schema=schema,
    )


def choose(
    storage: CheckpointStorage,
    fence: Fence | None,
    current: CurrentRun,
    verify_mode: VerifyMode,
    excluded: dict[str, Fallback],
    at_most_step: int | None = None,
) -> tuple[CommittedCheckpoint, RestoreMode] | list[Fallback] | None:
    """The newest candidate that fits and passes every check that reads no shard bytes (sizes,
    listing, DCP metadata), or every fallback if none did, or None when the run has no committed
    checkpoint. Refusal (incompatible) raises. The checksums of `verify_mode` are checked by
    `load_verified`, overlapped with the load. `at_most_step` leaves newer checkpoints out (a
    rollback to before a bad step)."""
    candidates = restore_candidates(storage, fence)
    if at_most_step is not None:
        candidates = [c for c in candidates if c.record.step <= at_most_step]
    if not candidates:
        return None
    fallbacks = [
        excluded[c.record.checkpoint_id] for c in candidates if c.record.checkpoint_id in excluded
    ]
    for candidate in candidates:
        if candidate.record.checkpoint_id in excluded:
            continue
        mode = decide(candidate.manifest, current)
        report = verify_checkpoint(storage, candidate.path, candidate.manifest, "none")
        if report.ok:
            return candidate, mode
        fallback = Fallback(
            checkpoint_id=candidate.record.checkpoint_id,
            step=candidate.record.step,
            reason=verification_failed(report),
        )
        excluded[candidate.record.checkpoint_id] = fallback
        fallbacks.append(fallback)
    return fallbacks


def verification_failed(report: VerifyReport) -> str:
    return "verification failed: " + report.summary()


def no_usable(fallbacks: list[Fallback]) -> NoUsableCheckpointError:
    lines = "; ".join(f"{f.checkpoint_id} (step {f.step}): {f.reason}" for f in fallbacks)
    return NoUsableCheckpointError(
        f"no committed checkpoint verified: {lines}. Inspect them with `runwright ckpt verify`; "
        "to start over, move the checkpoint folder aside."
    )


def load_into(
    state: TrainState,
    storage: CheckpointStorage,
    path: str,
    manifest: CheckpointManifest,
    mode: RestoreMode,
    rank: int,
    process_group: dist.ProcessGroup | None,
    before_apply: Callable[[], None] | None = None,
) -> tuple[dict[str, object], bool]:
    """DCP-load `path` into the live state; returns (progress record, rng_restored). Raises
    CheckpointCorruptError when a value holds code or does not load (nothing of it is run).
    `before_apply()` runs once DCP has read every tensor, before anything else is applied
    (`load_verified` waits there for the checksums); what it raises propagates."""
    source_rank = rank if mode == RestoreMode.EXACT else None
    sd = skeleton(state, rank, source_rank)
    reader = (
        SafeFileSystemReader(path)
        if storage.is_local
        else SafeFsspecReader(path, **storage.options)
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        try:
            dcp.load(
                sd,
                storage_reader=reader,
                planner=SafeLoadPlanner(),
                process_group=process_group,
                no_dist=process_group is None,
            )
        except CheckpointException as exc:
            # DCP collects each rank's failure; a refusal on any rank refuses the checkpoint.
            for failure, _ in exc.failures.values():
                if isinstance(failure, CheckpointCorruptError):
                    raise failure from None
            # A read storage refused (an object store still unreachable after its retries, an
            # I/O error): a storage failure with its cause, not DCP's multi-rank dump.
            if isinstance(root_cause(exc), (OSError, *remote_errors())):
                raise storage_error(
                    f"restore of {manifest.checkpoint_id} (step {manifest.step})", path, exc
                ) from exc
            raise
    if before_apply is not None:
        before_apply()
    progress = apply(state, sd, source_rank)
    if source_rank is None and state.data_loader is not None and manifest.data_cursor is not None:
        state.data_loader.load_state_dict(manifest.data_cursor)
    return progress, source_rank is not None


class _ChecksumsDiffer(Exception):
    """The overlapped checksum pass found a file that differs from its manifest entry."""

    def __init__(self, report: VerifyReport) -> None:
        super().__init__(report.summary())
        self.report = report


def load_verified(
    state: TrainState,
    storage: CheckpointStorage,
    candidate: CommittedCheckpoint,
    mode: RestoreMode,
    ranks: Ranks,
    verify: VerifyMode,
) -> tuple[tuple[dict[str, object], bool] | None, str | None]:
    """`load_into`, with rank 0 hashing the checkpoint's files (`verify`) on a thread meanwhile:
    ((progress, rng_restored), None) once loaded and every checksum matched, or (None, why) when
    this rank refuses the checkpoint (a checksum differs, or a value is refused on load)."""
    checksums = (
        ChecksumPass(storage, candidate.path, candidate.manifest, verify)
        if ranks.rank == 0 and verify != "none"
        else None
    )

    def verified() -> None:
        if checksums is not None and not (report := checksums.result()).ok:
            raise _ChecksumsDiffer(report)

    try:
        loaded = load_into(
            state,
            storage,
            candidate.path,
            candidate.manifest,
            mode,
            ranks.rank,
            ranks.persist_group,
            before_apply=verified,
        )
    except _ChecksumsDiffer as exc:
        return None, verification_failed(exc.report)
    except CheckpointCorruptError as exc:
        # damaged bytes can make DCP's read refuse a value before the checksums are in (a
        # flipped zip header does): when they differ, that is the reason to give
        if checksums is not None and not (verdict := checksums.result()).ok:
            return None, verification_failed(verdict)
        return None, f"refused on load: {exc}"
    except CheckpointException:
        # any other failure of DCP's read reaches every rank together (DCP gathers them all):
        # rank 0's checksums decide, for every rank, whether damaged bytes explain it
        differs = None
        if checksums is not None and not (verdict := checksums.result()).ok:
            differs = verification_failed(verdict)
        differs = ranks.from_rank0(differs)
        if differs is None:
            raise
        return None, differs
    finally:
        if checksums is not None:
            checksums.join()
    return loaded, None


def smoke(
    smoke_check: Callable[[], float], expected: float, relative_tolerance: float
) -> SmokeCheck:
    """Run the user's one-step loss function without disturbing the restored RNG streams."""
    streams = capture_rng()
    observed = float(smoke_check())
    apply_rng(streams)
    passed = math.isfinite(observed) and abs(observed - expected) <= relative_tolerance * max(
        1.0, abs(expected)
    )
    return SmokeCheck(
        expected_loss=expected,
        observed_loss=observed,
        relative_tolerance=relative_tolerance,
        passed=passed,
    )


def elapsed(started: float) -> float:
    return time.perf_counter() - started


def restore_newest(
    state: TrainState,
    storage: CheckpointStorage,
    fence: Fence,
    current: CurrentRun,
    ranks: Ranks,
    *,
    verify: VerifyMode,
    smoke_check: Callable[[], float] | None,
    smoke_relative_tolerance: float,
    on_fallback: Callable[[Fallback], None],
    probe: RestoreProbe | None = None,
    probe_tolerance: float = DEFAULT_TOLERANCE,
    at_most_step: int | None = None,
) -> RestoreResult | None:
    """Load the newest committed checkpoint that verifies (and passes the smoke check) into
    `state`, on every rank. Rank 0 chooses and every rank loads its choice; a smoke check that
    fails on any rank excludes that checkpoint and the next one is tried. `on_fallback` is called
    once for each checkpoint skipped. None when the run has no checkpoint."""
    started = time.perf_counter()
    excluded: dict[str, Fallback] = {}
    reported: set[str] = set()
    while True:
        chosen = None
        if ranks.rank == 0:
            try:
                chosen = choose(storage, fence, current, verify, excluded, at_most_step)
            except Exception as exc:
                chosen = exc
        chosen = ranks.from_rank0(chosen)
        if isinstance(chosen, Exception):
            raise chosen
        if chosen is None:
            return None
        if isinstance(chosen, list):
            raise no_usable(chosen)
        candidate, mode = chosen
        for fallback in excluded.values():
            if fallback.checkpoint_id not in reported:
                reported.add(fallback.checkpoint_id)
                on_fallback(fallback)
        manifest = candidate.manifest
        loaded, refused = load_verified(state, storage, candidate, mode, ranks, verify)
        if ranks.any(refused is not None) or loaded is None:
            excluded[manifest.checkpoint_id] = Fallback(
                checkpoint_id=manifest.checkpoint_id,
                step=manifest.step,
                reason=refused or "refused on load: another rank refused the checkpoint",
            )
            continue
        progress, rng_restored = loaded
        checked = None
        if smoke_check is not None and manifest.loss_at_save is not None:
            checked = smoke(smoke_check, manifest.loss_at_save, smoke_relative_tolerance)
            if ranks.any(not checked.passed):
                excluded[manifest.checkpoint_id] = Fallback(
                    checkpoint_id=manifest.checkpoint_id,
                    step=manifest.step,
                    reason=f"smoke check: loss {checked.observed_loss:.6g} after loading, "
                    f"{checked.expected_loss:.6g} at save",
                )
                continue
        verdict = None
        if probe is not None and manifest.probe is not None:
            # Before the first step: the loaded state must behave as the saved one did.
            verdict = judge(manifest.probe, probe.measure(), probe_tolerance)
            if ranks.any(not verdict.passed):
                excluded[manifest.checkpoint_id] = Fallback(
                    checkpoint_id=manifest.checkpoint_id,
                    step=manifest.step,
                    reason=f"probe check: {verdict.failure or 'failed on another rank'}",
                )
                continue
        return RestoreResult(
            checkpoint_id=manifest.checkpoint_id,
            step=int(progress["step"]),
            folder=candidate.folder,
            mode=mode,
            counters=dict(progress["counters"]),
            data_cursor=manifest.data_cursor,
            rng_restored=rng_restored,
            fallbacks=list(excluded.values()),
            verify_mode=verify,
            smoke=checked,
            probe=verdict,
            seconds=elapsed(started),
        )


__all__ = [
    "Fallback",
    "IncompatibleCheckpointError",
    "RestoreResult",
    "SmokeCheck",
    "choose",
    "current_run",
    "load_into",
    "load_verified",
    "no_usable",
    "restore_newest",
    "smoke",
]
