"""What one model costs before any optimizer: parameters held per device under tensor and
pipeline parallelism, and training FLOPs per token.

The model is the reference decoder-only GPT of `runwright.spec.ModelSpec` (tied embedding,
biases, two LayerNorms per block, a final LayerNorm).
"""

import math

from runwright.plan.errors import PlanError
from runwright.spec import ModelSpec


def _check_degrees(model: ModelSpec, tp: int, pp: int) -> None:
    if tp < 1 or pp < 1:
        raise PlanError(f"tp={tp} and pp={pp} must both be at least 1")
    if model.n_heads % tp:
        raise PlanError(
            f"tp={tp} does not divide n_heads={model.n_heads}: tensor parallelism gives each "
            "rank whole attention heads; choose tp among the divisors of n_heads"
        )
    if pp > model.n_layers:
        raise PlanError(
            f"pp={pp} exceeds n_layers={model.n_layers}: every pipeline stage needs at least "
            "one transformer block"
        )


def parameters_per_device(model: ModelSpec, tp: int = 1, pp: int = 1) -> int:
    """Parameters held by the most loaded device (before any ZeRO sharding).

    Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019, section 3): the QKV and first
    MLP matrices are split by columns (with their biases), the attention output and second MLP
    matrices by rows, and the embedding by vocabulary rows; the row-parallel biases and the
    LayerNorms are replicated. Per block, with H = d_model and F = d_ff:

        split      = 4H^2 + 3H (QKV, out-proj) + 2HF + F (MLP)   -> divided by tp
        replicated = H (out-proj bias) + H (fc2 bias) + 4H (two LayerNorms)

    Pipeline parallelism places ceil(L / pp) blocks on the heaviest stage; with pp > 1 the
    last stage also holds the tied output embedding (Megatron keeps a copy there), so every
    stage that holds an embedding holds V*H / tp, and the last one the final LayerNorm (2H).
    """
    _check_degrees(model, tp, pp)
    h, f, v = model.d_model, model.ffn_size, model.vocab_size
    split_per_block = 4 * h * h + 3 * h + 2 * h * f + f
    replicated_per_block = 6 * h
    # Integer ceil of a per-rank share: tp divides n_heads, not necessarily every width.
    block_per_device = -(-split_per_block // tp) + replicated_per_block
    blocks_on_heaviest_stage = math.ceil(model.n_layers / pp)
    embedding_per_device = -(-v * h // tp)
    return blocks_on_heaviest_stage * block_per_device + embedding_per_device + 2 * h


def model_flops_per_token(model: ModelSpec, sequence_length: int) -> int:
    """Training FLOPs per token, forward and backward, without recomputation.

    PaLM (Chowdhery et al. 2022), Appendix B: 6N + 12 L H Q T, with N parameters, L layers,
    H heads, Q the head dimension and T the sequence length. 6N counts the weight matmuls
    (2 FLOPs per multiply-add forward, twice that backward); 12 L H Q T the attention-score and
    attention-over-values matmuls. N is the tied-embedding parameter count: the input lookup
    costs no FLOPs but the shared output projection does, so counting V*H once is exact.
    Recomputation is excluded on purpose: model FLOPs utilisation (MFU) counts only these.
    """
    if sequence_length < 1:
        raise PlanError(f"sequence_length={sequence_length} must be at least 1 token")
    head_dim = model.d_model // model.n_heads
    return (
        6 * model.parameter_count + 12 * model.n_layers * model.n_heads * head_dim * sequence_length
    )
