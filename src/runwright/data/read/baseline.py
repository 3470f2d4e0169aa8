"""The build as the drift baseline (issue 26): what each source is of the dataset's train split,
from the manifest's statistics, in the mixture's unit.

A drift window (drift.py) reports its shares against the recipe's weights (`targets`, which the
`mixture_drift` alert reads) and against this baseline (`baseline`, `baseline_deviation`): a
recipe without weights draws every source in proportion to its size, so the build's shares are
what its windows should show; with weights, the distance to the baseline is how far the weights
move the run from the corpus as built.
"""

from runwright.data.format.manifest import DatasetManifest


def build_baseline(manifest: DatasetManifest, unit: str) -> dict[str, float]:
    """Source -> share of the train split's documents (`documents`) or tokens (otherwise)."""
    train = manifest.statistics.splits.get("train", {})
    counts = {
        source: (s.documents if unit == "documents" else s.tokens) for source, s in train.items()
    }
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items())} if total else {}
