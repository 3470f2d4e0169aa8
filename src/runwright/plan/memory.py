"""The memory ledger: per-device model-state bytes under ZeRO, plus activations and declared
buffers, against a device's capacity.

Model states follow ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", sections 3.1 and 5, Figure 1). With P parameters on a device, mixed
precision Adam keeps 2P bytes of fp16/bf16 parameters, 2P of gradients and K*P of optimizer
states (K = 12: fp32 master copy, momentum and variance, 4 bytes each), 16P in all. Over a
data-parallel group of D ranks:

    stage 0 (plain DP)      (2 + 2 + K) P
    stage 1 (P_os)          2P + 2P + K P / D
    stage 2 (P_os+g)        2P + (2 + K) P / D
    stage 3 (P_os+g+p)      (2 + 2 + K) P / D

Figure 1's example (P = 7.5e9, D = 64, K = 12) gives 120 GB, 31.4 GB, 16.6 GB and 1.9 GB.

This is the model-state load, not the allocator peak: gathered ZeRO-3 layers, prefetch,
communication buckets, recomputation working sets and allocator reserve are not derived here
(seed 000, 8.3 "memory ledger"); declare them as buffers.
"""

from enum import IntEnum, StrEnum

from pydantic import Field

from runwright.plan.base import Record
from runwright.plan.errors import PlanError


class ZeroStage(IntEnum):
    """How much of the model state ZeRO partitions over the data-parallel group."""

    NONE = 0
    OPTIMIZER = 1
    GRADIENTS = 2
    PARAMETERS = 3


class Offload(StrEnum):
    """Which model states live in host memory instead of on the device."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    """ZeRO-Offload (Ren et al. 2021): gradients, optimizer states and the optimizer step move
    to the CPU; the device keeps the 16-bit parameters."""
    ALL = "all"
    """ZeRO-Infinity (Rajbhandari et al. 2021): parameters too, streamed in per layer; needs
    ZeRO stage 3."""


class StateBytes(Record):
    """Bytes of model state per parameter; recompute these for another optimizer or dtype."""

    parameter_bytes: float = Field(default=2.0, ge=0)
    """Bytes per parameter of the working weights (2 for fp16/bf16)."""
    gradient_bytes: float = Field(default=2.0, ge=0)
    """Bytes per parameter of the gradients (2 for fp16/bf16)."""
    optimizer_bytes: float = Field(default=12.0, ge=0)
    """Bytes per parameter of optimizer state, ZeRO's K (12 for mixed-precision Adam)."""


MIXED_PRECISION_ADAM = StateBytes()
"""ZeRO section 3.1: 2 + 2 + 12 = 16 bytes per parameter."""


class ModelStateBytes(Record):
    """Model-state bytes held by one device, and what offload moved to its host."""

    parameters_bytes: float
    """Working parameters on the device."""
    gradients_bytes: float
    """Gradients on the device."""
    optimizer_bytes: float
    """Optimizer states on the device."""
    host_bytes: float
    """Model states offloaded to host memory for this device."""

    @property
    def device_bytes(self) -> float:
        return self.parameters_bytes + self.gradients_bytes + self.optimizer_bytes


def model_state_bytes(
    parameters: int,
    dp: int = 1,
    zero_stage: ZeroStage = ZeroStage.NONE,
    state: StateBytes = MIXED_PRECISION_ADAM,
    offload: Offload = Offload.NONE,
) -> ModelStateBytes:
    """Per-device model-state bytes for `parameters` held by this device before ZeRO (after
    tensor/pipeline sharding, see `model.parameters_per_device`), ZeRO section 5."""
    if parameters < 0:
        raise PlanError(f"parameters={parameters} must be zero or more")
    if dp < 1:
        raise PlanError(f"dp={dp} must be at least 1 (the data-parallel group size)")
    stage = ZeroStage(zero_stage)
    if offload is Offload.ALL and stage is not ZeroStage.PARAMETERS:
        raise PlanError(
            f"offload=all moves parameters to the host, which needs ZeRO stage 3 (got stage "
            f"{int(stage)}); use --zero-stage 3 or --offload optimizer"
        )
    # Each state is divided by D once its stage partitions it (ZeRO Figure 1).
    params = state.parameter_bytes * parameters / (dp if stage >= ZeroStage.PARAMETERS else 1)
    grads = state.gradient_bytes * parameters / (dp if stage >= ZeroStage.GRADIENTS else 1)
    optim = state.optimizer_bytes * parameters / (dp if stage >= ZeroStage.OPTIMIZER else 1)
    host = 0.0
    if offload in (Offload.OPTIMIZER, Offload.ALL):
        host += grads + optim
        grads = optim = 0.0
    if offload is Offload.ALL:
        host += params
        params = 0.0
    return ModelStateBytes(
        parameters_bytes=params, gradients_bytes=grads, optimizer_bytes=optim, host_bytes=host
    )


