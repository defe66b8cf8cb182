"""A tiny byte-level causal language model with a pluggable FFN, and its training loop.

FFN kinds at matched *active* parameters per token (weights a token touches, routers and keys
included; see :func:`ffn_configs`): ``dense`` (SwiGLU), ``omnimoe`` (shared SwiGLU + atomic
experts, Cartesian router) and ``peer`` (product keys, token-centric experts).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from npukit.models.omnimoe import PEER, OmniMoE, SwiGLU

FFN_KINDS = ("dense", "omnimoe", "peer")


@dataclass(frozen=True)
class LMConfig:
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    seq: int = 64
    vocab: int = 256
    experts: int = 4096


def ffn_configs(d: int, experts: int) -> dict[str, dict[str, int]]:
    """Per kind the constructor arguments that give the same active parameters per token:
    dense SwiGLU I = 2d: 6 d^2; OmniMoE: shared I = 3d/4 (9/4 d^2) + router 2 n d + k atomic
    experts of 2d; PEER: queries (d x 2 h dk) + keys (h n 2 dk) + h k_h experts of 2d."""
    n = math.isqrt(experts)
    target = 6 * d * d
    shared = 3 * d // 4
    k_omni = max(1, (target - 3 * d * shared - 2 * n * d) // (2 * d))
    heads, dk = 4, max(2, d // 4)
    k_peer = max(1, (target - d * 2 * heads * dk - heads * n * 2 * dk) // (2 * d * heads))
    return {
        "dense": dict(intermediate=2 * d),
        "omnimoe": dict(intermediate=shared, top_k=k_omni),
        "peer": dict(heads=heads, dim_key=dk, experts_per_head=k_peer),
    }


def make_ffn(kind: str, d: int, experts: int) -> nn.Module:
    c = ffn_configs(d, experts)[kind]
    if kind == "dense":
        return SwiGLU(d, c["intermediate"])
    if kind == "omnimoe":
        return OmniMoE(d, c["intermediate"], experts, c["top_k"])
    return PEER(d, heads=c["heads"], num_experts=experts, experts_per_head=c["experts_per_head"], dim_key=c["dim_key"],
                non_competing_scores=False)


def active_params(ffn: nn.Module) -> int:
    """Weights one token touches in ``ffn`` (counted from the module's shapes)."""
    if isinstance(ffn, SwiGLU):
        return sum(p.numel() for p in ffn.parameters())
    if isinstance(ffn, OmniMoE):
        dense = sum(p.numel() for name, p in ffn.named_parameters() if not name.endswith("_embed.weight"))
        return dense + ffn.top_k * 2 * ffn.hidden_size
    if isinstance(ffn, PEER):
        return ffn.to_queries[0].weight.numel() + ffn.keys.numel() + ffn.top_k * 2 * ffn.dim
    raise TypeError(type(ffn))


class _Block(nn.Module):
    def __init__(self, cfg: LMConfig, ffn: nn.Module) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.heads, self.ffn = cfg.heads, ffn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, S, D)
        x = x + self.proj(a)
        return x + self.ffn(self.ln2(x))


class TinyLM(nn.Module):
    """Byte-level causal LM: embeddings, ``layers`` pre-norm blocks, tied output head."""

    def __init__(self, cfg: LMConfig, kind: str) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Parameter(torch.zeros(cfg.seq, cfg.d_model))
        self.blocks = nn.ModuleList(_Block(cfg, make_ffn(kind, cfg.d_model, cfg.experts)) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.pos[: idx.shape[1]]
        for b in self.blocks:
            x = b(x)
        return self.ln(x) @ self.embed.weight.t()


def _batch(data: torch.Tensor, batch: int, seq: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
    x = torch.stack([data[s:s + seq] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + seq + 1] for s in starts.tolist()])
    return x.long(), y.long()


def train_lm(kind: str, train: torch.Tensor, val: torch.Tensor, cfg: LMConfig, steps: int, batch: int = 16,
             lr: float = 3e-3, seed: int = 0, eval_every: int = 0, eval_batches: int = 4) -> dict[str, Any]:
    """Train one model; returns ``{"curve": [(step, train_loss, val_loss|nan, seconds)], ...}``."""
    torch.manual_seed(seed)
    model = TinyLM(cfg, kind)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    vgen_seed = seed + 1
    curve = []
    t0 = time.perf_counter()
    eval_every = eval_every or max(1, steps // 5)

    def evaluate() -> float:
        model.eval()
        g = torch.Generator().manual_seed(vgen_seed)
        with torch.no_grad():
            losses = [F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
                      for x, y in (_batch(val, batch, cfg.seq, g) for _ in range(eval_batches))]
        model.train()
        return sum(losses) / len(losses)

    for step in range(1, steps + 1):
        lr_now = lr * min(1.0, step / max(1, steps // 10)) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for pg in opt.param_groups:
            pg["lr"] = lr_now
        x, y = _batch(train, batch, cfg.seq, gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        val_loss = evaluate() if step % eval_every == 0 or step == steps else float("nan")
        curve.append((step, loss.item(), val_loss, time.perf_counter() - t0))
    ffn = model.blocks[0].ffn
    return {"kind": kind, "curve": curve, "active_ffn_params": active_params(ffn),
            "total_ffn_params": sum(p.numel() for p in ffn.parameters()), "seconds": time.perf_counter() - t0,
            "final_val": curve[-1][2]}
