"""The parallel layout search: enumerate (dp, tp, pp) for a world size, reject what cannot run,
and rank the rest by an estimated step time (seed 000, 8.3 "parallelism search").

Constraints, each with the reason it is reported:
- tp stays inside one node's fast interconnect (tensor-parallel collectives run every layer,
  Shoeybi et al. 2019) and divides the node, so no group straddles two nodes;
- tp divides n_heads (each rank owns whole heads); pp divides n_layers (equal stages);
- the global batch splits into whole micro-batches per data-parallel rank;
- the memory ledger fits the device with its headroom.

Step time, with no overlap of communication and compute (an upper bound to compare layouts
by, not a prediction; measure the best candidates):
- compute = model FLOPs per step / (world x peak x MFU), FLOPs from PaLM Appendix B;
- pipeline bubble = compute x (pp - 1) / m for m micro-batches per step (Narayanan et al.
  2021, section 2.2, 1F1B);
- data parallel: one ring all-reduce of the gradients; ZeRO-3 instead reduce-scatters the
  gradients and all-gathers the parameters in forward and again in backward, 1.5x the volume
  (Rajbhandari et al. 2020, section 7);
- tensor parallel: 2 all-reduces of the b x s x h activation per layer in forward and 2 in
  backward (Shoeybi et al. 2019, section 3), 2 more when full recomputation reruns forward;
  sequence parallelism swaps each for an all-gather plus reduce-scatter of equal volume
  (Korthikanti et al. 2022);
- pipeline: 2 boundary messages per micro-batch, split over the tp ranks (Narayanan et al.
  2021, section 4.1, scatter/gather optimisation).

Ranks are ordered tp fastest, then dp, then pp (Megatron-LM's default), so a tp group spans
tp consecutive ranks, a dp group tp x dp and a pipeline the whole world; a group whose span
fits in one node uses the intra-node link, otherwise the inter-node one.
"""

import math

from pydantic import Field

from runwright.plan.activations import (
    Recompute,
    activation_bytes_per_device,
    activation_bytes_per_layer,
)
from runwright.plan.base import GIB, Record
from runwright.plan.comm import Collective, Link, collective_cost, pipeline_boundary_cost
from runwright.plan.errors import PlanError
from runwright.plan.memory import (
    MIXED_PRECISION_ADAM,
    MemoryLedger,
    StateBytes,
    ZeroStage,
    memory_ledger,
)
from runwright.plan.model import model_flops_per_token, parameters_per_device
from runwright.spec import ModelSpec

ACTIVATION_BYTES = 2
"""Bytes per activation element on the wire (fp16/bf16)."""


class Cluster(Record):
    """The devices a layout is searched for."""

    world_size: int = Field(ge=1)
    """Devices in the run."""
    devices_per_node: int = Field(ge=1)
    """Devices sharing one node's fast interconnect."""
    device_memory_bytes: int = Field(ge=1)
    """Memory of one device."""
    peak_flops_per_device: float = Field(gt=0)
    """Declared peak FLOP/s of one device (datasheet, at the training dtype)."""
    headroom_fraction: float = Field(default=0.1, ge=0, lt=1)
    """Share of device memory kept free for what the ledger does not model."""
    same_node_tp: bool = True
    """Keep each tensor-parallel group inside one node."""
    intra_node: Link = Field(
        default_factory=lambda: Link(latency_seconds=5e-6, bandwidth_bytes_per_second=150e9)
    )
    """Link inside a node (e.g. NVLink)."""
    inter_node: Link = Field(
        default_factory=lambda: Link(latency_seconds=10e-6, bandwidth_bytes_per_second=25e9)
    )
    """Link between nodes (e.g. one 200 Gb/s NIC per device)."""


class Workload(Record):
    """What is trained: the model, batch and memory-saving choices."""

    model: ModelSpec
    """The model to place."""
    sequence_length: int = Field(ge=1)
    """Tokens per sequence (s)."""
    global_batch_samples: int = Field(ge=1)
    """Sequences per optimizer step across all data-parallel ranks."""
    micro_batch_size: int = Field(default=1, ge=1)
    """Sequences per rank per forward pass (b)."""
    zero_stage: ZeroStage = ZeroStage.NONE
    """ZeRO stage over the data-parallel group."""
    recompute: Recompute = Recompute.NONE
    """Activation recomputation."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism inside tensor-parallel groups."""
    state: StateBytes = MIXED_PRECISION_ADAM
    """Model-state bytes per parameter."""
    buffers_bytes: float = Field(default=0.0, ge=0)
    """Declared per-device buffers added to the memory ledger."""
    mfu: float = Field(default=0.4, gt=0, le=1)
    """Assumed model FLOPs utilisation; set it from a measured run."""


