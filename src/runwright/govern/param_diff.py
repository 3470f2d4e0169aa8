"""How far apart two runs' final parameters are, read from their newest committed checkpoints.

When two runs train on the same samples in the same global batches but with another number of
ranks (an elastic run that shrank against a fixed-size one), floating-point sums are reduced in
another order, so their parameters agree to rounding, not bit for bit. This measures by how much:
the largest absolute element difference, and the relative L2 distance ||a - b|| / ||b|| over every
model tensor (the norm of all tensors as one vector). torch is imported only here, when asked.
"""

import math

from pydantic import Field

from runwright.ckpt import inventory as inv
from runwright.errors import RunwrightError
from runwright.records import Record
from runwright.store import RunRecord


class ParameterDifference(Record):
    """The distance between two runs' final model states."""

    checkpoint_a: str
    """The checkpoint read for run A (its newest committed one)."""
    checkpoint_b: str
    """The one read for run B."""
    step_a: int
    """Its step."""
    step_b: int
    """Its step."""
    tensors: int = Field(ge=0)
    """Model tensors compared (those both hold with the same shape)."""
    max_abs: float = Field(ge=0)
    """Largest |a - b| of any element."""
    relative_l2: float = Field(ge=0)
    """||a - b||_2 / ||b||_2 over all compared tensors as one vector."""
    mismatched: tuple[str, ...] = ()
    """Tensors only one holds, or with different shapes (not compared)."""


def final_weights(run: RunRecord) -> tuple[str, int, dict]:
    """(checkpoint id, step, model tensors) of the run's newest committed checkpoint."""
    from runwright.ckpt.export import read_weights

    root = inv.checkpoint_root(run.run_id, run.root)
    try:
        storage, checkpoint = inv.find(root, "latest")
    except RunwrightError as exc:
        raise RunwrightError(
            f"run {run.run_id} has no committed checkpoint to read its final parameters from "
            f"({exc}); compare runs that save at their last step (checkpoint.enabled)"
        ) from None
    record = checkpoint.record
    return record.checkpoint_id, record.step, read_weights(storage, checkpoint)


def parameter_difference(run_a: RunRecord, run_b: RunRecord) -> ParameterDifference:
    import torch

    id_a, step_a, a = final_weights(run_a)
    id_b, step_b, b = final_weights(run_b)
    common = sorted(k for k in set(a) & set(b) if a[k].shape == b[k].shape)
    mismatched = tuple(sorted((set(a) | set(b)) - set(common)))
    max_abs, diff_sq, ref_sq = 0.0, 0.0, 0.0
    for name in common:
        x, y = a[name].double(), b[name].double()
        delta = x - y
        if delta.numel():
            max_abs = max(max_abs, float(delta.abs().max()))
        diff_sq += float(torch.sum(delta * delta))
        ref_sq += float(torch.sum(y * y))
    return ParameterDifference(
        checkpoint_a=id_a,
        checkpoint_b=id_b,
        step_a=step_a,
        step_b=step_b,
        tensors=len(common),
        max_abs=max_abs,
        relative_l2=math.sqrt(diff_sq) / math.sqrt(ref_sq) if ref_sq else math.sqrt(diff_sq),
        mismatched=mismatched,
    )
