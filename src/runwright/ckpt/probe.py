"""Restore validation (issue 24): a checkpoint is restored only once the state it loaded behaves
as the state that was saved.

Checksums prove the bytes are the bytes that were written; they cannot tell whether what was
written, or what the load made of it, is the model that trained (a layout that resharded a key
wrongly, a dtype cast, memory that flipped before the write). So at every save the checkpointer
measures a `RestoreProbe` on the live state (a forward on a fixed probe batch, the same batch
every time, and the parameters' L2 norm) and records the reading in the manifest; after a load it
measures again, before the first step, and compares (`judge`): the probe loss must be finite and
within `tolerance` of the saved one, relative (when both read the same probe batch: a run that
resumes another run's checkpoint on other data compares the norm only); the parameters finite
and their norm within the same bound. A checkpoint that fails is skipped like one that fails
verification (restore.py's walk to the next older one, RESTORE_FALLBACK with a reason starting
`probe check`); one that passes is reported as RESTORE_VALIDATED with the figures.

`ModelProbe` is the probe for a `torch.nn.Module` and a loss closure; a training script passes
one to its checkpointer (`ctx.checkpointer(probe=...)`, or `Checkpointer(probe=...)`). Every rank
measures at the same point (save and restore are collective), so a sharded forward works.
"""

import math
from collections.abc import Callable
from typing import Protocol

import torch

from runwright.ckpt.manifest import ProbeRecord
from runwright.ckpt.state import apply_rng, capture_rng
from runwright.records import Record

DEFAULT_TOLERANCE = 1e-2
"""Relative. The same weights on the same rows give the same loss up to reduction order: ~1e-6
in fp32 across layouts on CPU, ~1e-3 with TF32 matmuls on a GPU (a 10-bit mantissa, 2^-10 ~
1e-3). 1e-2 stays clear of both; the damage this check exists for moves the loss by far more."""


class ProbeReading(Record):
    """One measurement of the live state: recorded at save, repeated after a load."""

    loss: float
    """The probe batch's loss (the script's loss closure, no gradient, RNG untouched)."""
    parameter_norm: float
    """L2 norm over every parameter (a sharded one's whole tensor)."""
    nonfinite_parameters: int = 0
    """Parameter values that are NaN or infinite (this rank's shards)."""
    batch: str | None = None
    """Which probe batch gave the loss (the probe's `batch` id)."""

    def record(self) -> ProbeRecord | None:
        """What the manifest keeps; None for a state that is not finite (nothing to compare
        a restore against: such a checkpoint is restored unchecked, as before probes)."""
        if self.nonfinite_parameters or not math.isfinite(self.loss):
            return None
        return ProbeRecord(loss=self.loss, parameter_norm=self.parameter_norm, batch=self.batch)


class ProbeVerdict(Record):
    """A restored checkpoint's probe reading against the one recorded at its save."""

    saved: ProbeRecord
    """Recorded in the manifest at save time."""
    observed: ProbeReading
    """Measured after loading, before the first step."""
    tolerance: float
    """Allowed relative difference of loss and parameter norm."""
    failure: str | None = None
    """Why the check failed, in words; None when it passed."""

    @property
    def passed(self) -> bool:
        return self.failure is None


class RestoreProbe(Protocol):
    """Measured on every rank at once, at every save and after every load."""

    def measure(self) -> ProbeReading: ...


def relative_difference(observed: float, saved: float) -> float:
    """|observed - saved| / max(1, |saved|): relative for large values, absolute near zero."""
    return abs(observed - saved) / max(1.0, abs(saved))


def same_batch(saved: ProbeRecord, observed: ProbeReading) -> bool:
    """Whether the two losses come from the same rows (unknown ids are taken as the same)."""
    return saved.batch is None or observed.batch is None or saved.batch == observed.batch


def judge(saved: ProbeRecord, observed: ProbeReading, tolerance: float) -> ProbeVerdict:
    """Compare a reading after a load with the one recorded at save time."""
    failure = None
    if observed.nonfinite_parameters:
        failure = f"{observed.nonfinite_parameters} parameter values are NaN or infinite"
    elif not math.isfinite(observed.loss):
        failure = f"the probe loss is {observed.loss} after loading"
    elif (
        same_batch(saved, observed)
        and (d := relative_difference(observed.loss, saved.loss)) > tolerance
    ):
        failure = (
            f"probe loss {observed.loss:.6g} after loading, {saved.loss:.6g} at save "
            f"(relative difference {d:.3g} > {tolerance:g})"
        )
    elif (d := relative_difference(observed.parameter_norm, saved.parameter_norm)) > tolerance:
        failure = (
            f"parameter norm {observed.parameter_norm:.6g} after loading, "
            f"{saved.parameter_norm:.6g} at save (relative difference {d:.3g} > {tolerance:g})"
        )
    return ProbeVerdict(saved=saved, observed=observed, tolerance=tolerance, failure=failure)


def validated_figures(verdict: ProbeVerdict) -> dict[str, float | int]:
    """RESTORE_VALIDATED's attributes."""
    return {
        "probe_loss": verdict.observed.loss,
        "saved_probe_loss": verdict.saved.loss,
        "relative_difference": relative_difference(verdict.observed.loss, verdict.saved.loss),
        "tolerance": verdict.tolerance,
        "parameter_norm": verdict.observed.parameter_norm,
        "saved_parameter_norm": verdict.saved.parameter_norm,
        "nonfinite_parameters": verdict.observed.nonfinite_parameters,
    }


def parameter_norm(model: torch.nn.Module) -> tuple[float, int]:
    """(L2 norm of every parameter, non-finite values on this rank). A DTensor's norm is reduced
    over its mesh (`full_tensor`, a collective every rank makes in the same order); a plain
    tensor is whole on every rank that holds it (DDP replicas)."""
    squares = torch.zeros((), dtype=torch.float64)
    nonfinite = 0
    for param in model.parameters():
        value = param.detach()
        local = value.to_local() if hasattr(value, "to_local") else value
        nonfinite += int(local.numel() - int(torch.isfinite(local).sum()))
        norm = torch.linalg.vector_norm(value.float())
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        squares += float(norm) ** 2
    return math.sqrt(float(squares)), nonfinite


class ModelProbe:
    """A forward of `model` on a fixed batch through `loss_fn` (it closes over the batch and
    returns a scalar loss), plus the parameters' norm. Runs without gradient, in eval mode, and
    leaves every RNG stream as it found it, so a save or restore with a probe trains bitwise
    as one without."""

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: Callable[[], torch.Tensor],
        batch: str | None = None,
    ) -> None:
        """`batch`: an id of the rows `loss_fn` reads (a digest); a restore whose probe reads
        other rows than the save's compares the parameter norm only."""
        self.model = model
        self.loss_fn = loss_fn
        self.batch = batch

    def measure(self) -> ProbeReading:
        streams = capture_rng()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                loss = float(self.loss_fn())
        finally:
            self.model.train(was_training)
            apply_rng(streams)
        norm, nonfinite = parameter_norm(self.model)
        return ProbeReading(
            loss=loss, parameter_norm=norm, nonfinite_parameters=nonfinite, batch=self.batch
        )
