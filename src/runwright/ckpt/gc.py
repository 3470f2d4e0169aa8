"""Garbage collection of staging residue: bounded, idempotent, confined to one run's folder.

Residue is anything a crash or a refused publish leaves behind: `staging/<id>/` folders,
`<step>-<id>/` folders without a valid commit record or with a REJECTED marker, committed folders
of a fenced generation newer than the latest pointer (killed between commit record and publish),
and `*.tmp-*` files. An entry is collected when its generation (encoded in the checkpoint id) is
older than the current one (its writer is fenced and can never commit) or when nothing in it
changed for
`min_age_seconds` (its writer is gone). Entries a live writer in this process is filling are
never touched. At most `max_entries` entries are removed per call, so one call has bounded cost;
running it again continues where it stopped.
"""

import os

from pydantic import BaseModel, ConfigDict, Field

from runwright.ckpt.catalog import read_committed
from runwright.ckpt.manifest import generation_of
from runwright.ckpt.storage import STAGING, CheckpointStorage, parse_folder


class GcReport(BaseModel):
    """What one GC pass removed and what it left."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    removed: dict[str, str] = Field(default_factory=dict)
    """Path relative to the checkpoint root -> why it was residue."""
    bytes_freed: int = 0
    """Bytes deleted."""
    kept: dict[str, str] = Field(default_factory=dict)
    """Residue left in place -> why (too young, in flight, over the per-call bound)."""


def collect_residue(
    storage: CheckpointStorage,
    *,
    current_generation: int,
    min_age_seconds: float,
    in_flight: frozenset[str] = frozenset(),
    max_entries: int = 64,
    latest_step: int | None = None,
) -> GcReport:
    """One bounded pass. `latest_step` (the fence's pointer) also marks committed folders of an
    older generation beyond it as residue: their publish never happened and never can."""
    candidates: list[tuple[str, str, str | None]] = []
    for name in storage.list_names(storage.path(STAGING)):
        candidates.append((f"{STAGING}/{name}", "staging folder", name))
    for name in storage.list_names(storage.root):
        if ".tmp-" in name:
            candidates.append((name, "temporary file", None))
            continue
        parsed = parse_folder(name)
        if parsed is None:
            continue
        found = read_committed(storage, name)
        if isinstance(found, str):
            candidates.append((name, found, parsed[1]))
        elif (
            latest_step is not None
            and found.record.step > latest_step
            and found.record.generation < current_generation
        ):
            candidates.append((name, "committed but never published (writer fenced)", parsed[1]))
    removed: dict[str, str] = {}
    kept: dict[str, str] = {}
    freed = 0
    for relative, reason, checkpoint_id in candidates:
        path = storage.path(relative)
        if checkpoint_id in in_flight:
            kept[relative] = "being written by this process"
            continue
        generation = generation_of(checkpoint_id) if checkpoint_id else None
        fenced = generation is not None and generation < current_generation
        if not fenced and storage.age_seconds(path) < min_age_seconds:
            kept[relative] = f"younger than {min_age_seconds:g} s; its writer may be alive"
            continue
        if len(removed) >= max_entries:
            kept[relative] = f"over the per-call bound of {max_entries}; run gc again"
            continue
        if relative.startswith(f"{STAGING}/") or ".tmp-" in relative:
            freed += _remove(storage, path)
        else:
            freed += storage.remove_tree(path)
        removed[relative] = reason + (" (older generation)" if fenced else "")
    return GcReport(removed=removed, bytes_freed=freed, kept=kept)


def _remove(storage: CheckpointStorage, path: str) -> int:
    if storage.is_local and os.path.isfile(path):
        size = os.path.getsize(path)
        storage.remove_file(path)
        return size
    return storage.remove_tree(path)
