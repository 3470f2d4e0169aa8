"""The reference trainer's restore probe (ckpt/probe.py): the loss of a fixed train batch, the
first PROBE_ROWS rows of the train split's first documents (the same rows for every save and
restore of every run of the dataset, on every rank), in fp32 and without gradient, plus the
parameters' norm. Recorded at every save; a restore whose state does not reproduce it falls
back to the next older checkpoint before the first step.

Cost: one forward of PROBE_ROWS rows per save and per restore, inside the save's stall: about
2 x parameters x PROBE_ROWS x sequence_length FLOPs (Kaplan et al. 2020, the forward's 2N per
token). Measured on one busy CPU thread (benchmarks/restore_probe.py): 2 ms for the test GPT,
0.36 s for 3.4 M parameters on 4 x 256 tokens, 10 s for 25.7 M on 4 x 512. A 7B model on
4 x 4,096 tokens is ~230 TFLOP: seconds on one GPU in fp32 (unmeasured: no GPU here), beside a
save of ~100 GB.
"""

import hashlib

import torch
import torch.nn.functional as F

from runwright.ckpt import ModelProbe
from runwright.train.evaluate import eval_rows

PROBE_ROWS = 4
"""Enough tokens for a loss whose change a damaged weight shows (4 x sequence_length)."""


def restore_probe(
    model: torch.nn.Module, dataset: str, sequence_length: int, device: torch.device
) -> ModelProbe | None:
    """The probe, or None when the train split has too few tokens for one row."""
    rows = eval_rows(dataset, sequence_length, PROBE_ROWS, 0, 1, split="train")
    if rows is None:
        return None
    batch = rows.to(device)
    tokens, labels = batch[:, :-1], batch[:, 1:]
    positions = torch.arange(tokens.shape[1], device=device).expand_as(tokens)
    segments = torch.ones_like(tokens)

    def loss() -> torch.Tensor:
        logits = model(tokens, positions, segments)
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())

    digest = hashlib.sha256(rows.numpy().tobytes()).hexdigest()[:16]
    return ModelProbe(model, loss, batch=f"train-rows-{digest}")
