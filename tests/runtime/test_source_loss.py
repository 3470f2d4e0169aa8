"""SourceLoss: the per-token loss reduced by (source, length bucket) on the device, read once per
step; weighted by their loss tokens, the sources' losses give the step's loss."""

from pathlib import Path

import numpy as np
import pytest
import torch
from tests.data.read.test_loss_groups import labelled_dataset

from runwright.data import DataLoader
from runwright.errors import RunwrightError
from runwright.runtime import SourceLoss
from runwright.spec import DataSpec


def test_weighted_source_losses_equal_the_step_loss(tmp_path: Path) -> None:
    known = labelled_dataset(tmp_path / "ds")
    data = DataSpec.model_validate(
        {
            "sequence_length": 16,
            "mixture": {"sources": [{"name": "short", "weight": 1}, {"name": "long", "weight": 2}]},
        }
    )
    loader = DataLoader(tmp_path / "ds", data, global_batch_samples=8, loss_length_buckets=(8,))
    breakdown = SourceLoss(loader.loss_groups)
    torch.manual_seed(0)
    for _, batch in zip(range(3), loader, strict=False):
        ce = torch.rand(batch.tokens.shape) * 5  # a per-token loss, unmasked
        for i in range(2):  # two micro-batches of 4 rows
            part = {k: batch[k][4 * i : 4 * (i + 1)] for k in ("loss_group", "loss_mask")}
            breakdown.add(ce[4 * i : 4 * (i + 1)], part)
        report = breakdown.flush()
        mask = batch.loss_mask
        step_loss = float((ce * mask).sum() / mask.sum())
        by_source, by_length = report["source_loss"], report["length_loss"]
        for table in (by_source, by_length):
            tokens = sum(t for _, t in table.values())
            assert tokens == batch.loss_tokens
            weighted = sum((s / t) * t for s, t in table.values()) / tokens
            assert weighted == pytest.approx(step_loss, rel=1e-5)
        # Each source's figure is the mean over exactly its own labels.
        names = np.asarray([known.get(int(t), ("eod",))[0] for t in batch.tokens.flatten()])
        counted = mask.flatten().numpy() > 0
        for name, (loss_sum, tokens) in by_source.items():
            own = counted & (names == name)
            assert tokens == int(own.sum())
            assert loss_sum == pytest.approx(float(ce.flatten()[own].sum()), rel=1e-5)
    assert breakdown.flush() == {"source_loss": {}, "length_loss": {}}  # reset after each read
    loader.close()


def test_a_loader_without_groups_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RunwrightError, match="loss_length_buckets"):
        SourceLoss(None)
