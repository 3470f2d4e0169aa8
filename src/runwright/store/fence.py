"""The store's view of a run's checkpoint fence: the authority it projects, never a copy.

Which generation may write and which checkpoint is latest are decided by one thing, the fence of
the run's checkpoint root (`layout.checkpoint_root`: `<checkpoint.location>/<run id>` when the
spec sets one, else `<root>/runs/<run id>/checkpoints`): a `LocalFence` in a folder, an
`ObjectFence` on `s3://` (`ckpt.fence.open_fence`). Workers hold no database connection, and a
stale writer must be rejected even while no controller runs, so the authority has to live where
the workers publish. The store's `runs.generation` and its latest checkpoint are projections of
it, kept in step here and only here:

- `raise_fence` is called by `Store.transition` inside the transaction that bumps (or revokes) the
  generation, before the commit. A crash between the two leaves the fence one ahead of the
  database: safe (the old writers are already fenced) and repaired by the next bump, since the
  fence never goes down.
- `published_latest` is what `CheckpointCatalog.latest` answers "which checkpoint is latest" from.

A fence on an object store that cannot be reached (after runwright.remote's bounded retries) is
part of the store being unavailable: `raise_fence` and `fence_generation` raise
`StoreUnavailableError` for it, so the transaction rolls back and the controller rides the outage
out and retries, as it does for a database that is down, instead of stopping mid-transition.
"""

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from runwright.errors import StoreUnavailableError
from runwright.layout import checkpoint_location, checkpoint_root, run_paths

if TYPE_CHECKING:
    from runwright.ckpt.fence import GenerationFence
    from runwright.ckpt.manifest import LatestPointer
    from runwright.store.records import RunRecord


def run_checkpoint_root(run: "RunRecord") -> str:
    """The run's checkpoint root, folder or URL, as its workers resolve it."""
    return checkpoint_root(run_paths(Path(run.root), run.run_id), checkpoint_location(run.spec))


def _fence(run: "RunRecord") -> "GenerationFence":
    # Imported here rather than at the top: `runwright.ckpt` pulls in torch, and a store opened
    # only to read (status, list, the API) should not pay for it.
    from runwright.ckpt.fence import open_fence

    return open_fence(run_checkpoint_root(run))


@contextlib.contextmanager
def _remote_outage(run: "RunRecord") -> Iterator[None]:
    """An object-store fence that cannot be reached is an outage (module doc); a local fence's
    failure (a full volume) is reported as it is."""
    from runwright.ckpt.errors import CheckpointStorageError

    root = run_checkpoint_root(run)
    try:
        yield
    except CheckpointStorageError as exc:
        if "://" not in root or root.startswith("file://"):
            raise
        raise StoreUnavailableError(
            f"the checkpoint fence of run {run.run_id} cannot be reached: {exc}"
        ) from exc


def raise_fence(run: "RunRecord", generation: int) -> int:
    """Raise the run's checkpoint fence to `generation` (never lowers it); returns its value."""
    with _remote_outage(run):
        return _fence(run).raise_to(generation)


def fence_generation(run: "RunRecord") -> int:
    """The generation the run's checkpoint fence accepts publishes from."""
    with _remote_outage(run):
        return _fence(run).current_generation()


def published_latest(run: "RunRecord") -> "tuple[LatestPointer, float] | None":
    """The checkpoint the run's fence names as latest, with the time it was published (unix
    seconds); None before the first publish or for a run whose local checkpoint root does not
    exist (a run that never started: its folders are not created by looking)."""
    root = run_checkpoint_root(run)
    if "://" not in root and not Path(root).is_dir():
        return None
    return _fence(run).latest_published()
