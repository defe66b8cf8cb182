"""A minimal BERT-style encoder with the shapes of all-MiniLM-L6-v2, random weights.

Shapes of sentence-transformers/all-MiniLM-L6-v2 (its config.json): hidden 384, 6 layers, 12 heads of
32, FFN 1536, GELU, vocabulary 30522, 512 positions. Module names follow
:func:`npukit.sim.minilm_l6` (``encoder.layer.<i>.attention.q_proj`` / ``k_proj`` / ``v_proj`` /
``output``, ``encoder.layer.<i>.intermediate``, ``encoder.layer.<i>.output``), not the Hugging Face
names (``attention.self.query`` ... ``output.dense``), so a trace lines up with the built-in workload
name for name. Attention is ``F.scaled_dot_product_attention``. No pooler, no attention mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    """Multi-head self-attention: q/k/v projections, scaled-dot-product attention, output projection."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

        ctx = F.scaled_dot_product_attention(split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)))
        return self.output(ctx.transpose(1, 2).reshape(b, s, h))


class EncoderLayer(nn.Module):
    """Post-norm BERT layer: attention + residual + LayerNorm, FFN (GELU) + residual + LayerNorm."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, ffn)
        self.output = nn.Linear(ffn, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Encoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.layer = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class MiniLM(nn.Module):
    """Token + position embeddings, LayerNorm, and the encoder; input (batch, seq) int64 token ids."""

    def __init__(self, vocab_size: int = 30522, max_positions: int = 512, hidden: int = 384, layers: int = 6,
                 heads: int = 12, ffn: int = 1536) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.encoder = Encoder(layers, hidden, heads, ffn)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[-1], device=input_ids.device)
        x = self.embedding_norm(self.word_embeddings(input_ids) + self.position_embeddings(pos))
        return self.encoder(x)


def minilm_l6() -> MiniLM:
    """all-MiniLM-L6-v2 shapes (22.7 M parameters), randomly initialised."""
    return MiniLM()
