"""Keep the run's checkpoint fence in step with the store's generation.

The store is the source of truth for the generation; the workers' fence is a `LocalFence` file
under `<run_dir>/checkpoints/` (runtime/checkpoints.py) because a worker holds no database
connection. Whenever the controller bumps the generation in the store it raises the fence file to
the same value before anything of the new generation runs, so from that moment on a worker of
an older generation can no longer publish a checkpoint.
"""

from pathlib import Path

from runwright.ckpt import LocalFence
from runwright.control.executor import run_dir
from runwright.runtime.checkpoints import checkpoint_root


def raise_fence(root: Path, run_id: str, generation: int) -> int:
    """Advance the fence file to `generation` (never lowers it); returns the fence's value."""
    fence = LocalFence(checkpoint_root(run_dir(root, run_id)))
    current = fence.current_generation()
    while current < generation:
        current = fence.advance_generation()
    return current