class Layout(Record):
    """One parallel layout; dp x tp x pp is the world size."""

    dp: int
    """Data-parallel degree."""
    tp: int
    """Tensor-parallel degree."""
    pp: int
    """Pipeline-parallel degree."""


class LayoutEstimate(Record):
    """A layout that can run, with its memory and estimated step time."""

    layout: Layout
    """The layout."""
    microbatches: int
    """Micro-batches per step per pipeline (m)."""
    memory: MemoryLedger
    """Memory ledger of the most loaded device."""
    compute_seconds: float
    """Model FLOPs per step / (world x peak x MFU)."""
    bubble_seconds: float
    """Pipeline bubble: compute x (pp - 1) / m."""
    dp_comm_seconds: float
    """Gradient (and ZeRO-3 parameter) collectives per step."""
    tp_comm_seconds: float
    """Tensor-parallel activation collectives per step."""
    pp_comm_seconds: float
    """Pipeline boundary transfers per step."""
    step_seconds: float
    """Sum of the above: no overlap assumed."""


class Rejection(Record):
    """A layout that cannot run, and every reason why."""

    layout: Layout
    """The layout."""
    reasons: list[str]
    """What rules it out, each saying what would have to change."""


class ParallelSearch(Record):
    """The outcome of a layout search."""

    accepted: list[LayoutEstimate]
    """Layouts that can run, fastest estimated step first."""
    rejected: list[Rejection]
    """Layouts that cannot, with reasons."""
    assumptions: str
    """What the step-time estimate assumes."""


ASSUMPTIONS = (
    "step time = compute at the declared peak x MFU + 1F1B bubble + ring collectives with no "
    "overlap; ranks ordered tp, dp, pp; expert parallelism not searched (dense model): ep = 1"
)


