"""The reference trainer's guard-trip capture: what one step's batch, model and schedule were
when a guard refused it, written through the runtime's `capture_guard_trip`
(runtime/guard_capture.py: hashes, lengths and sources of the inputs, never their tokens)."""

from typing import Any

import torch

from runwright.data import Batch
from runwright.runtime import RunContext, capture_guard_trip, input_summary


def capture_step(
    ctx: RunContext,
    step: int,
    guard: str,
    *,
    model: torch.nn.Module,
    batch: Batch,
    dataset_id: str,
    dp_rank: int,
    lr: float,
    precision: str,
    **figures: Any,
) -> None:
    """Capture `step` on this rank; `figures` (loss, grad_norm, the spike's window mean) go in
    as the guard saw them."""
    summary = input_summary(
        batch.tokens,
        loss_mask=batch.loss_mask,
        segment_ids=batch.segment_ids,
        sources={
            "dataset_id": dataset_id,
            "samples": [batch.first_sample, batch.end_sample],
            "dp_rank": dp_rank,
        },
    )
    capture_guard_trip(
        ctx, step, guard, model=model, inputs=summary, lr=lr, precision=precision, **figures
    )
