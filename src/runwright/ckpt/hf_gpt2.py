"""The reference GPT (`runwright.train.model.GPT`) as Hugging Face transformers' GPT-2: its
config.json and its weights under `GPT2LMHeadModel`'s names and layouts.

The reference GPT is GPT-2 shaped (nanoGPT), so it maps one to one:

| runwright (`--format runwright`) | GPT-2 (`transformer.` + ...) | layout |
|---|---|---|
| `wte.weight` (V, H) | `wte.weight` | same; `lm_head` is tied to it in both |
| `wpe.weight` (T, H) | `wpe.weight` | same; `n_positions` = T (`data.sequence_length`) |
| `blocks.N.ln_1`, `ln_2`; `ln_f` | `h.N.ln_1`, `ln_2`; `ln_f` | same; LayerNorm eps 1e-5 |
| `blocks.N.{q,k,v}.weight` (H, H) | `h.N.attn.c_attn.weight` (H, 3H) | stacked, transposed |
| `blocks.N.proj.weight` (H, H) | `h.N.attn.c_proj.weight` | transposed |
| `blocks.N.fc.weight` (F, H) | `h.N.mlp.c_fc.weight` (H, F) | transposed |
| `blocks.N.fc_out.weight` (H, F) | `h.N.mlp.c_proj.weight` (F, H) | transposed |

GPT-2's Conv1D stores its weight as (in, out) and computes x @ W + b; nn.Linear stores (out, in).

Biases keep their shapes (q, k and v's concatenated). q, k and v lie in that order along c_attn's
output, as c_attn splits them;
attention is scaled by 1/sqrt(head dim) in both (`scale_attn_weights`); the MLP uses exact GELU
(`activation_function: gelu`, not GPT-2's tanh approximation `gelu_new`); dropout is applied to
attention weights only (`attn_pdrop`; `resid_pdrop` and `embd_pdrop` are 0).

What does not map is refused, never exported wrong: weights that are not exactly the reference
GPT's names and shapes for the spec's model section (a script's own model, a GPT of another size
than the spec says) are refused with the first differences named. What maps only in part is said
in the release's notes (`NOTES`): the training model masks attention to each document of a
packed row and restarts positions at each document; GPT-2 attends over its whole input.
"""

from collections.abc import Mapping

import torch

from runwright.ckpt.errors import CheckpointError
from runwright.spec import ModelSpec

HF_PREFIX = "transformer."
LAYER_NORM_EPSILON = 1e-5
"""torch.nn.LayerNorm's default, which the reference GPT uses, and GPT2Config's default."""
NOTES = (
    "packed rows: the training model attends within each document of a packed row and restarts "
    "positions at each document; GPT-2 attends over its whole input, so give it one document "
    "per sequence (the logits are then the same)",
)
"""What maps only in part, written into every hf-gpt2 release."""

_BLOCK = {
    # runwright name in a block -> (GPT-2 name in h.N, transposed)
    "ln_1.weight": ("ln_1.weight", False),
    "ln_1.bias": ("ln_1.bias", False),
    "qkv.weight": ("attn.c_attn.weight", True),  # q, k and v concatenated (_ATTENTION)
    "qkv.bias": ("attn.c_attn.bias", False),
    "proj.weight": ("attn.c_proj.weight", True),
    "proj.bias": ("attn.c_proj.bias", False),
    "ln_2.weight": ("ln_2.weight", False),
    "ln_2.bias": ("ln_2.bias", False),
    "fc.weight": ("mlp.c_fc.weight", True),
    "fc.bias": ("mlp.c_fc.bias", False),
    "fc_out.weight": ("mlp.c_proj.weight", True),
    "fc_out.bias": ("mlp.c_proj.bias", False),
}
_ATTENTION = ("q", "k", "v")
"""The reference GPT's separate projections that GPT-2's c_attn holds as one, in its order."""
_TOP = ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias")
_MAX_LISTED = 5


class UnmappableModelError(CheckpointError):
    """The checkpoint's model is not one GPT-2 can load; the message names what differs."""