def _divisors(n: int) -> list[int]:
    """Divisors of n, ascending, in O(sqrt(n)) steps: a world size from a spec may be 2**26
    (spec/limits.py), and the search calls this once per tp."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


def _link(span_ranks: int, cluster: Cluster) -> Link:
    return cluster.intra_node if span_ranks <= cluster.devices_per_node else cluster.inter_node


def _structural_reasons(layout: Layout, cluster: Cluster, work: Workload) -> list[str]:
    model, reasons = work.model, []
    node = cluster.devices_per_node
    if cluster.same_node_tp and layout.tp > node:
        reasons.append(
            f"tp={layout.tp} exceeds the {node} devices of one node: tensor-parallel "
            "collectives run every layer and need the in-node interconnect"
        )
    elif cluster.same_node_tp and node % layout.tp:
        reasons.append(
            f"tp={layout.tp} does not divide devices_per_node={node}: some tensor-parallel "
            "groups would straddle two nodes"
        )
    if model.n_heads % layout.tp:
        reasons.append(
            f"tp={layout.tp} does not divide n_heads={model.n_heads}: each rank needs whole "
            "attention heads"
        )
    if model.n_layers % layout.pp:
        reasons.append(
            f"pp={layout.pp} does not divide n_layers={model.n_layers}: stages would hold "
            "unequal numbers of layers"
        )
    per_step = layout.dp * work.micro_batch_size
    if work.global_batch_samples % per_step:
        reasons.append(
            f"global batch {work.global_batch_samples} samples is not a multiple of dp "
            f"{layout.dp} x micro-batch {work.micro_batch_size} = {per_step}"
        )
    return reasons


def layout_memory(layout: Layout, cluster: Cluster, work: Workload) -> MemoryLedger:
    """Memory ledger of the most loaded device of a layout."""
    microbatches = work.global_batch_samples // (layout.dp * work.micro_batch_size)
    per_layer = activation_bytes_per_layer(
        work.sequence_length,
        work.micro_batch_size,
        work.model.d_model,
        work.model.n_heads,
        layout.tp,
        work.sequence_parallel,
        work.recompute,
    )
    return memory_ledger(
        parameters_per_device(work.model, layout.tp, layout.pp),
        activations_bytes=activation_bytes_per_device(
            per_layer, work.model.n_layers, layout.pp, max(1, microbatches)
        ),
        dp=layout.dp,
        zero_stage=work.zero_stage,
        state=work.state,
        buffers_bytes=work.buffers_bytes,
        device_memory_bytes=cluster.device_memory_bytes,
        headroom_fraction=cluster.headroom_fraction,
    )


def estimate_layout(layout: Layout, cluster: Cluster, work: Workload) -> LayoutEstimate:
    """Memory and step-time estimate of a layout that passed the structural checks."""
    model, b, s = work.model, work.micro_batch_size, work.sequence_length
    m = work.global_batch_samples // (layout.dp * b)
    memory = layout_memory(layout, cluster, work)
    tokens_per_step = work.global_batch_samples * s
    flops_per_step = model_flops_per_token(model, s) * tokens_per_step
    compute = flops_per_step / (cluster.world_size * cluster.peak_flops_per_device * work.mfu)
    bubble = compute * (layout.pp - 1) / m
    params = memory.parameters_per_device
    dp_link = _link(layout.tp * layout.dp, cluster)
    grads = work.state.gradient_bytes * params
    if work.zero_stage is ZeroStage.PARAMETERS:
        weights = work.state.parameter_bytes * params
        dp_comm = (
            collective_cost(Collective.REDUCE_SCATTER, grads, layout.dp, dp_link).seconds
            + 2 * collective_cost(Collective.ALL_GATHER, weights, layout.dp, dp_link).seconds
        )
    else:
        dp_comm = collective_cost(Collective.ALL_REDUCE, grads, layout.dp, dp_link).seconds
    activation = b * s * model.d_model * ACTIVATION_BYTES
    per_layer_collectives = 6 if work.recompute is Recompute.FULL else 4
    tp_calls = per_layer_collectives * math.ceil(model.n_layers / layout.pp) * m
    tp_link = _link(layout.tp, cluster)
    tp_comm = (
        tp_calls * collective_cost(Collective.ALL_REDUCE, activation, layout.tp, tp_link).seconds
    )
    pp_link = _link(cluster.world_size, cluster)
    pp_comm = pipeline_boundary_cost(activation / layout.tp, layout.pp, m, pp_link).seconds
    return LayoutEstimate(
        layout=layout,
        microbatches=m,
        memory=memory,
        compute_seconds=compute,
        bubble_seconds=bubble,
        dp_comm_seconds=dp_comm,
        tp_comm_seconds=tp_comm,
        pp_comm_seconds=pp_comm,
        step_seconds=compute + bubble + dp_comm + tp_comm + pp_comm,
    )


def search_layouts(cluster: Cluster, work: Workload) -> ParallelSearch:
    """Every (dp, tp, pp) with dp x tp x pp = world size, accepted and ranked or rejected."""
    node = cluster.devices_per_node
    if cluster.world_size > node and cluster.world_size % node:
        raise PlanError(
            f"world_size={cluster.world_size} is not a whole number of nodes of {node} "
            "devices; give nodes x devices_per_node"
        )
    accepted: list[LayoutEstimate] = []
    rejected: list[Rejection] = []
    for tp in _divisors(cluster.world_size):
        for pp in _divisors(cluster.world_size // tp):
            layout = Layout(dp=cluster.world_size // (tp * pp), tp=tp, pp=pp)
            reasons = _structural_reasons(layout, cluster, work)
            if reasons:
                rejected.append(Rejection(layout=layout, reasons=reasons))
                continue
            estimate = estimate_layout(layout, cluster, work)
            if not estimate.memory.fits:
                ledger = estimate.memory
                rejected.append(
                    Rejection(
                        layout=layout,
                        reasons=[
                            f"needs {ledger.total_bytes / GIB:.1f} GiB per device, more than "
                            f"the {(ledger.usable_bytes or 0) / GIB:.1f} GiB usable "
                            f"({cluster.device_memory_bytes / GIB:.1f} GiB less "
                            f"{100 * cluster.headroom_fraction:.0f}% headroom); raise the "
                            "ZeRO stage, tp or pp, or recompute activations"
                        ],
                    )
                )
                continue
            accepted.append(estimate)
    accepted.sort(key=lambda e: (e.step_seconds, e.memory.total_bytes))
    return ParallelSearch(accepted=accepted, rejected=rejected, assumptions=ASSUMPTIONS)
