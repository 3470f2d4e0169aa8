"""Mixed precision per `training.precision` (torch.amp; see the AMP docs' "Automatic Mixed
Precision" recipe).

    fp32   no autocast
    bf16   torch.autocast(dtype=bfloat16) on CPU and GPU: matmuls in bf16, fp32's exponent range,
           so no loss scaling
    fp16   torch.autocast(dtype=float16) with torch.amp.GradScaler, GPU only (the spec refuses
           fp16 on CPU at submit: spec/parallel.py): the loss is scaled up before backward so
           small gradients survive fp16's range, unscaled before clipping, and a step whose
           gradients overflowed is dropped by the scaler, which then halves the scale

Parameters, gradients and optimizer state stay fp32 in every mode. The precision is saved in the
checkpoint (`TrainState.extra["precision"]`, `PrecisionRecord`) and the scaler's state (a dict
of floats and ints) under the checkpoint's `scaler` key, so a restored fp16 run continues with
the scale it had.
"""

import contextlib
from typing import Any

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """The autocast context, the loss scaling and the optimizer step of one precision."""

    def __init__(self, name: str, device: torch.device) -> None:
        self.name = name
        self.device = device
        self.scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
        """Only fp16 scales its loss; None otherwise (TrainState.scaler)."""

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.name not in DTYPES:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.name])

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients back to their true size before they are clipped or measured."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)  # skipped by the scaler when the gradients overflowed
        self.scaler.update()


class PrecisionRecord:
    """The precision a checkpoint was trained in (a `Stateful`): saved as {"precision": name};
    on restore `saved` says what the checkpoint had (a run may restore another precision's
    checkpoint: master weights are fp32 in every mode)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.saved: str | None = None

    def state_dict(self) -> dict[str, str]:
        return {"precision": self.name}

    def load_state_dict(self, state: dict[str, str]) -> None:
        self.saved = str(state["precision"])
