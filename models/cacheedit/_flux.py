"""The CacheEdit editor: a small diffusers ``FluxTransformer2DModel`` used the FLUX.1 Kontext way.

Sequence layout per image (what ``FluxKontextPipeline`` feeds the transformer): the image stream is
``[target tokens (P) | source-image tokens (P)]`` (P = (S / patch)^2 patch tokens of ``channels * patch^2``
values, packed as FLUX packs its latents), with RoPE ids ``(0, y, x)`` for the target and ``(1, y, x)`` for the
source (Kontext's context image); the text stream is the instruction, 4 learned embeddings (one per field of
``(op, colour, arg_a, arg_b)``, :data:`._data.VOCAB`) of width ``joint_dim``, with zero text ids; the
pooled projection is their mean. The transformer is the unmodified diffusers class: nothing inside it is
npukit's. Its output on the target tokens is read as the edit residual ``x0 - src`` (an unedited token's
prediction is zero to learn), and :meth:`FluxEditor.forward` turns it into the rectified-flow velocity
``v = (x_t - x0_hat) / t``; :func:`sample` integrates ``x_{t'} = x_t + (t' - t) v`` from t = 1 (noise) to 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from ._data import VOCAB

DEFAULT_STEPS = 28  # sampling steps, as FLUX.1 Kontext's default


@dataclass(frozen=True)
class FluxEditorConfig:
    """Sizes of the Flux editor (image and patch in pixels; heads x head_dim = width)."""

    image: int = 32
    patch: int = 4
    channels: int = 3
    layers: int = 2  # double-stream blocks
    single_layers: int = 2  # single-stream blocks
    heads: int = 3
    head_dim: int = 32
    joint_dim: int = 64  # instruction embedding width (the text stream's input)
    shade: bool = True  # trained on shaded edits: sessions and metrics use the shaded data mode

    @property
    def tokens(self) -> int:
        """Target patch tokens per image."""
        return (self.image // self.patch) ** 2

    @property
    def grid(self) -> int:
        return self.image // self.patch

    @property
    def patch_dim(self) -> int:
        return self.channels * self.patch * self.patch

    @property
    def depth(self) -> int:
        return self.layers + self.single_layers

    def rope_axes(self) -> tuple[int, int, int]:
        """RoPE dims per id axis (frame, y, x), summing to head_dim (all even)."""
        a = 2 * (self.head_dim // 8)
        b = (self.head_dim - a) // 2 // 2 * 2
        return a, b, self.head_dim - a - b

    def to_dict(self) -> dict[str, Any]:
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


def image_ids(grid: int, frame: int) -> torch.Tensor:
    """FLUX RoPE ids (grid*grid, 3): ``(frame, y, x)`` per token in raster order."""
    i = torch.zeros(grid, grid, 3)
    i[..., 0] = frame
    i[..., 1] = torch.arange(grid)[:, None]
    i[..., 2] = torch.arange(grid)[None]
    return i.reshape(-1, 3)


class FluxEditor(nn.Module):
    """``forward(x_t, t, src, instr) -> v``: images (B, 3, S, S) in [-1, 1], t (B,) in [0, 1], instr (B, 4)
    int64; the velocity (B, 3, S, S). ``transformer`` is a diffusers ``FluxTransformer2DModel`` (hook it
    with :func:`npukit.models.cacheedit.apply_cacheedit`)."""

    def __init__(self, cfg: FluxEditorConfig | None = None) -> None:
        super().__init__()
        from diffusers import FluxTransformer2DModel

        self.cfg = cfg = cfg or FluxEditorConfig()
        self.transformer = FluxTransformer2DModel(
            patch_size=1, in_channels=cfg.patch_dim, num_layers=cfg.layers, num_single_layers=cfg.single_layers,
            attention_head_dim=cfg.head_dim, num_attention_heads=cfg.heads, joint_attention_dim=cfg.joint_dim,
            pooled_projection_dim=cfg.joint_dim, guidance_embeds=False, axes_dims_rope=cfg.rope_axes())
        self.instr_emb = nn.ModuleList([nn.Embedding(v, cfg.joint_dim) for v in VOCAB])
        nn.init.zeros_(self.transformer.proj_out.weight)  # residual 0 at init: the editor starts as the identity
        nn.init.zeros_(self.transformer.proj_out.bias)
        ids = torch.cat([image_ids(cfg.grid, 0), image_ids(cfg.grid, 1)])
        self.register_buffer("img_ids", ids, persistent=False)
        self.register_buffer("txt_ids", torch.zeros(len(VOCAB), 3), persistent=False)

    def text(self, instr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The instruction as the text stream (B, 4, joint_dim) and its pooled projection (B, joint_dim)."""
        toks = torch.stack([emb(instr[:, i]) for i, emb in enumerate(self.instr_emb)], dim=1)
        return toks, toks.mean(1)

    def residual(self, xt_tok: torch.Tensor, t: torch.Tensor, src_tok: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        """One transformer call: the predicted ``x0 - src`` of the target tokens (B, P, patch_dim)."""
        enc, pooled = self.text(instr)
        out = self.transformer(hidden_states=torch.cat([xt_tok, src_tok], 1), encoder_hidden_states=enc,
                               pooled_projections=pooled, timestep=t, img_ids=self.img_ids, txt_ids=self.txt_ids,
                               return_dict=False)[0]
        return out[:, : xt_tok.shape[1]]

    def predict_x0(self, xt: torch.Tensor, t: torch.Tensor, src: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        """The clean-image prediction ``src + residual`` (B, 3, S, S) (the training target)."""
        p = self.cfg.patch
        res = self.residual(patchify(xt, p), t, patchify(src, p), instr)
        return src + unpatchify(res, p, self.cfg.channels)

    def forward(self, xt: torch.Tensor, t: torch.Tensor, src: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        x0 = self.predict_x0(xt, t, src, instr)
        return (xt - x0) / t.clamp_min(1e-3)[:, None, None, None]


def timesteps(steps: int) -> torch.Tensor:
    """``steps + 1`` times from 1 to 0 (uniform)."""
    return torch.linspace(1.0, 0.0, steps + 1)


@torch.no_grad()
def sample(model: FluxEditor, src: torch.Tensor, instr: torch.Tensor, steps: int = DEFAULT_STEPS,
           noise: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Euler sampling (one transformer call per step): the edited images (B, 3, S, S), unclamped."""
    x = noise.clone() if noise is not None else torch.randn(src.shape, generator=generator)
    ts = timesteps(steps)
    for i in range(steps):
        v = model(x, ts[i].expand(src.shape[0]), src, instr)
        x = x + (ts[i + 1] - ts[i]) * v
    return x


def parameter_bytes(model: nn.Module, bytes_per_param: int = 2) -> int:
    """Size of the weights at ``bytes_per_param`` bytes each (bytes)."""
    return sum(p.numel() for p in model.parameters()) * bytes_per_param
