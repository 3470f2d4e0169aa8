"""A retention hold: committed checkpoints a person must see before anything deletes them.

When recovery hands a run to a person (control/escalation.py), the healthy checkpoints it had are
the scene: a resumed run's retention would otherwise rotate them out a few saves later, and a
stray writer's retention at once. The hold is one small JSON file beside the fence's files
(`HOLD.json` in the checkpoint root, written durably) that names them; retention keeps every
checkpoint it names, whatever its other rules say, and GC treats the file as the fence's own.
`runwright resume` releases it: resuming is the person's judgement that the scene was seen.
"""

import json

from pydantic import Field

from runwright.ckpt.storage import CheckpointStorage
from runwright.records import Record

HOLD_FILE = "HOLD.json"
HOLD_MAX_BYTES = 1 << 20
"""A hold names a few checkpoint ids; a bigger file is damage and is not read."""


class RetentionHold(Record):
    """Checkpoints retention must keep, and why."""

    checkpoint_ids: list[str] = Field(default_factory=list)
    """The held checkpoints."""
    reason: str
    """Why they are held (the escalation, in words)."""
    generation: int
    """The generation whose failure was escalated."""


def write_hold(storage: CheckpointStorage, hold: RetentionHold) -> str:
    """Write (or replace) the hold; returns its path."""
    path = storage.path(HOLD_FILE)
    storage.write_durable(path, hold.model_dump_json(indent=1).encode())
    return path


def read_hold(storage: CheckpointStorage) -> RetentionHold | None:
    """The hold in force, or None. Raises ValueError when the file is there but does not parse:
    the caller then deletes nothing (a hold it cannot read might name any checkpoint)."""
    path = storage.path(HOLD_FILE)
    if not storage.exists(path):
        return None
    raw = storage.read_record(path, HOLD_MAX_BYTES)
    return RetentionHold.model_validate(json.loads(raw))


def release_hold(storage: CheckpointStorage) -> bool:
    """Remove the hold; False when there was none."""
    path = storage.path(HOLD_FILE)
    if not storage.exists(path):
        return False
    storage.remove_file(path)
    return True
