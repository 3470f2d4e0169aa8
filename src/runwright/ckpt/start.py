"""A standalone start: fence off every earlier writer, making room for that first.

Advancing the generation writes one small file, and on a full volume even that fails. So the
start collects residue before it writes: under the fence's lock (no publish can land in between),
GC treats every generation up to the current one as fenced, exactly as it will once the new
generation is written, and removes their staging folders, their never-published folders and dead
writers' tmp files. If the write still fails, the `CheckpointStorageError` names the bytes free
and what may be deleted, and no tmp file is left behind to trouble the next start.
"""

from runwright.ckpt.catalog import scan
from runwright.ckpt.errors import CheckpointError, CheckpointStorageError
from runwright.ckpt.fence import GenerationFence
from runwright.ckpt.gc import GcReport, collect_residue
from runwright.ckpt.storage import CheckpointStorage


def start_generation(
    fence: GenerationFence, storage: CheckpointStorage, *, gc_min_age_seconds: float = 3600.0
) -> tuple[int, GcReport]:
    """Collect what the new generation fences off, then advance the generation; returns the new
    generation and what GC did."""
    reports: list[GcReport] = []

    def make_room(new_generation: int) -> None:
        latest = fence.latest()
        reports.append(
            collect_residue(
                storage,
                current_generation=new_generation,
                min_age_seconds=gc_min_age_seconds,
                latest_step=latest.step if latest is not None else None,
            )
        )

    try:
        generation = fence.advance_generation(make_room=make_room)
    except CheckpointStorageError as exc:
        failure = exc.failure
        remedy = _what_to_delete(storage, reports[0] if reports else None)
        raise CheckpointStorageError(
            failure.model_copy(
                update={"action": "advancing the generation at start", "remedy": remedy}
            )
        ) from exc
    return generation, reports[0] if reports else GcReport()


def _what_to_delete(storage: CheckpointStorage, report: GcReport | None) -> str:
    freed = f"GC freed {report.bytes_freed / 1e6:.1f} MB first. " if report else ""
    try:
        committed, _ = scan(storage)
    except CheckpointError:
        committed = []
    # the newest committed checkpoint is what the restart restores: never suggest deleting it
    older = [f"{c.folder} ({c.manifest.total_bytes / 1e6:.1f} MB)" for c in committed[1:]]
    kept = [f"{path} ({why})" for path, why in (report.kept.items() if report else [])]
    parts = []
    if older:
        parts.append("older checkpoints you may delete: " + ", ".join(older))
    if kept:
        parts.append("residue GC left: " + ", ".join(kept))
    where = "; ".join(parts) if parts else "nothing in the checkpoint root can go"
    return (
        f"{freed}Free space on that volume ({where}; or other files on it), or move the "
        "checkpoint root to a larger volume, then start again. No tmp file was left behind."
    )
