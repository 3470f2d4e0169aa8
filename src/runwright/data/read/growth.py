"""Growing sources: a new version of the dataset during a run, only as a declared change.

A source that grows (new documents crawled, a source rebuilt) makes a new dataset version with a
new id, and the logical sequence is a function of the dataset id (ARCHITECTURE.md, "Data
order"): continuing the old cursor on the new version would silently read another sequence. So
a cursor of another dataset version is refused, naming both ids and the fix, unless the spec
declares the change (`data.source_growth.from_manifest_id` = the version the cursor was written
for). A declared change is taken at the cursor's step boundary and mapped by a versioned rule:

- `new-epoch-v1`: the step, the sample position and the mixture stage carry on; the epoch ends
  there and the next one draws every source from the new version's permutations (the counters
  restart, as at any epoch). The document a step boundary split is not finished (the new
  version's draw numbers mean other documents) and is named in the record. Documents of the old
  version already drawn in that epoch may come again in the new one, as at any epoch boundary.

Everything else of the data contract (tokenizer, algorithms, mixture, seed, sequence length) must
stay: one change at a time. The change is written into the cursor (`source_changes`), so every
later checkpoint carries it, and the loader reports DATA_SOURCE_CHANGED.

A coverage-only resume (`resume='coverage'`, asked for by the caller) accepts another data
contract wholesale and keeps only per-source progress; when that contract is another dataset
version it is recorded the same way, mapping `coverage-v1` (`coverage_change`): taken, but never
silently.
"""

from runwright.data.errors import CursorMismatchError
from runwright.data.read.cursor import DataCursor, SourceChange, cursor_differences
from runwright.spec import SourceGrowthSpec


def take_source_change(
    saved: DataCursor,
    expected: DataCursor,
    growth: SourceGrowthSpec | None,
    train_shards: set[str],
) -> tuple[DataCursor, SourceChange]:
    """The cursor mapped onto the loader's dataset version and the change's record, or
    CursorMismatchError when the change is not the declared one. `saved` was written for another
    dataset id than `expected`'s; `train_shards` are the new version's train shard names."""
    if growth is None or growth.from_manifest_id != saved.dataset_id:
        declared = (
            f" (data.source_growth declares {growth.from_manifest_id[:12]}, not this one)"
            if growth is not None
            else ""
        )
        raise CursorMismatchError(
            "the dataset changed during the run: the data cursor was written for dataset_id "
            f"{saved.dataset_id}, the loader opened dataset_id {expected.dataset_id}{declared}. "
            "A new version of a source is taken only as a declared change: set "
            f"data.source_growth.from_manifest_id: {saved.dataset_id} (mapping new-epoch-v1: the "
            f"new version starts a new epoch after step {saved.step}), or point data.dataset "
            "back at the version the run started with"
        )
    others = [d for d in cursor_differences(saved, expected) if not d.startswith("dataset_id:")]
    if others:
        raise CursorMismatchError(
            "a declared source change replaces the dataset version only; these changed too:\n  - "
            + "\n  - ".join(others)
            + "\nKeep the tokenizer, algorithms, mixture, seed and sequence length of the run"
        )
    change = SourceChange(
        from_dataset_id=saved.dataset_id,
        to_dataset_id=expected.dataset_id,
        at_step=saved.step,
        mapping=growth.mapping,
        from_epoch=saved.epoch,
        dropped_residual=saved.residual,
    )
    names = list(expected.source_draws)
    mapped = expected.model_copy(
        update={
            "epoch": saved.epoch + 1,
            "step": saved.step,
            "position": saved.position,
            "source_draws": dict.fromkeys(names, 0),
            "source_units": dict.fromkeys(names, 0),
            "residual": None,
            "stage": saved.stage,
            "stage_units": {},
            "quarantined": tuple(q for q in saved.quarantined if q.shard in train_shards),
            "source_changes": (*saved.source_changes, change),
        }
    )
    return mapped, change


COVERAGE_MAPPING = "coverage-v1"
"""A coverage-only resume onto another dataset version: per-source draw counts carried over, the
exact sequence not reproduced (cursor.py `reconcile`)."""


def coverage_change(saved: DataCursor, expected: DataCursor) -> tuple[DataCursor, SourceChange]:
    """`saved` with the record of a coverage-only resume onto `expected`'s dataset version."""
    change = SourceChange(
        from_dataset_id=saved.dataset_id,
        to_dataset_id=expected.dataset_id,
        at_step=saved.step,
        mapping=COVERAGE_MAPPING,
        from_epoch=saved.epoch,
        dropped_residual=saved.residual,
    )
    return saved.model_copy(update={"source_changes": (*saved.source_changes, change)}), change
