"""Evaluation on the dataset's isolated eval split (issue 17: evaluation bound to checkpoints).

The data build holds eval documents apart from training ones (selected by hash, near-duplicates
of them dropped from train: data/format/manifest.py's split boundary). The eval set is the first
`sequences` rows of `sequence_length + 1` tokens of the eval split's documents, packed back to
back in manifest order: the same rows for every evaluation of every run of the dataset, so eval
losses compare across steps and runs. Each data-parallel rank evaluates every dp-th row; the
loss is summed over ranks (one all-reduce) and divided by the tokens predicted.

Evaluating changes nothing the training depends on: no gradient, no RNG draw (dropout is off in
eval mode), no loader state, so a run with evaluation stays bitwise equal to one without.
"""

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from runwright.data import open_dataset


def eval_rows(
    dataset: str,
    sequence_length: int,
    sequences: int,
    dp_rank: int,
    dp_size: int,
    split: str = "eval",
) -> torch.Tensor | None:
    """This rank's eval rows, [rows, sequence_length + 1] token ids; None when the dataset has
    no eval split or too few eval tokens for one row. `split="train"`: the same rows from the
    train split's first documents (the restore probe's batch, train/probe.py)."""
    opened = open_dataset(dataset, verification="size", split=split)
    width = sequence_length + 1
    wanted = sequences * width
    parts: list[np.ndarray] = []
    have = 0
    for record in opened.manifest.shards:
        if record.split != split or have >= wanted:
            continue
        shard = opened.shards[record.name]
        for i in range(shard.documents):
            doc = shard.document(i)
            parts.append(np.asarray(doc, dtype=np.int64))
            have += len(doc)
            if have >= wanted:
                break
    if have < width:
        return None
    stream = np.concatenate(parts)[: (min(have, wanted) // width) * width]
    rows = torch.from_numpy(stream.reshape(-1, width).copy())
    return rows[dp_rank::dp_size]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    rows: torch.Tensor,
    micro_batch: int,
    device: torch.device,
    group: dist.ProcessGroup | None = None,
) -> tuple[float, int]:
    """(mean loss per predicted token over every rank's rows, tokens predicted). `group`: the dp
    ranks, whose rows differ (tp peers read the same rows; the default is every rank)."""
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    for start in range(0, rows.shape[0], micro_batch):
        batch = rows[start : start + micro_batch].to(device)
        tokens, labels = batch[:, :-1], batch[:, 1:]
        positions = torch.arange(tokens.shape[1], device=device).expand_as(tokens)
        segments = torch.zeros_like(tokens)
        logits = model(tokens, positions, segments)
        ce = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum")
        total += torch.stack([ce.double(), torch.tensor(labels.numel(), device=device).double()])
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(total, group=group)
    model.train(was_training)
    return float(total[0] / total[1]), int(total[1])
