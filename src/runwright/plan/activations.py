"""Activation memory of a transformer layer, from Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", section 4 and Table 2.

With s the sequence length, b the micro-batch, h the hidden size, a the heads and t the
tensor-parallel degree, 16-bit activations and 1-byte dropout masks, one layer stores

    attention block   11 sbh + 5 as^2 b   (QKV input 2sbh, Q and K 4sbh, softmax output
                                          2as^2b, its dropout mask as^2b, dropout output
                                          2as^2b, V 2sbh, out-proj input 2sbh, mask sbh)
    MLP block         19 sbh              (input 2sbh, GeLU input 8sbh, GeLU output 8sbh,
                                          dropout mask sbh)
    two LayerNorms     4 sbh
    ---------------------------------------------------------------
    total             sbh (34 + 5as/h) bytes

and Table 2 gives the variants:

    no parallelism                         sbh (34 + 5as/h)
    tensor parallel                        sbh (10 + 24/t + 5as/(ht))
    tensor + sequence parallel             sbh (34/t + 5as/(ht))
    tensor parallel + selective recompute  sbh (10 + 24/t)
    tensor + sequence + selective          sbh (34/t)
    full recompute                         sbh (2)

The 10 sbh that plain tensor parallelism replicates are the LayerNorm inputs (4sbh), the
inputs of the first linear layers (2sbh + 2sbh) and the two dropout masks (sbh + sbh).
"""

import math
from enum import StrEnum

from runwright.plan.errors import PlanError


class Recompute(StrEnum):
    """Which activations the backward pass recomputes instead of storing."""

    NONE = "none"
    SELECTIVE = "selective"
    """Recompute the attention core (QK^T, softmax, dropout, attention over V): drops 5as/h."""
    FULL = "full"
    """Store only each layer's input (2sbh) and rerun the whole layer forward."""


def activation_bytes_per_layer(
    sequence_length: int,
    micro_batch_size: int,
    d_model: int,
    n_heads: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = Recompute.NONE,
) -> float:
    """Bytes one transformer layer keeps for backward on one device (Table 2)."""
    s, b, h, a, t = sequence_length, micro_batch_size, d_model, n_heads, tp
    if min(s, b, h, a, t) < 1:
        raise PlanError(
            "sequence_length, micro_batch_size, d_model, n_heads and tp must all be at least 1"
        )
    sbh = s * b * h
    if recompute is Recompute.FULL:
        return 2.0 * sbh
    scores = 0.0 if recompute is Recompute.SELECTIVE else 5.0 * a * s / (h * t)
    if sequence_parallel:
        return sbh * (34.0 / t + scores)
    return sbh * (10.0 + 24.0 / t + scores)


def activation_bytes_per_device(
    per_layer_bytes: float, n_layers: int, pp: int = 1, microbatches: int | None = None
) -> float:
    """Activation bytes on the most loaded pipeline stage.

    Under the 1F1B schedule the first stage holds the activations of up to pp micro-batches,
    each for its ceil(L / pp) layers, so about L layers' worth whatever pp is (Korthikanti
    et al. 2022, section 4, pipeline parallelism). With fewer micro-batches per step than
    stages, only those are in flight. The paper's separate input-embedding and output-layer
    terms are not counted.
    """
    if n_layers < 1 or pp < 1:
        raise PlanError(f"n_layers={n_layers} and pp={pp} must both be at least 1")
    in_flight = pp if microbatches is None else min(pp, microbatches)
    if in_flight < 1:
        raise PlanError(f"microbatches={microbatches} must be at least 1")
    return per_layer_bytes * math.ceil(n_layers / pp) * in_flight
