"""A small FLUX.1-Kontext-style editing DiT and its rectified-flow sampler (CPU-trainable).

Sequence layout (per image): ``[target tokens (P) | source tokens (P) | instruction tokens (4)]``
with P = (S / patch)^2 patch tokens. Target and source patches share a learned 2-D position
embedding (plus a type embedding), so an unedited target token can find its source twin; the
instruction is 4 embedded tokens that take part in the joint attention (as FLUX's text tokens), and
the adaLN modulation depends on the timestep only; the context tokens (source + instruction) are
modulated at t = 0 and attend to context only (as OminiControl's condition tokens), so their K/V are
computed once per edit. Deviation from Kontext, for a 15-minute CPU
training budget: each target token's input also carries its own source patch (channel concat, as in
InstructPix2Pix), which makes "copy the unedited region" trivial to learn. Blocks are pre-norm adaLN-Zero joint-attention
blocks. The network predicts the edit residual ``x0 - src`` of each target token (so an unedited
token's prediction is exactly zero to learn); :meth:`EditDiT.forward` turns it into the rectified-flow
velocity ``v = (x_t - x0_hat) / t`` (= ``noise - x0`` on the straight path);
:func:`sample` integrates ``x_{t'} = x_t + (t' - t) v`` from t = 1 (noise) to t = 0 (image).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._cacheedit_data import VOCAB

DEFAULT_STEPS = 28  # sampling steps, as FLUX.1 Kontext's default


@dataclass(frozen=True)
class DiTConfig:
    """Sizes of the editing DiT (image pixels, patch pixels, width, depth, heads)."""

    image: int = 32
    patch: int = 4
    channels: int = 3
    dim: int = 96
    depth: int = 4
    heads: int = 4
    mlp_ratio: int = 4
    texture: bool = False  # trained on textured (stochastic) edits: sessions/metrics use the textured data mode
    shade: bool = False  # trained on shaded edits (recolour/add pick an unspecified brightness): shaded sessions, chroma metric

    @property
    def tokens(self) -> int:
        """Patch tokens per image."""
        return (self.image // self.patch) ** 2

    @property
    def seq(self) -> int:
        """Tokens in the joint sequence (keys of a target query): target + source + 4 instruction tokens."""
        return 2 * self.tokens + 4

    @property
    def patch_dim(self) -> int:
        return self.channels * self.patch * self.patch

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def patchify(x: torch.Tensor, p: int) -> torch.Tensor:
    """(B, C, S, S) -> (B, (S/p)^2, C*p*p)."""
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


def unpatchify(t: torch.Tensor, p: int, c: int = 3) -> torch.Tensor:
    """(B, (S/p)^2, C*p*p) -> (B, C, S, S)."""
    b, n, _ = t.shape
    g = int(round(math.sqrt(n)))
    x = t.reshape(b, g, g, c, p, p).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, g * p, g * p)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of t in [0, 1] (scaled by 1000), shape (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = (t.float() * 1000.0)[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Block(nn.Module):
    """adaLN-Zero joint-attention block: h += g1 * Attn(mod(LN h)); h += g2 * MLP(mod(LN h)).

    Two streams share the weights: context tokens (source + instruction) attend to context only;
    target tokens attend to target + context (keys ordered ``[target | context]``).
    """

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)
        self.mod = nn.Linear(dim, 6 * dim)
        nn.init.zeros_(self.mod.weight)
        nn.init.zeros_(self.mod.bias)

    def modulation(self, temb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Six (B, 1, dim) tensors: shift1, scale1, gate1, shift2, scale2, gate2."""
        return tuple(m.unsqueeze(1) for m in self.mod(F.silu(temb)).chunk(6, dim=-1))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Multi-head attention, heads merged: q (B, A, D) over k, v (B, N, D) -> (B, A, D)."""
        b, a, d = q.shape
        n, dh = k.shape[1], d // self.heads
        qh = q.reshape(b, a, self.heads, dh).transpose(1, 2)
        kh = k.reshape(b, n, self.heads, dh).transpose(1, 2)
        vh = v.reshape(b, n, self.heads, dh).transpose(1, 2)
        return F.scaled_dot_product_attention(qh, kh, vh).transpose(1, 2).reshape(b, a, d)

    def mlp(self, m: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(m), approximate="tanh"))

    def forward_context(self, h: torch.Tensor, mods: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Context stream: returns (new h, k, v) of the context tokens."""
        sh1, sc1, g1, sh2, sc2, g2 = mods
        q, k, v = self.qkv(F.layer_norm(h, h.shape[-1:]) * (1 + sc1) + sh1).chunk(3, dim=-1)
        h = h + g1 * self.proj(self.attend(q, k, v))
        h = h + g2 * self.mlp(F.layer_norm(h, h.shape[-1:]) * (1 + sc2) + sh2)
        return h, k, v

    def context_kv_only(self, h: torch.Tensor, mods: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(k, v) of the context tokens at this block, without the block's attention and MLP (the last block
        a caller needs: its output is never read)."""
        sh1, sc1 = mods[0], mods[1]
        d = h.shape[-1]
        kv = F.linear(F.layer_norm(h, h.shape[-1:]) * (1 + sc1) + sh1, self.qkv.weight[d:], self.qkv.bias[d:])
        k, v = kv.chunk(2, dim=-1)
        return k, v

    def forward_target(self, h: torch.Tensor, mods: tuple[torch.Tensor, ...], kc: torch.Tensor, vc: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Target stream over target + context keys: returns (new h, k, v) of the target tokens."""
        sh1, sc1, g1, sh2, sc2, g2 = mods
        q, k, v = self.qkv(F.layer_norm(h, h.shape[-1:]) * (1 + sc1) + sh1).chunk(3, dim=-1)
        h = h + g1 * self.proj(self.attend(q, torch.cat([k, kc], 1), torch.cat([v, vc], 1)))
        h = h + g2 * self.mlp(F.layer_norm(h, h.shape[-1:]) * (1 + sc2) + sh2)
        return h, k, v


