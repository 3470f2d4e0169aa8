"""The collective byte ledger: bytes each rank sends and an alpha-beta time for ring
collectives and pipeline boundary transfers.

Ring collectives over D ranks with a per-rank payload of G bytes split into D equal chunks
(Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
workstations"; Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
operations in MPICH", section 3; seed 000, 8.3 "collective byte ledger"):

    reduce-scatter   D-1 rounds, each sends G/D     -> (D-1) G / D bytes
    all-gather       D-1 rounds, each sends G/D     -> (D-1) G / D bytes
    all-reduce       reduce-scatter + all-gather     -> 2 (D-1) G / D bytes
    all-to-all       pairwise exchange, D-1 rounds  -> (D-1) G / D bytes

With alpha the start-up latency of one round and beta the effective link bandwidth, a round
of n bytes costs alpha + n / beta, so all-reduce takes 2(D-1) alpha + 2(D-1) G / (D beta).
Bytes received are not counted. D = 1 costs nothing. This ledger assumes the ring (or
pairwise) algorithm; NCCL may pick a tree or another algorithm, so treat it as an estimate to
compare against a profile, not a prediction of every NCCL algorithm.
"""

from enum import StrEnum

from pydantic import Field

from runwright.plan.base import Record
from runwright.plan.errors import PlanError


class Collective(StrEnum):
    """A collective (or point-to-point) operation the ledger can price."""

    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"
    ALL_TO_ALL = "all-to-all"
    PIPELINE = "pipeline-boundary"


class Link(Record):
    """The alpha-beta model of the links a group communicates over."""

    latency_seconds: float = Field(default=10e-6, ge=0)
    """alpha: start-up time of one round (seconds)."""
    bandwidth_bytes_per_second: float = Field(default=25e9, gt=0)
    """beta: effective bandwidth one rank sends at (bytes per second)."""


class CollectiveCost(Record):
    """What one collective costs one rank."""

    collective: Collective
    """The operation."""
    ranks: int
    """Ranks in the group (D), or pipeline stages for a boundary transfer."""
    payload_bytes: float
    """G: the per-rank buffer the operation is named by (a boundary message's size)."""
    rounds: int
    """Communication rounds, each paying alpha once."""
    bytes_sent_per_rank: float
    """Bytes each rank sends (receives are not counted)."""
    seconds: float
    """alpha-beta estimate: rounds x alpha + bytes sent / beta."""


def _cost(kind: Collective, ranks: int, payload: float, rounds: int, sent: float, link: Link):
    seconds = rounds * link.latency_seconds + sent / link.bandwidth_bytes_per_second
    return CollectiveCost(
        collective=kind,
        ranks=ranks,
        payload_bytes=payload,
        rounds=rounds,
        bytes_sent_per_rank=sent,
        seconds=seconds,
    )


def _check(payload_bytes: float, ranks: int) -> None:
    if ranks < 1:
        raise PlanError(f"ranks={ranks} must be at least 1 (the group size D)")
    if payload_bytes < 0:
        raise PlanError(f"payload_bytes={payload_bytes} must be zero or more")


def collective_cost(
    kind: Collective, payload_bytes: float, ranks: int, link: Link | None = None
) -> CollectiveCost:
    """Bytes sent per rank and alpha-beta seconds of one ring collective over `ranks` ranks.

    For `Collective.PIPELINE` use `pipeline_boundary_cost`, which also needs the number of
    micro-batches.
    """
    link = link or Link()
    _check(payload_bytes, ranks)
    if kind is Collective.PIPELINE:
        return pipeline_boundary_cost(payload_bytes, ranks, 1, link)
    d, g = ranks, payload_bytes
    # One phase: D-1 rounds of G/D bytes each.
    phase_rounds = d - 1
    phase_bytes = (d - 1) * g / d
    phases = 2 if kind is Collective.ALL_REDUCE else 1
    return _cost(kind, d, g, phases * phase_rounds, phases * phase_bytes, link)


def pipeline_boundary_cost(
    message_bytes: float, stages: int, microbatches: int, link: Link | None = None
) -> CollectiveCost:
    """Point-to-point traffic of an interior pipeline stage in one optimizer step.

    Each micro-batch sends its boundary activation forward and receives it back as a gradient
    of the same size, which the stage then sends on to its predecessor (Narayanan et al. 2021,
    "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", section
    2.2): 2 messages of `message_bytes` per micro-batch, 2m in a step. One stage sends nothing.
    """
    link = link or Link()
    _check(message_bytes, stages)
    if microbatches < 1:
        raise PlanError(f"microbatches={microbatches} must be at least 1")
    if stages == 1:
        return _cost(Collective.PIPELINE, 1, message_bytes, 0, 0.0, link)
    messages = 2 * microbatches
    return _cost(
        Collective.PIPELINE, stages, message_bytes, messages, messages * message_bytes, link
    )


def collective_table(
    payload_bytes: float, ranks: int, link: Link | None = None, microbatches: int = 1
) -> list[CollectiveCost]:
    """Every operation the ledger knows, priced for one payload and group size."""
    link = link or Link()
    ring = [
        collective_cost(kind, payload_bytes, ranks, link)
        for kind in Collective
        if kind is not Collective.PIPELINE
    ]
    return [*ring, pipeline_boundary_cost(payload_bytes, ranks, microbatches, link)]
