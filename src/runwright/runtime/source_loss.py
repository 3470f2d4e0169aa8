"""The loss by source and by length bucket, for any training script (issue 26).

    breakdown = SourceLoss(loader.loss_groups)
    for step in loop:
        ...
        ce = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
        breakdown.add(ce, part)              # each micro-batch: on the loss's device, no sync
        ...backward...
        breakdown.stage()                    # optional, on a GPU: before the loss is read
        loop.complete(step, loss=loss, ..., **breakdown.flush())

`add` reduces the per-token loss into one small accumulator on the loss's device, indexed by
the label's (source, length bucket) group (`Batch.loss_group`, data/read/loss_groups.py): one
`index_add_` per call, nothing read to the host. `flush` reads the accumulator once per step and
returns the step's report attributes:

    source_loss   {source: [summed per-token loss, loss tokens]}   this rank's
    length_loss   {bucket: [summed per-token loss, loss tokens]}   e.g. "129-512"

Sums, not means: summed over ranks (observe/timeline.py), a source's loss is sum / tokens, and the
sources' losses weighted by their loss tokens give the step's token-weighted loss exactly as the
trainer's own reduction does. On a GPU, `stage()` right after the step's last `add` queues the
copy to pinned host memory before the script reads its loss (which waits for the device anyway),
so `flush` finds the figures already on the host; without it, `flush` stages and waits itself.
"""

from typing import TYPE_CHECKING, Any

import torch

from runwright.errors import RunwrightError

if TYPE_CHECKING:
    from runwright.data.read.loss_groups import LossGroups


class SourceLoss:
    """One rank's per-step loss by (source, length bucket), accumulated on the device."""

    def __init__(self, groups: "LossGroups | None") -> None:
        if groups is None:
            raise RunwrightError(
                "the loader reports no loss groups: construct the DataLoader with "
                "loss_length_buckets (the default), not None"
            )
        self.groups = groups
        self._sums: torch.Tensor | None = None
        """(2, groups) float32: summed masked loss per group, then loss tokens."""
        self._host: torch.Tensor | None = None
        self._ready: Any = None
        """The CUDA event after the staged copy; None when nothing is staged."""

    def add(self, token_loss: torch.Tensor, batch: Any) -> None:
        """Count `token_loss` (one value per label, any shape with the batch's (rows, S)
        elements; masked or not: the batch's loss mask is applied here) in its labels' groups.
        `batch` is a Batch or a mapping with its `loss_group` and `loss_mask` (a micro-batch's
        slice of them)."""
        group, mask = batch["loss_group"], batch["loss_mask"]
        if group is None:
            raise RunwrightError(
                "the batch carries no loss groups: construct the DataLoader with "
                "loss_length_buckets (the default), not None"
            )
        loss = token_loss.detach().reshape(-1)
        if loss.dtype != torch.float32:
            loss = loss.float()
        device = loss.device
        mask, index = mask.reshape(-1), group.reshape(-1)
        if mask.device != device or mask.dtype != torch.float32:
            mask = mask.to(device, torch.float32, non_blocking=True)
        if index.device != device:
            index = index.to(device, non_blocking=True)
        if index.shape[0] != loss.shape[0]:
            raise RunwrightError(
                f"token_loss has {loss.shape[0]} values, the batch's loss_group "
                f"{index.shape[0]}: pass one loss per label of the same rows (reduction='none')"
            )
        if self._sums is None or self._sums.device != device:
            self._sums = torch.zeros((2, self.groups.size), dtype=torch.float32, device=device)
        # Two index_add_ into the rows of one buffer: cheaper than stacking the pair per label.
        self._sums[0].index_add_(0, index, loss * mask)
        self._sums[1].index_add_(0, index, mask)
        self._ready = None  # an add after `stage`: `flush` copies again, this one included

    def stage(self) -> None:
        """Queue the copy of this step's figures to the host (a GPU's pinned memory) without
        waiting for it. Free on a CPU; `flush` calls it when the script did not."""
        sums = self._sums
        if sums is None or self._ready is not None or sums.device.type != "cuda":
            return
        if self._host is None:
            self._host = torch.empty(sums.shape, dtype=sums.dtype, pin_memory=True)
        self._host.copy_(sums, non_blocking=True)
        self._ready = torch.cuda.Event()
        self._ready.record()

    def flush(self) -> dict[str, Any]:
        """This step's figures as report attributes (`source_loss`, `length_loss`), and a fresh
        start for the next step; {} when nothing was added."""
        sums = self._sums
        if sums is None:
            return {}
        if sums.device.type == "cuda":
            self.stage()
            self._ready.synchronize()
            values = self._host.tolist()  # type: ignore[union-attr]
            self._ready = None
        else:
            values = sums.tolist()
        sums.zero_()
        by_source, by_length = self.groups.marginals(values[0], [round(t) for t in values[1]])
        return {"source_loss": by_source, "length_loss": by_length}
