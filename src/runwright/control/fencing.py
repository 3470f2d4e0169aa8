"""Keep the run's checkpoint fence in step with the store's generation.

The store is the source of truth for the generation; the workers' fence is a `LocalFence` file
in the run's checkpoint root (`layout.RunPaths.checkpoints`) because a worker holds no database
connection. Whenever the controller bumps the generation in the store it raises the fence file to
the same value before anything of the new generation runs, so from that moment on a worker of
an older generation can no longer publish a checkpoint.
"""

from pathlib import Path

from runwright.ckpt import LocalFence
from runwright.layout import run_paths


def raise_fence(root: Path, run_id: str, generation: int) -> int:
    """Advance the fence file to `generation` (never lowers it); returns the fence's value."""
    fence = LocalFence(run_paths(root, run_id).checkpoints)
    current = fence.current_generation()
    while current < generation:
        current = fence.advance_generation()
    return current
