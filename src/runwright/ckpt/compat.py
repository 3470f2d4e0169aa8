"""Can a checkpoint be restored into the current run, and how?

Exact when the world size and parallel layout match; DCP resharding when only they differ (DCP's
load planner maps the stored chunks onto the new layout); a refusal naming every mismatch when the
tokenizer, the data manifest or the model schema differ, because resuming then silently trains a
different model on different data.
"""

from enum import StrEnum

from pydantic import Field

from runwright.ckpt.errors import IncompatibleCheckpointError
from runwright.ckpt.manifest import CheckpointManifest
from runwright.records import Record

MODEL_PREFIX = "model."


class RestoreMode(StrEnum):
    """How a checkpoint will be loaded."""

    EXACT = "exact"
    """Same world size and layout: every rank reads back what it wrote."""
    RESHARD = "reshard"
    """World size or layout changed: DCP maps the stored chunks onto the new layout."""


class CurrentRun(Record):
    """What the run that restores looks like."""

    world_size: int
    """Ranks now."""
    parallel_layout: dict[str, int] = Field(default_factory=dict)
    """Parallel degrees now."""
    tokenizer_hash: str | None = None
    """Tokenizer hash now (None: not checked)."""
    data_manifest_id: str | None = None
    """Dataset now (None: not checked)."""
    model_schema: dict[str, tuple[list[int], str]] = Field(default_factory=dict)
    """Model parameter name -> (global shape, dtype) now."""


def decide(manifest: CheckpointManifest, current: CurrentRun) -> RestoreMode:
    """Return the restore mode, or raise `IncompatibleCheckpointError` listing every mismatch."""
    problems: list[str] = []
    if current.tokenizer_hash and manifest.tokenizer_hash != current.tokenizer_hash:
        problems.append(
            f"tokenizer hash {manifest.tokenizer_hash} at save, {current.tokenizer_hash} now"
        )
    if current.data_manifest_id and manifest.data_manifest_id != current.data_manifest_id:
        problems.append(
            f"data manifest {manifest.data_manifest_id} at save, {current.data_manifest_id} now"
        )
    problems += _schema_problems(manifest, current.model_schema)
    if problems:
        raise IncompatibleCheckpointError(
            f"checkpoint {manifest.checkpoint_id} (step {manifest.step}) cannot be restored into "
            "this run: " + "; ".join(problems) + ". Start a new run from an exported model, or "
            "point the run back at the tokenizer/data/model it was trained with."
        )
    same_layout = manifest.parallel_layout == current.parallel_layout
    if manifest.world_size == current.world_size and same_layout:
        return RestoreMode.EXACT
    return RestoreMode.RESHARD


def _schema_problems(
    manifest: CheckpointManifest, schema: dict[str, tuple[list[int], str]]
) -> list[str]:
    if not schema:
        return []
    stored = {
        key.removeprefix(MODEL_PREFIX): value
        for key, value in manifest.logical_keys.items()
        if key.startswith(MODEL_PREFIX) and value.kind == "tensor"
    }
    problems: list[str] = []
    missing = sorted(set(schema) - set(stored))
    extra = sorted(set(stored) - set(schema))
    if missing:
        problems.append(f"model parameters not in the checkpoint: {_few(missing)}")
    if extra:
        problems.append(f"checkpoint parameters the model lacks: {_few(extra)}")
    for name in sorted(set(schema) & set(stored)):
        shape, dtype = schema[name]
        key = stored[name]
        if key.shape != list(shape) or key.dtype != dtype:
            problems.append(
                f"model.{name} is {key.dtype}{key.shape} in the checkpoint, "
                f"{dtype}{list(shape)} now"
            )
    return problems


def _few(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"
