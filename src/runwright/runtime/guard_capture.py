"""Guard-trip capture (issue 24): when the NaN/Inf guard or the loss-spike guard refuses a step,
each rank writes what a person needs to judge that step without the processes, into the
generation's diagnostics folder (`RunPaths.guard_capture`), where the escalation bundle and the
report find it.

What is kept, and what is not: the inputs only as per-row sha256 prefixes, lengths and loss-token
counts plus where they came from (dataset, sample range): never token ids or text, since a
capture travels into bundles and tickets that the data's licence may not reach. Per parameter
(this rank's shard of it under FSDP2/TP): shape, dtype, L2 norm, max |x| and the count of
non-finite values, of the weights and of their gradients. Then the learning rate, the
precision, and library versions. Bounded: at most MAX_ROWS rows and MAX_PARAMETERS parameters
are listed (the rest are counted), so a capture of a large model stays near MAX_BYTES. torch is
imported on use, so `runwright.runtime` stays importable without it.
"""

import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runwright.ckpt.storage import replace_file
from runwright.events import EventType
from runwright.layout import RunPaths

if TYPE_CHECKING:
    import torch

    from runwright.runtime.context import RunContext

MAX_ROWS = 256
"""Input rows summarised; a rank's batch is rarely larger, and the rest are counted."""
MAX_PARAMETERS = 1024
"""Parameters listed: every layer of a model of a few hundred blocks; the rest are counted."""
MAX_BYTES = 1 << 20
"""About 1 MiB: 1024 parameters x 2 x ~200 bytes of figures, plus 256 rows x ~100 bytes."""
MAX_CAPTURES = 32
"""Captures per rank and generation: a loss-spike guard on `skip` may trip at every step of a
bad stretch, and the first trips say what the later ones would."""
HASH_HEX = 16
"""64 bits of sha256 per row: enough to match a row against the dataset, not to read it."""


def tensor_stats(value: "torch.Tensor") -> dict[str, Any]:
    """L2 norm, max |x| and non-finite count of one tensor (a DTensor's local shard)."""
    import torch

    local = value.to_local() if hasattr(value, "to_local") else value
    data = local.detach().float()
    finite = torch.isfinite(data)
    nonfinite = int(data.numel() - int(finite.sum()))
    clean = torch.where(finite, data, torch.zeros_like(data))
    return {
        "norm": _number(torch.linalg.vector_norm(clean)),
        "max_abs": _number(clean.abs().max()) if clean.numel() else 0.0,
        "nonfinite": nonfinite,
    }


def parameter_stats(named: "Iterable[tuple[str, torch.nn.Parameter]]") -> dict[str, Any]:
    """Per parameter: shape, dtype, the weight's stats and its gradient's (None when absent)."""
    listed: dict[str, Any] = {}
    left_out = 0
    for name, param in named:
        if len(listed) >= MAX_PARAMETERS:
            left_out += 1
            continue
        listed[name] = {
            "shape": list(param.shape),
            "dtype": str(param.dtype).removeprefix("torch."),
            "weight": tensor_stats(param),
            "grad": tensor_stats(param.grad) if param.grad is not None else None,
        }
    return {"parameters": listed, "parameters_left_out": left_out}


def input_summary(
    tokens: "torch.Tensor",
    *,
    loss_mask: "torch.Tensor | None" = None,
    segment_ids: "torch.Tensor | None" = None,
    sources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Per row: a sha256 prefix of its token bytes, its length (non-padding tokens) and its
    loss tokens; with `sources` (dataset id, sample range). No token id is written."""
    rows = tokens.detach().cpu().reshape(tokens.shape[0], -1) if tokens.dim() else tokens
    summary = []
    for i in range(min(rows.shape[0], MAX_ROWS)):
        row = rows[i].contiguous()
        length = int((segment_ids[i] != 0).sum()) if segment_ids is not None else int(row.numel())
        summary.append(
            {
                "sha256": hashlib.sha256(row.numpy().tobytes()).hexdigest()[:HASH_HEX],
                "length": length,
                "loss_tokens": int(loss_mask[i].sum()) if loss_mask is not None else None,
            }
        )
    return {
        "rows": summary,
        "rows_left_out": max(0, rows.shape[0] - MAX_ROWS),
        "sequence_length": int(rows.shape[1]) if rows.dim() == 2 else None,
        "sources": dict(sources or {}),
    }


def library_versions() -> dict[str, str | None]:
    import numpy
    import torch

    import runwright

    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "runwright": runwright.__version__,
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        nccl = torch.cuda.nccl.version()
        versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    return versions


def capture_record(
    *,
    guard: str,
    step: int,
    rank: int,
    generation: int,
    model: "torch.nn.Module",
    inputs: dict[str, Any],
    lr: float | None,
    precision: str,
    figures: Mapping[str, Any],
) -> dict[str, Any]:
    """The capture as a JSON-ready dict, trimmed to MAX_BYTES (parameters go first, then rows)."""
    record = {
        "guard": guard,
        "step": step,
        "rank": rank,
        "generation": generation,
        "written_unix_s": time.time(),
        "figures": {k: _plain(v) for k, v in figures.items()},
        "learning_rate": lr,
        "precision": precision,
        "versions": library_versions(),
        "host": platform.node(),
        "pid": os.getpid(),
        "argv0": sys.argv[0] if sys.argv else None,
        "inputs": inputs,
        **parameter_stats(model.named_parameters()),
    }
    while len(json.dumps(record)) > MAX_BYTES and record["parameters"]:
        names = list(record["parameters"])
        keep = names[: len(names) // 2]
        record["parameters_left_out"] += len(names) - len(keep)
        record["parameters"] = {n: record["parameters"][n] for n in keep}
    return record


def capture_guard_trip(
    ctx: "RunContext",
    step: int,
    guard: str,
    *,
    model: "torch.nn.Module",
    inputs: dict[str, Any],
    lr: float | None,
    precision: str,
    **figures: Any,
) -> Path | None:
    """Write this rank's capture of `step` (refused by `guard`: `nan_inf` or `loss_spike`) and
    report GUARD_CAPTURED; returns the file, or None once this rank wrote MAX_CAPTURES in
    this generation. Called on every rank before the guard acts."""
    paths = RunPaths(ctx.run_dir)
    if len(paths.guard_captures(ctx.generation, ctx.rank)) >= MAX_CAPTURES:
        return None
    path = paths.guard_capture(ctx.generation, step, ctx.rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = capture_record(
        guard=guard,
        step=step,
        rank=ctx.rank,
        generation=ctx.generation,
        model=model,
        inputs=inputs,
        lr=lr,
        precision=precision,
        figures=figures,
    )
    data = json.dumps(record, indent=1).encode()
    replace_file(path, data, action="write of a guard capture")
    ctx.report(EventType.GUARD_CAPTURED, key=f"capture-{step}-r{ctx.rank}", step=step,
               guard=guard, path=str(path), bytes=len(data), rank=ctx.rank)  # fmt: skip
    return path


def _number(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _plain(value: Any) -> Any:
    """A figure as JSON takes it: tensors as floats, non-finite numbers as their name."""
    import torch

    if isinstance(value, torch.Tensor):
        value = float(value.detach())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
