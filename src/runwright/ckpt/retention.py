"""Which committed checkpoints to keep: pure planning, then a crash-safe delete.

Rules: keep the newest `keep_last`; keep every checkpoint whose step is a multiple of
`keep_every_steps`; always keep the newest checkpoint whose health verdict is not UNHEALTHY and
that is not suspect (the newest that passed validation), the newest one at or before the last
passing silent-data-corruption check (`known_good_step`: the rollback target should a later check
fail, ckpt/suspect.py), the one the fence's latest pointer names, and every one a retention hold
names (hold.py: an escalated run's scene), whatever the other rules say. A checkpoint an
operator's rollback abandoned (ckpt/abandon.py) is outside retention: neither counted nor deleted
(it is the evidence of what the rollback undid; a person deletes it). Deleting removes the
commit record first (fsynced), so a crash mid-delete leaves residue that restore ignores, never a
committed checkpoint with missing shards. A delete storage refuses (a volume turned read-only) is
reported and skipped: the commit that triggered retention stands, and the next commit's retention
plans again.
"""

import time

from pydantic import Field

from runwright.ckpt.catalog import scan
from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.failures import describe
from runwright.ckpt.fence import Fence
from runwright.ckpt.hold import HOLD_FILE, read_hold
from runwright.ckpt.manifest import COMMIT_FILE, HealthVerdict
from runwright.ckpt.storage import CheckpointStorage
from runwright.records import Record


class RetentionEntry(Record):
    """What retention needs to know about one committed checkpoint."""

    checkpoint_id: str
    """The checkpoint."""
    folder: str
    """Its folder under the checkpoint root."""
    step: int
    """Its step."""
    health: HealthVerdict = HealthVerdict.UNKNOWN
    """Health verdict from its manifest."""
    suspect: bool = False
    """A failed corruption check marked it suspect (ckpt/suspect.py)."""


class RetentionPlan(Record):
    """Folders to keep (with the first reason) and folders to delete."""

    keep: dict[str, str] = Field(default_factory=dict)
    """Folder -> why it is kept."""
    delete: list[str] = Field(default_factory=list)
    """Folders to delete, oldest first."""


def plan_retention(
    entries: list[RetentionEntry],
    *,
    keep_last: int,
    keep_every_steps: int | None = None,
    latest_checkpoint_id: str | None = None,
    known_good_step: int | None = None,
    held: frozenset[str] = frozenset(),
) -> RetentionPlan:
    ordered = sorted(entries, key=lambda e: e.step, reverse=True)
    keep: dict[str, str] = {}
    for entry in ordered[:keep_last]:
        keep.setdefault(entry.folder, f"among the newest {keep_last}")
    if keep_every_steps:
        for entry in ordered:
            if entry.step % keep_every_steps == 0:
                keep.setdefault(entry.folder, f"step is a multiple of {keep_every_steps}")
    good = [e for e in ordered if e.health != HealthVerdict.UNHEALTHY and not e.suspect]
    if good:
        keep.setdefault(good[0].folder, "newest checkpoint that passed validation")
    if known_good_step is not None:
        checked = next((e for e in good if e.step <= known_good_step), None)
        if checked is not None:
            keep.setdefault(
                checked.folder, f"known-good: the corruption check passed at step {known_good_step}"
            )
    for entry in ordered:
        if entry.checkpoint_id == latest_checkpoint_id:
            keep.setdefault(entry.folder, "named by the latest pointer")
        if entry.checkpoint_id in held:
            keep.setdefault(entry.folder, "held for a person (retention hold)")
    delete = [e.folder for e in reversed(ordered) if e.folder not in keep]
    return RetentionPlan(keep=keep, delete=delete)


def delete_checkpoint(storage: CheckpointStorage, folder: str) -> int:
    """Uncommit (remove COMMITTED, fsynced) then delete the folder; returns bytes freed."""
    path = storage.path(folder)
    storage.remove_file(f"{path}/{COMMIT_FILE}")
    return storage.remove_tree(path)


class Deleted(Record):
    """One checkpoint retention deleted."""

    folder: str
    """Its folder under the checkpoint root."""
    bytes: int
    """Bytes freed."""
    seconds: float
    """Time the delete took (it is not part of the save that triggered it)."""


class NotDeleted(Record):
    """One checkpoint retention dropped but storage would not let it delete."""

    folder: str
    """Its folder under the checkpoint root."""
    error: str
    """What storage said."""
    committed: bool
    """Whether it is still a checkpoint (its commit record stayed) or now residue for GC."""


def apply_retention(
    storage: CheckpointStorage,
    fence: Fence,
    *,
    keep_last: int,
    keep_every_steps: int | None = None,
    known_good_step: int | None = None,
) -> list[Deleted | NotDeleted]:
    """Plan retention over the committed checkpoints on storage and delete what it drops."""
    try:
        hold = read_hold(storage)
    except (ValueError, OSError, CheckpointError) as exc:
        # A hold that cannot be read might name any checkpoint: delete nothing until it can.
        return [NotDeleted(folder=HOLD_FILE, error=f"retention hold unreadable: {exc}",
                           committed=False)]  # fmt: skip
    committed, _ = scan(storage)
    latest = fence.latest()
    plan = plan_retention(
        [
            RetentionEntry(
                checkpoint_id=c.record.checkpoint_id,
                folder=c.folder,
                step=c.record.step,
                health=c.manifest.health,
                suspect=c.suspect is not None,
            )
            for c in committed
            if c.abandoned is None
        ],
        keep_last=keep_last,
        keep_every_steps=keep_every_steps,
        latest_checkpoint_id=latest.checkpoint_id if latest is not None else None,
        known_good_step=known_good_step,
        held=frozenset(hold.checkpoint_ids) if hold is not None else frozenset(),
    )
    done: list[Deleted | NotDeleted] = []
    for folder in plan.delete:
        started = time.perf_counter()
        try:
            freed = delete_checkpoint(storage, folder)
        except (OSError, CheckpointError) as exc:
            committed = storage.exists(storage.path(folder, COMMIT_FILE))
            done.append(NotDeleted(folder=folder, error=describe(exc), committed=committed))
            continue
        done.append(Deleted(folder=folder, bytes=freed, seconds=time.perf_counter() - started))
    return done
