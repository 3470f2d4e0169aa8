"""Suspect checkpoints: saved after the last passing silent-data-corruption check and before a
failed one, so they may hold the corrupted state (seed 003: an ordinary checkpoint saves a
corrupted state as faithfully as a good one).

A committed checkpoint is immutable (its manifest's sha256 is in its commit record), so the
verdict is a marker beside it: `<step>-<id>/SUSPECT`, written durably, holding the reason in
words. The catalog lists the reason (`CommittedCheckpoint.suspect`), restore never picks a suspect
checkpoint (catalog.restore_candidates), and retention does not count one as known-good
(retention.py). Marking is idempotent and only ever adds markers: a checkpoint once suspect stays
suspect, and a person who has proven it good removes the file by hand.
"""

from runwright.ckpt.catalog import scan
from runwright.ckpt.manifest import SUSPECT_FILE
from runwright.ckpt.storage import CheckpointStorage


def mark_suspect(storage: CheckpointStorage, after_step: int, reason: str) -> list[str]:
    """Mark every committed checkpoint whose step is above `after_step` (the step of the last
    passing check) suspect; returns the folders marked now, oldest first."""
    marked = []
    for checkpoint in reversed(scan(storage)[0]):
        if checkpoint.record.step <= after_step or checkpoint.suspect is not None:
            continue
        storage.write_durable(f"{checkpoint.path}/{SUSPECT_FILE}", f"{reason}\n".encode())
        marked.append(checkpoint.folder)
    return marked
