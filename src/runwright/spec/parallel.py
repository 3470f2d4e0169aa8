"""The parallel layout a spec asks for, as one dict, and what no runwright trainer can run.

`parallel_layout` is what a checkpoint records (`CheckpointManifest.parallel_layout`) and what a
restore compares against: the trainer, the runtime's checkpointer and the resume preflight all
read it here, so "same layout" means the same thing to each. `dp_shard` tells a data-parallel
replica (DDP: 1) from a shard (FSDP2: the dp degree), as torchtitan's `data_parallel_shard_degree`
does; a checkpoint of one restores into the other through DCP resharding.

`layout_problems` is checked when the spec is validated, so a layout that cannot run is refused
at submit with the reason instead of being accepted and breaking in the trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runwright.spec.job import JobSpec


def parallel_layout(spec: JobSpec, dp: int | None = None) -> dict[str, int]:
    """{"dp", "dp_shard", "tp", "pp"} degrees; dp is the plan's (world size / (tp x pp x ep)),
    or `dp` where the run resolved its plan at another size (an elastic run, spec/elastic.py)."""
    dp = int(spec.plan.dp.value or 1) if dp is None else dp
    par = spec.parallelism
    return {"dp": dp, "dp_shard": dp if par.dp_mode == "fsdp2" else 1, "tp": par.tp, "pp": par.pp}


def layout_problems(spec: JobSpec) -> list[str]:
    """Why the spec's layout and precision cannot run (empty when they can); each names the field
    and the change that fixes it."""
    par, model, training = spec.parallelism, spec.model, spec.training
    problems = []
    if model.n_heads % par.tp:
        valid = [d for d in range(1, model.n_heads + 1) if model.n_heads % d == 0]
        problems.append(
            f"parallelism.tp={par.tp} must divide model.n_heads={model.n_heads}: tensor "
            f"parallelism gives each rank whole heads; valid tp: {valid}"
        )
    if model.ffn_size % par.tp:
        problems.append(
            f"parallelism.tp={par.tp} must divide the feed-forward size {model.ffn_size} "
            "(model.d_ff, default 4 x d_model): tensor parallelism splits it evenly"
        )
    dp = int(spec.plan.dp.value or 1)
    if par.tp > 1 and dp > 1 and par.dp_mode == "ddp":
        problems.append(
            f"parallelism.tp={par.tp} with dp={dp} needs parallelism.dp_mode: fsdp2 (a dp x tp "
            "mesh: FSDP2 over dp, tensor parallel inside each dp group); DDP does not wrap "
            "tensor-parallel modules"
        )
    if par.ep > 1:
        problems.append(
            f"parallelism.ep={par.ep}: model.architecture {model.architecture!r} has no experts "
            "to place; set ep: 1"
        )
    if training.precision == "fp16" and spec.resources.device_type != "cuda":
        problems.append(
            "training.precision=fp16 needs resources.device_type: cuda (fp16's narrow range "
            "needs the gradient scaler, which the trainer runs on GPUs only); on CPU set "
            "training.precision: bf16 (fp32's range, no scaler) or fp32"
        )
    return problems