class EditDiT(nn.Module):
    """The editing DiT. ``forward(x_t, t, src, instr) -> v`` with images (B, 3, S, S), t (B,) in [0, 1],
    instr (B, 4) int64; returns the velocity (B, 3, S, S).

    The context stream (source + instruction tokens, modulated at t = 0, attending to context only,
    as OminiControl's condition tokens) does not depend on the timestep or on the noisy tokens, so
    its per-block K/V are computed once per edit (:meth:`context_kv`) and are exact at every step.
    """

    def __init__(self, cfg: DiTConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg = cfg or DiTConfig()
        d = cfg.dim
        self.x_in = nn.Linear(2 * cfg.patch_dim, d)  # noisy target patch ++ its source patch
        self.src_in = nn.Linear(cfg.patch_dim, d)
        self.pos = nn.Parameter(torch.randn(cfg.tokens, d) * 0.02)
        self.type_emb = nn.Parameter(torch.randn(3, d) * 0.02)
        self.instr_emb = nn.ModuleList([nn.Embedding(v, d) for v in VOCAB])
        self.instr_pos = nn.Parameter(torch.randn(len(VOCAB), d) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        self.blocks = nn.ModuleList([Block(d, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.depth)])
        self.final_mod = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, cfg.patch_dim)
        nn.init.zeros_(self.final_mod.weight)
        nn.init.zeros_(self.final_mod.bias)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    # -- pieces the cache reuses -------------------------------------------------------------------
    def temb(self, t: torch.Tensor) -> torch.Tensor:
        return self.t_mlp(timestep_embedding(t, self.cfg.dim))

    def embed_target(self, xt_tokens: torch.Tensor, src_tokens: torch.Tensor, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Target-token embeddings from noisy and source patches (B, A, patch_dim) each; ``idx`` (A,)
        gives their patch positions (default all)."""
        pos = self.pos if idx is None else self.pos[idx]
        return self.x_in(torch.cat([xt_tokens, src_tokens], dim=-1)) + pos + self.type_emb[0]

    def embed_context(self, src: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        """Source + instruction tokens, (B, P + 4, dim)."""
        s = self.src_in(patchify(src, self.cfg.patch)) + self.pos + self.type_emb[1]
        toks = torch.stack([emb(instr[:, i]) for i, emb in enumerate(self.instr_emb)], dim=1)
        toks = toks + self.instr_pos + self.type_emb[2]
        return torch.cat([s, toks], dim=1)

    def context_kv(self, src: torch.Tensor, instr: torch.Tensor,
                   upto: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-block (k, v) of the context tokens, each (B, P + 4, dim); blocks 0..upto (default all)."""
        h = self.embed_context(src, instr)
        temb = self.temb(torch.zeros(src.shape[0]))
        last = len(self.blocks) - 1 if upto is None else min(upto, len(self.blocks) - 1)
        out = []
        for li, blk in enumerate(self.blocks[: last + 1]):
            if li == last:  # only its K/V are read: skip the block's attention and MLP
                out.append(blk.context_kv_only(h, blk.modulation(temb)))
            else:
                h, k, v = blk.forward_context(h, blk.modulation(temb))
                out.append((k, v))
        return out

    def final(self, h_tgt: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        """Target hidden states (B, A, dim) -> predicted edit residual ``x0 - src`` (B, A, patch_dim)."""
        shift, scale = self.final_mod(F.silu(temb)).unsqueeze(1).chunk(2, dim=-1)
        return self.out(F.layer_norm(h_tgt, h_tgt.shape[-1:]) * (1 + scale) + shift)

    @staticmethod
    def to_velocity(res: torch.Tensor, xt_tokens: torch.Tensor, src_tokens: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Rectified-flow velocity ``(x_t - x0_hat) / t`` with ``x0_hat = src + res``; all (B, A, patch_dim)."""
        return (xt_tokens - src_tokens - res) / t.clamp_min(1e-3)[:, None, None]

    def predict_x0(self, xt: torch.Tensor, t: torch.Tensor, src: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        """The clean-image prediction ``src + residual`` (B, 3, S, S) (the training target)."""
        p = self.cfg.patch
        temb = self.temb(t)
        h = self.embed_target(patchify(xt, p), patchify(src, p))
        for blk, (kc, vc) in zip(self.blocks, self.context_kv(src, instr), strict=True):
            h, _, _ = blk.forward_target(h, blk.modulation(temb), kc, vc)
        return src + unpatchify(self.final(h, temb), p, self.cfg.channels)

    def target_forward(self, xt: torch.Tensor, t: torch.Tensor, src: torch.Tensor,
                       ctx: list[tuple[torch.Tensor, torch.Tensor]], capture: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Velocity (B, 3, S, S) given precomputed context K/V (:meth:`context_kv`)."""
        p = self.cfg.patch
        temb = self.temb(t)
        xt_tok, src_tok = patchify(xt, p), patchify(src, p)
        h = self.embed_target(xt_tok, src_tok)
        for blk, (kc, vc) in zip(self.blocks, ctx, strict=True):
            h, _, _ = blk.forward_target(h, blk.modulation(temb), kc, vc)
            if capture is not None:
                capture.append(h)
        return unpatchify(self.to_velocity(self.final(h, temb), xt_tok, src_tok, t), p, self.cfg.channels)

    def forward(self, xt: torch.Tensor, t: torch.Tensor, src: torch.Tensor, instr: torch.Tensor,
                capture: list[torch.Tensor] | None = None) -> torch.Tensor:
        return self.target_forward(xt, t, src, self.context_kv(src, instr), capture)


def timesteps(steps: int, shift: float = 1.0) -> torch.Tensor:
    """``steps + 1`` times from 1 to 0 (optionally shifted towards t = 1 as in SD3/FLUX)."""
    t = torch.linspace(1.0, 0.0, steps + 1)
    if shift != 1.0:
        t = shift * t / (1 + (shift - 1) * t)
    return t


@torch.no_grad()
def sample(model: EditDiT, src: torch.Tensor, instr: torch.Tensor, steps: int = DEFAULT_STEPS,
           noise: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Full-recomputation Euler sampling: returns the edited images (B, 3, S, S) in [-1, 1]."""
    x = noise.clone() if noise is not None else torch.randn(src.shape, generator=generator)
    ts = timesteps(steps)
    ctx = model.context_kv(src, instr)
    for i in range(steps):
        t = ts[i].expand(src.shape[0])
        v = model.target_forward(x, t, src, ctx)
        x = x + (ts[i + 1] - ts[i]) * v
    return x


def parameter_bytes(model: nn.Module, bytes_per_param: int = 2) -> int:
    """Size of the weights at ``bytes_per_param`` bytes each (bytes)."""
    return sum(p.numel() for p in model.parameters()) * bytes_per_param