class MemoryLedger(Record):
    """One device's memory ledger: model states, activations, buffers, and the fit verdict."""

    parameters_per_device: int
    """Parameters this device holds before ZeRO sharding."""
    parameters_bytes: float
    """Working parameters on the device."""
    gradients_bytes: float
    """Gradients on the device."""
    optimizer_bytes: float
    """Optimizer states on the device."""
    activations_bytes: float
    """Activations kept for the backward pass (Korthikanti et al. 2022)."""
    buffers_bytes: float
    """Declared buffers: communication buckets, gathered layers, allocator reserve."""
    total_bytes: float
    """Sum of the rows above."""
    host_bytes: float
    """Model states offloaded to this device's host."""
    device_memory_bytes: int | None
    """Declared device capacity; None when not given."""
    headroom_fraction: float
    """Share of capacity kept free for what the ledger does not model."""
    usable_bytes: float | None
    """Capacity x (1 - headroom): what the ledger's total must fit in."""
    fits: bool | None
    """Whether total <= usable; None without a declared capacity."""
    note: str
    """What the ledger counts and what it does not."""

    def rows(self) -> list[tuple[str, float]]:
        return [
            ("parameters", self.parameters_bytes),
            ("gradients", self.gradients_bytes),
            ("optimizer states", self.optimizer_bytes),
            ("activations", self.activations_bytes),
            ("buffers", self.buffers_bytes),
            ("total", self.total_bytes),
        ]


LEDGER_NOTE = (
    "model-state load (ZeRO, Rajbhandari et al. 2020) plus stored activations "
    "(Korthikanti et al. 2022) and declared buffers; not the allocator peak: temporary "
    "gathers, prefetch, buckets, recomputation working sets and fragmentation come on top"
)


def memory_ledger(
    parameters: int,
    activations_bytes: float = 0.0,
    dp: int = 1,
    zero_stage: ZeroStage = ZeroStage.NONE,
    state: StateBytes = MIXED_PRECISION_ADAM,
    offload: Offload = Offload.NONE,
    buffers_bytes: float = 0.0,
    device_memory_bytes: int | None = None,
    headroom_fraction: float = 0.1,
) -> MemoryLedger:
    """Add activations and buffers to the model states and compare with the device capacity."""
    if activations_bytes < 0 or buffers_bytes < 0:
        raise PlanError("activations and buffers must be zero or more bytes")
    if not 0.0 <= headroom_fraction < 1.0:
        raise PlanError(
            f"headroom_fraction={headroom_fraction} must be in [0, 1), e.g. 0.1 keeps 10% free"
        )
    states = model_state_bytes(parameters, dp, zero_stage, state, offload)
    total = states.device_bytes + activations_bytes + buffers_bytes
    usable = None
    fits = None
    if device_memory_bytes is not None:
        if device_memory_bytes < 1:
            raise PlanError(f"device_memory_bytes={device_memory_bytes} must be positive")
        usable = device_memory_bytes * (1.0 - headroom_fraction)
        fits = total <= usable
    return MemoryLedger(
        parameters_per_device=parameters,
        parameters_bytes=states.parameters_bytes,
        gradients_bytes=states.gradients_bytes,
        optimizer_bytes=states.optimizer_bytes,
        activations_bytes=activations_bytes,
        buffers_bytes=buffers_bytes,
        total_bytes=total,
        host_bytes=states.host_bytes,
        device_memory_bytes=device_memory_bytes,
        headroom_fraction=headroom_fraction,
        usable_bytes=usable,
        fits=fits,
        note=LEDGER_NOTE,
    )
