"""The memory ledger of a job spec as written: what `runwright plan memory --spec FILE` prints
with no flag overriding it, and what the scheduler holds a run's devices to (control/admission.py:
a run stays pending rather than start on devices its model cannot fit, seed 000 8.5)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from runwright.plan.activations import activation_bytes_per_device, activation_bytes_per_layer
from runwright.plan.memory import MemoryLedger, ZeroStage, memory_ledger
from runwright.plan.model import parameters_per_device

if TYPE_CHECKING:
    from runwright.spec import JobSpec

HEADROOM_FRACTION = 0.1
"""`plan memory`'s default headroom: the ledger must fit 90% of a device."""


def spec_memory_ledger(
    spec: JobSpec,
    device_memory_bytes: int | None = None,
    headroom_fraction: float = HEADROOM_FRACTION,
) -> MemoryLedger | None:
    """The ledger of the spec's model on its layout (dp, tp, pp, micro-batch, sequence length),
    mixed-precision Adam without ZeRO, as `plan memory` defaults; None when the spec declares no
    model (a user's own script: nothing to size)."""
    model = spec.model
    if model is None:
        return None
    tp, pp = spec.parallelism.tp, spec.parallelism.pp
    per_layer = activation_bytes_per_layer(
        spec.data.sequence_length,
        int(spec.plan.micro_batch_size.value or 1),
        model.d_model,
        model.n_heads,
        tp,
    )
    return memory_ledger(
        parameters_per_device(model, tp, pp),
        activations_bytes=activation_bytes_per_device(per_layer, model.n_layers, pp),
        dp=int(spec.plan.dp.value or 1),
        zero_stage=ZeroStage.NONE,
        device_memory_bytes=device_memory_bytes,
        headroom_fraction=headroom_fraction,
    )


def device_memory_floor(spec: JobSpec) -> int | None:
    """The least device memory the spec's ledger fits with `plan memory`'s headroom, in bytes;
    None without a model."""
    ledger = spec_memory_ledger(spec)
    if ledger is None:
        return None
    return max(1, math.ceil(ledger.total_bytes / (1.0 - HEADROOM_FRACTION)))


def checkpoint_bytes(spec: JobSpec) -> float:
    """About how large one checkpoint of the spec's model is: the model states its ledger counts
    on one device (working parameters and optimizer states, fp32 master copy included) times the
    model-parallel shards (tp x pp); data-parallel replicas hold copies, saved once. 0 without a
    model."""
    ledger = spec_memory_ledger(spec)
    if ledger is None:
        return 0.0
    shards = spec.parallelism.tp * spec.parallelism.pp
    return (ledger.parameters_bytes + ledger.optimizer_bytes) * shards
