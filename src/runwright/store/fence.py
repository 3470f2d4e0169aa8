"""The store's view of a run's checkpoint fence: the authority it projects, never a copy.

Which generation may write and which checkpoint is latest are decided by one thing, the run's
`LocalFence` files in its checkpoint root (`layout.run_paths(root, run).checkpoints`): workers hold
no database connection, and a stale writer must be rejected even while no controller runs, so
the authority has to live where the workers publish. The store's `runs.generation` and its latest
checkpoint are projections of it, kept in step here and only here:

- `raise_fence` is called by `Store.transition` inside the transaction that bumps (or revokes) the
  generation, before the commit. A crash between the two leaves the fence one ahead of the
  database: safe (the old writers are already fenced) and repaired by the next bump, since the
  fence never goes down.
- `published_latest` is what `CheckpointCatalog.latest` answers "which checkpoint is latest" from.
"""

import os
from pathlib import Path
from typing import TYPE_CHECKING

from runwright.layout import run_paths

if TYPE_CHECKING:
    from runwright.ckpt.fence import LocalFence
    from runwright.ckpt.manifest import LatestPointer


def _fence(root: str, run_id: str) -> "LocalFence":
    # Imported here rather than at the top: `runwright.ckpt` pulls in torch, and a store opened
    # only to read (status, list, the API) should not pay for it.
    from runwright.ckpt.fence import LocalFence

    return LocalFence(run_paths(Path(root), run_id).checkpoints)


def raise_fence(root: str, run_id: str, generation: int) -> int:
    """Raise the run's checkpoint fence to `generation` (never lowers it); returns its value."""
    return _fence(root, run_id).raise_to(generation)


def fence_generation(root: str, run_id: str) -> int:
    """The generation the run's checkpoint fence accepts publishes from."""
    return _fence(root, run_id).current_generation()


def published_latest(root: str, run_id: str) -> "tuple[LatestPointer, float] | None":
    """The checkpoint the run's fence names as latest, with the time it was published (the
    pointer file's mtime, unix seconds); None before the first publish or for a run whose
    checkpoint root does not exist."""
    checkpoints = run_paths(Path(root), run_id).checkpoints
    if not checkpoints.is_dir():  # a run that never started: do not create its folders
        return None
    from runwright.ckpt.fence import LATEST_FILE

    pointer = _fence(root, run_id).latest()
    if pointer is None:
        return None
    return pointer, os.stat(checkpoints / LATEST_FILE).st_mtime
