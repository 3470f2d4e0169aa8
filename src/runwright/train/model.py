"""A small decoder-only transformer (GPT-2 shaped, as in nanoGPT) sized by the spec's model
section.

Packed rows hold several documents; attention is masked to each document (segment ids) and
positions restart at every document (position ids from the loader), so a packed row trains the
same as its documents would alone.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from runwright.spec import ModelSpec


class Block(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h = spec.d_model
        self.head_dim = h // spec.n_heads
        self.ln_1 = nn.LayerNorm(h)
        # Separate projections (not one fused qkv) so tensor parallelism can shard each by
        # heads with a plain ColwiseParallel: rank r holds heads r*n/tp .. (r+1)*n/tp - 1 of
        # q, k and v alike (train/layouts.py). The HF export concatenates them (ckpt/hf_gpt2.py).
        self.q = nn.Linear(h, h)
        self.k = nn.Linear(h, h)
        self.v = nn.Linear(h, h)
        self.proj = nn.Linear(h, h)
        self.ln_2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, spec.ffn_size)
        self.fc_out = nn.Linear(spec.ffn_size, h)
        self.dropout = spec.dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        a = self.ln_1(x)
        q, k, v = self.q(a), self.k(a), self.v(a)
        # The heads this rank holds: all of them, or n_heads / tp under tensor parallelism.
        heads = q.shape[-1] // self.head_dim
        # (B, T, heads x head_dim) -> (B, heads, T, head_dim)
        q, k, v = (z.view(b, t, heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, heads * self.head_dim))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, spec: ModelSpec, max_positions: int) -> None:
        super().__init__()
        self.spec = spec
        self.wte = nn.Embedding(spec.vocab_size, spec.d_model)
        self.wpe = nn.Embedding(max_positions, spec.d_model)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        self.ln_f = nn.LayerNorm(spec.d_model)
        self.apply(self._init)
        # GPT-2's scaled init of residual projections: std 0.02 / sqrt(2 * layers).
        for name, p in self.named_parameters():
            if name.endswith(("proj.weight", "fc_out.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * spec.n_layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(
        self, tokens: torch.Tensor, position_ids: torch.Tensor, segment_ids: torch.Tensor
    ) -> torch.Tensor:
        """Logits (B, T, V). The output layer shares the token embedding (weight tying)."""
        t = tokens.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        same_doc = segment_ids.unsqueeze(2) == segment_ids.unsqueeze(1)
        mask = (causal & same_doc).unsqueeze(1)  # (B, 1, T, T): broadcast over heads
        x = self.wte(tokens) + self.wpe(position_ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.ln_f(x) @ self.wte.weight.T
