"""Rolling a run's checkpoints back to a chosen committed one (issue 25, an operator's action).

Nothing is deleted and no pointer is written by hand: every committed checkpoint newer than the
chosen one gets an `ABANDONED` marker (durable, holding the reason), so restore never picks it
(catalog.restore_candidates) and retention neither counts nor deletes it (retention.py); then the
chosen checkpoint's own commit record is published again through the run's fence, under the
fence's current generation, so the latest pointer names it. A publish the fence refuses (a newer
generation took over meanwhile) is returned as the fence's outcome, never forced.

Order matters for a crash in between: the markers come first, so a pointer still naming an
abandoned checkpoint already restores the chosen one (an abandoned head is left out, and the
chosen one is older than it). Marking is idempotent and only adds markers, as ckpt/suspect.py's.
"""

from runwright.ckpt.catalog import CommittedCheckpoint, scan
from runwright.ckpt.errors import CheckpointError
from runwright.ckpt.fence import Fence, PublishOutcome
from runwright.ckpt.manifest import ABANDONED_FILE
from runwright.ckpt.storage import CheckpointStorage
from runwright.records import Record


class Rewound(Record):
    """What a rollback did to the checkpoints of a run."""

    checkpoint_id: str
    """The checkpoint the run continues from."""
    step: int
    """Its step."""
    folder: str
    """Its folder under the checkpoint root."""
    abandoned: tuple[str, ...] = ()
    """Folders marked ABANDONED now (newer than the chosen one), oldest first."""
    abandoned_ids: tuple[str, ...] = ()
    """Their checkpoint ids, in the same order."""
    publish: PublishOutcome
    """The fence's answer to publishing the chosen checkpoint again as latest."""


def find_committed(storage: CheckpointStorage, wanted: str) -> CommittedCheckpoint:
    """The committed checkpoint `wanted` names: its step (digits), its id or an id prefix of at
    least 6 characters, or its folder name. Raises CheckpointError naming what there is when it
    names none, more than one, or one that cannot be restored (suspect, abandoned)."""
    committed = scan(storage)[0]
    if wanted.isdigit():
        found = [c for c in committed if c.record.step == int(wanted) and c.abandoned is None]
    else:
        found = [
            c
            for c in committed
            if c.folder == wanted
            or (len(wanted) >= 6 and c.record.checkpoint_id.startswith(wanted))
        ]
    there = ", ".join(f"step {c.record.step} ({c.record.checkpoint_id})" for c in committed[:12])
    if not found:
        raise CheckpointError(
            f"no committed checkpoint {wanted!r} in {storage.root}; committed: "
            f"{there or 'none'}. Name one by its step or its id (`runwright ckpt list`)"
        )
    if len(found) > 1:
        raise CheckpointError(
            f"{wanted!r} names {len(found)} committed checkpoints "
            f"({', '.join(c.record.checkpoint_id for c in found)}): give the checkpoint id"
        )
    chosen = found[0]
    if chosen.suspect is not None or chosen.abandoned is not None:
        why = chosen.suspect or chosen.abandoned
        raise CheckpointError(
            f"checkpoint {chosen.record.checkpoint_id} (step {chosen.record.step}) cannot be "
            f"restored: {why}. Choose another one: {there}"
        )
    return chosen


def roll_back_to(
    storage: CheckpointStorage, fence: Fence, checkpoint_id: str, reason: str
) -> Rewound:
    """Abandon every committed checkpoint newer than `checkpoint_id` (marker `reason`) and
    publish it again as latest under the fence's current generation (module doc)."""
    chosen = find_committed(storage, checkpoint_id)
    marked, ids = [], []
    for checkpoint in reversed(scan(storage)[0]):
        if checkpoint.record.step <= chosen.record.step or checkpoint.abandoned is not None:
            continue
        storage.write_durable(f"{checkpoint.path}/{ABANDONED_FILE}", f"{reason}\n".encode())
        marked.append(checkpoint.folder)
        ids.append(checkpoint.record.checkpoint_id)
    outcome = fence.publish(chosen.record, fence.current_generation())
    return Rewound(
        checkpoint_id=chosen.record.checkpoint_id,
        step=chosen.record.step,
        folder=chosen.folder,
        abandoned=tuple(marked),
        abandoned_ids=tuple(ids),
        publish=outcome,
    )
