"""What the loader yields: a Batch (one step's rows for one rank), and how a plan becomes one.

`materialise` is the read stage of the pipeline: the packer fills the batch arrays from the
plan's document window and the shard memmaps (rows.py), and each field is wrapped in a tensor
without copying.
"""

from dataclasses import dataclass
from typing import Any

import torch
from pydantic import Field

from runwright.data.read.kernels import ShardTable
from runwright.data.read.loss_groups import LossGroups
from runwright.data.read.packing import Packer
from runwright.data.read.rows import fill_rows
from runwright.data.read.step_plan import BatchPlan
from runwright.records import Record


@dataclass(frozen=True)
class Batch:
    """One optimizer step's rows for this rank."""

    tokens: torch.Tensor
    """Input ids, int64 (rows, S)."""
    labels: torch.Tensor
    """Target ids, int64 (rows, S)."""
    loss_mask: torch.Tensor
    """1.0 where the label counts, float32 (rows, S)."""
    position_ids: torch.Tensor
    """Positions that restart at every document and row, int64 (rows, S)."""
    segment_ids: torch.Tensor
    """Document number within the row (0 = padding), int32 (rows, S)."""
    device_tokens: int
    """Tokens fed to the model (rows * S)."""
    padded_tokens: int
    """Inputs that are padding."""
    loss_tokens: int
    """Labels that count in the loss."""
    step: int
    """Global step this batch belongs to."""
    first_sample: int
    """First global sample of the step (all ranks)."""
    end_sample: int
    """One past the step's last global sample."""
    loss_group: torch.Tensor | None = None
    """Each label's (source, length bucket) group, int64 (rows, S), 0 where the loss mask is 0
    (data/read/loss_groups.py); None when the loader was given no loss groups."""
    group_loss_tokens: tuple[int, ...] | None = None
    """Loss tokens per group on this rank, in `LossGroups` order."""

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


class LoaderStats(Record):
    """Input-pipeline health, as Prometheus-style names."""

    input_wait_seconds_total: float = Field(ge=0)
    """Time the caller spent waiting in __next__ for a batch."""
    last_input_wait_seconds: float = Field(ge=0)
    """Wait of the most recent batch."""
    queue_depth: int = Field(ge=0)
    """Finished batches waiting in the prefetch queue."""
    reorder_depth: int = Field(ge=0)
    """Batches read but waiting for an earlier one in the reorder buffer."""
    bytes_read_total: int = Field(ge=0)
    """Token bytes copied out of shards."""
    batches_total: int = Field(ge=0)
    """Batches handed to the caller."""
    loss_tokens_total: int = Field(ge=0)
    """Loss tokens handed to the caller on this rank."""
    padded_tokens_total: int = Field(ge=0)
    """Padding handed to the caller on this rank."""


def materialise(
    plan: BatchPlan,
    packer: Packer,
    storage: ShardTable,
    sequence_length: int,
    eod_id: int,
    loss_groups: LossGroups | None = None,
) -> tuple[Batch, int]:
    """The batch a plan describes, and how many tokens were copied out of `storage`; with
    `loss_groups`, each label's (source, length bucket) group too."""
    arrays = fill_rows(
        packer,
        storage,
        plan.window,
        plan.first_row_start,
        plan.rows,
        sequence_length,
        eod_id,
    )
    groups = group_tokens = None
    if loss_groups is not None and plan.doc_sources is not None:
        window = plan.window
        ids, counts = loss_groups.label_groups(
            window.span_end,
            plan.doc_sources,
            window.length,
            plan.first_row_start,
            packer.stride(sequence_length),
            arrays["segment_ids"],
            arrays["loss_mask"],
        )
        groups, group_tokens = torch.from_numpy(ids), tuple(counts.tolist())
    batch = Batch(
        tokens=torch.from_numpy(arrays["tokens"]),
        labels=torch.from_numpy(arrays["labels"]),
        loss_mask=torch.from_numpy(arrays["loss_mask"]),
        position_ids=torch.from_numpy(arrays["position_ids"]),
        segment_ids=torch.from_numpy(arrays["segment_ids"]),
        device_tokens=arrays["device_tokens"],
        padded_tokens=arrays["padded_tokens"],
        loss_tokens=arrays["loss_tokens"],
        step=plan.step,
        first_sample=plan.first_sample,
        end_sample=plan.end_sample,
        loss_group=groups,
        group_loss_tokens=group_tokens,
    )
    return batch, arrays["stored_tokens"]