def expected_shapes(model: ModelSpec, n_positions: int) -> dict[str, tuple[int, ...]]:
    """Every parameter of the reference GPT for `model` and its shape (runwright's names,
    without the checkpoint's `model.` prefix)."""
    h, f, v = model.d_model, model.ffn_size, model.vocab_size
    block = {
        "ln_1.weight": (h,),
        "ln_1.bias": (h,),
        **{f"{p}.weight": (h, h) for p in _ATTENTION},
        **{f"{p}.bias": (h,) for p in _ATTENTION},
        "proj.weight": (h, h),
        "proj.bias": (h,),
        "ln_2.weight": (h,),
        "ln_2.bias": (h,),
        "fc.weight": (f, h),
        "fc.bias": (f,),
        "fc_out.weight": (h, f),
        "fc_out.bias": (h,),
    }
    shapes = {"wte.weight": (v, h), "wpe.weight": (n_positions, h)}
    for layer in range(model.n_layers):
        shapes |= {f"blocks.{layer}.{name}": shape for name, shape in block.items()}
    return shapes | {"ln_f.weight": (h,), "ln_f.bias": (h,)}


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


def mapping_problems(
    shapes: Mapping[str, tuple[int, ...]], model: ModelSpec, n_positions: int
) -> list[str]:
    """Why weights with these names and shapes are not the reference GPT of `model` with
    `n_positions` positions (empty when they are). Pure: reads shapes only, so a caller can
    decide before it loads a byte."""
    if model.architecture != "gpt":
        return [f"model.architecture is {model.architecture!r}; GPT-2 is the `gpt` architecture"]
    expected = expected_shapes(model, n_positions)
    missing = [name for name in expected if name not in shapes]  # in the model's order
    extra = sorted(set(shapes) - set(expected))
    wrong = [
        f"{name} is {tuple(shapes[name])}, the spec's model makes {expected[name]}"
        for name in expected
        if name in shapes and tuple(shapes[name]) != expected[name]
    ]
    problems = []
    if missing:
        problems.append(f"no {_listed(missing)} (the reference GPT has them)")
    if extra:
        problems.append(f"{_listed(extra)} have no place in GPT-2")
    if wrong:
        problems.append("; ".join(wrong[:_MAX_LISTED]))
    return problems


def gpt2_config(
    model: ModelSpec, n_positions: int, eod_token_id: int | None, dtype: torch.dtype
) -> dict[str, object]:
    """config.json for `transformers.GPT2Config` / `GPT2LMHeadModel.from_pretrained`."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": model.vocab_size,
        "n_positions": n_positions,
        "n_embd": model.d_model,
        "n_layer": model.n_layers,
        "n_head": model.n_heads,
        "n_inner": model.ffn_size,
        "activation_function": "gelu",
        "layer_norm_epsilon": LAYER_NORM_EPSILON,
        "attn_pdrop": model.dropout,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "summary_first_dropout": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": eod_token_id,
        "eos_token_id": eod_token_id,
        "dtype": str(dtype).removeprefix("torch."),
    }


def gpt2_weights(
    weights: Mapping[str, torch.Tensor], model: ModelSpec, n_positions: int
) -> dict[str, torch.Tensor]:
    """`weights` (runwright's names, no `model.` prefix) under GPT2LMHeadModel's names and
    layouts; `lm_head.weight` is left out, as transformers saves a tied head. Raises
    `UnmappableModelError` when they are not the reference GPT of `model`."""
    problems = mapping_problems({k: tuple(v.shape) for k, v in weights.items()}, model, n_positions)
    if problems:
        raise UnmappableModelError(
            "the checkpoint's model does not map onto GPT-2: " + "; ".join(problems)
        )
    out = {HF_PREFIX + name: weights[name].contiguous() for name in _TOP}
    for layer in range(model.n_layers):
        for name, (target, transposed) in _BLOCK.items():
            stem, kind = name.split(".")
            parts = _ATTENTION if stem == "qkv" else (stem,)
            tensor = torch.cat([weights[f"blocks.{layer}.{p}.{kind}"] for p in parts])
            out[f"{HF_PREFIX}h.{layer}.{target}"] = (
                tensor.t() if transposed else tensor
            ).contiguous()
    return out
