"""The Adaptive Activation Cache: first-step divergence -> active tokens -> sparse later steps.

One edit round on a batch of B images (all tensors batched, one image per row):

0. The context tokens (source + instruction) run once per round (:meth:`EditDiT.context_kv`); their
   K/V are exact at every step (every method, ``full`` included, does this).
1. Step 0 (t = 1) runs every target token (:func:`full_step`), keeping each block's K/V buffer
   ``[target | context]`` (heads merged, (B, P + C, D)), the hidden state after block ``layer`` and
   the velocity of every target token.
2. The divergence of each target token's block-``layer`` activation from a *reference* (default
   ``reference='identity'``: a pass of the identity instruction ``keep`` on the same source and
   noise, run up to block ``layer``; ``'previous'``: the previous round's step 0, identity pass in
   round 1 -- measured worse on the shipped model, see the experiment) is split by Otsu's histogram
   threshold into invariant vs active tokens (:func:`select_active`), clamped to the
   [min_active, max_active] budget (fractions of the target tokens) and dilated by ``ring`` patches
   (a ring token joins only if its score is at least ``ring_floor`` x the threshold).
3. Steps 1.. run only the active tokens (:func:`cached_step`): their queries attend over all keys,
   with the K/V of invariant target tokens taken from the step-0 cache (active tokens' K/V are
   refreshed every step); invariant tokens keep their step-0 velocity (rectified-flow velocities of
   unedited tokens are nearly constant along the path). ``warmup`` > 1 runs that many full steps first.
   With ``invariant='source'`` invariant tokens instead follow the straight path to the source
   image (the previous round's output, carried across rounds): ``v = (x_t - src) / t``.

Every step records executed and skipped MACs and DRAM traffic per block into a Ledger (see
:func:`record_block`). FLOP = 2 MAC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from npukit.kernels.cacheedit.ops import active_attention, gather_modulate, kv_update, scatter_residual
from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ._cacheedit_dit import EditDiT, patchify

MAC_BITS = (16, 16, 32)  # bf16 operands, fp32 accumulation
ELEM_BITS = 16  # activations / weights / K,V in 16-bit


@dataclass(frozen=True)
class CacheConfig:
    """Options of the Adaptive Activation Cache (defaults work for the shipped model)."""

    layer: int = -1  # block whose output is compared with the reference (deep layer; -1 = last)
    ring: int = 1  # dilation of the active set, in patches (Chebyshev distance)
    ring_floor: float = 0.8  # > 0: a ring token joins only if its score >= ring_floor x the split threshold (hysteresis)
    min_active: float = 0.05  # lower compute budget: fraction of target tokens always active
    max_active: float = 0.5  # upper compute budget: at most this fraction before dilation
    bins: int = 64  # histogram bins of the Otsu split
    reference: str = "identity"  # 'identity' (keep-instruction pass every round) | 'previous' (last round's step 0)
    refresh_kv: bool = True  # write the active tokens' fresh K/V into the cache every step
    warmup: int = 1  # leading steps that run every token (>= 1; step 0 always does); later steps are sparse
    refresh: int = 0  # > 0: also run a full step every ``refresh`` steps (ToCa-style refresh of every cache entry)
    invariant: str = "velocity"  # invariant tokens: 'velocity' (keep the step-0 velocity) | 'source' (land on the source)
    impl: str = "auto"  # sparse-op kernels: auto (Triton on CUDA) | torch | triton

    def check(self, depth: int) -> None:
        """Raise :class:`ConfigError` naming the first bad option."""
        if not -depth <= self.layer < depth:
            raise ConfigError(f"cache layer must be in [-{depth}, {depth - 1}] for a {depth}-block model, got {self.layer}")
        if self.ring_floor < 0:
            raise ConfigError(f"ring_floor must be >= 0, got {self.ring_floor}")
        if self.ring < 0:
            raise ConfigError(f"cache ring must be >= 0 patches, got {self.ring}")
        if not 0.0 <= self.min_active <= self.max_active <= 1.0:
            raise ConfigError(f"need 0 <= min_active <= max_active <= 1, got {self.min_active}, {self.max_active}")
        if self.warmup < 1:
            raise ConfigError(f"cache warmup must be >= 1 full steps, got {self.warmup}")
        if self.refresh < 0:
            raise ConfigError(f"cache refresh must be >= 0 steps (0: never), got {self.refresh}")
        if self.invariant not in ("velocity", "source"):
            raise ConfigError(f"invariant must be 'velocity' or 'source', got {self.invariant!r}")
        if self.bins < 2:
            raise ConfigError(f"Otsu bins must be >= 2, got {self.bins}")
        if self.reference not in ("previous", "identity"):
            raise ConfigError(f"reference must be 'previous' or 'identity', got {self.reference!r}")


@dataclass
class StepZero:
    """What step 0 of a round leaves behind (all batched over images)."""

    v: torch.Tensor  # (B, P, patch_dim) velocity of every target token
    k: list[torch.Tensor]  # per block (B, P + C, D): target rows then the context rows
    vv: list[torch.Tensor]  # per block (B, P + C, D)
    h_layer: torch.Tensor  # (B, P, D) target hidden state after the compared block
    importance: torch.Tensor  # (B, P) attention each target token receives in the last block
    hidden: torch.Tensor  # (B, P, D) final target hidden state (the buffer later steps update in place)


@dataclass
class SessionState:
    """What carries across rounds of a session: the previous round's step-0 activations."""

    prev_h: torch.Tensor | None = None
    rounds: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


# ------------------------------------------------------------------------------------------- accounting
def block_macs(cfg: Any, a: int, n: int) -> int:
    """MACs of one block for ``a`` query tokens over ``n`` keys (QKV, attention, proj, MLP)."""
    d, r = cfg.dim, cfg.mlp_ratio
    return a * d * 3 * d + 2 * a * n * d + a * d * d + 2 * a * d * r * d


def block_elems(cfg: Any, a: int, n: int) -> int:
    """16-bit DRAM elements moved by one block: weights, active rows in/out, K/V read, K/V write."""
    d, r = cfg.dim, cfg.mlp_ratio
    weights = 3 * d * d + d * d + 2 * r * d * d
    return weights + 2 * a * d + 2 * n * d + 2 * a * d


def record_block(ledger: Ledger | None, scope: str, cfg: Any, a_exec: int, n: int, a_full: int, images: int) -> None:
    """Record executed (``a_exec`` query tokens per image) and skipped MACs/elements of one block."""
    if ledger is None:
        return
    ex_m, full_m = block_macs(cfg, a_exec, n), block_macs(cfg, a_full, n)
    ex_e = block_elems(cfg, a_exec, n) if a_exec else 0
    full_e = block_elems(cfg, a_full, n)
    ledger.record("pe_array", "mac", MAC_BITS, images * ex_m, scope=f"executed/{scope}")
    ledger.record("dram", "dram_read", (ELEM_BITS,), images * ex_e, scope=f"executed/{scope}")
    ledger.record("pe_array", "mac", MAC_BITS, images * (full_m - ex_m), scope=f"skipped/{scope}")
    ledger.record("dram", "dram_read", (ELEM_BITS,), images * (full_e - ex_e), scope=f"skipped/{scope}")


def ledger_totals(ledger: Ledger, prefix: str) -> dict[str, float]:
    """Executed/skipped FLOPs and bytes under ``executed/<prefix>`` and ``skipped/<prefix>``."""
    out = {"flops_executed": 0.0, "flops_skipped": 0.0, "bytes_executed": 0.0, "bytes_skipped": 0.0}
    for (sc, _comp, act, bits), n in ledger.counts.items():
        for kind in ("executed", "skipped"):
            if sc == f"{kind}/{prefix}" or sc.startswith(f"{kind}/{prefix}/"):
                if act == "mac":
                    out[f"flops_{kind}"] += 2 * n
                else:
                    out[f"bytes_{kind}"] += n * bits[0] / 8
    return out


# ------------------------------------------------------------------------------------------- selection
def otsu_threshold(scores: torch.Tensor, bins: int = 64) -> float:
    """Otsu's threshold of a 1-D score vector (maximises the between-class variance of a histogram)."""
    s = scores.float().flatten()
    lo, hi = s.min().item(), s.max().item()
    if not math.isfinite(hi - lo) or hi - lo <= 1e-12:
        return hi
    hist = torch.histc(s, bins=bins, min=lo, max=hi).double()
    centres = torch.linspace(lo, hi, bins + 1, dtype=torch.float64)
    centres = (centres[:-1] + centres[1:]) / 2
    w0 = torch.cumsum(hist, 0)
    w1 = w0[-1] - w0
    m0 = torch.cumsum(hist * centres, 0)
    mu0 = m0 / w0.clamp_min(1e-12)
    mu1 = (m0[-1] - m0) / w1.clamp_min(1e-12)
    between = w0 * w1 * (mu0 - mu1) ** 2
    between[w1 <= 0] = -1
    k = int(torch.argmax(between).item())
    return float(lo + (k + 1) * (hi - lo) / bins)


def dilate(mask: torch.Tensor, ring: int, grid: int) -> torch.Tensor:
    """(B, P) bool patch mask dilated by ``ring`` patches (Chebyshev) on a ``grid`` x ``grid`` lattice."""
    if ring <= 0:
        return mask
    m = mask.float().reshape(-1, 1, grid, grid)
    m = F.max_pool2d(m, 2 * ring + 1, stride=1, padding=ring)
    return m.reshape(mask.shape) > 0


def select_active(scores: torch.Tensor, cfg: CacheConfig, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image: Otsu split of divergence ``scores`` (B, P), clamped to the budget, then dilated.

    Returns ``(active, detected)``: bool (B, P) after and before dilation.
    """
    b, p = scores.shape
    k_min = max(1, math.ceil(cfg.min_active * p))
    k_max = max(k_min, math.floor(cfg.max_active * p))
    det = torch.zeros_like(scores, dtype=torch.bool)
    thrs = torch.zeros(b)
    for i in range(b):
        thr = otsu_threshold(scores[i], cfg.bins)
        sel = scores[i] > thr
        c = int(sel.sum().item())
        if c < k_min or c > k_max:
            k = min(max(c, k_min), k_max)
            sel = torch.zeros(p, dtype=torch.bool)
            top = torch.topk(scores[i], k)
            sel[top.indices] = True
            thr = float(top.values[-1])
        det[i] = sel
        thrs[i] = thr
    act = dilate(det, cfg.ring, grid)
    if cfg.ring_floor > 0:
        act = det | (act & (scores >= cfg.ring_floor * thrs[:, None]))
    return act, det


def mask_to_index(mask: torch.Tensor) -> torch.Tensor:
    """(B, P) bool -> (B, A_max) int64 token rows, padded with -1."""
    counts = mask.sum(1)
    a = max(1, int(counts.max().item()))
    idx = torch.full((mask.shape[0], a), -1, dtype=torch.long)
    for i in range(mask.shape[0]):
        r = torch.nonzero(mask[i]).flatten()
        idx[i, : r.numel()] = r
    return idx


# ------------------------------------------------------------------------------------------- steps
def _mods(blk: Any, temb: torch.Tensor) -> list[torch.Tensor]:
    return list(blk.mod(F.silu(temb)).chunk(6, dim=-1))  # six (B, D)


def full_step(model: EditDiT, x: torch.Tensor, t: torch.Tensor, src: torch.Tensor, ctx: list[tuple[torch.Tensor, torch.Tensor]],
              layer: int | None = None, stop_after: int | None = None, importance: bool = False,
              capture_all: list[torch.Tensor] | None = None) -> StepZero:
    """One full step of the target stream (context K/V ``ctx`` from :meth:`EditDiT.context_kv`) that
    keeps each block's K/V buffer ``[target | context]``, the block-``layer`` hidden state and
    (optionally) the attention received by target tokens in the last block. ``stop_after``: run
    blocks 0..stop_after only (reference pass; v and K/V are then incomplete)."""
    cfg = model.cfg
    pp, heads = cfg.tokens, cfg.heads
    temb = model.temb(t)
    h = model.embed_target(patchify(x, cfg.patch), patchify(src, cfg.patch))
    depth = len(model.blocks)
    layer = depth - 1 if layer is None else layer % depth
    ks, vs, h_layer, imp = [], [], h, torch.zeros(h.shape[0], pp)
    for li, blk in enumerate(model.blocks):
        sh1, sc1, g1, sh2, sc2, g2 = (m.unsqueeze(1) for m in _mods(blk, temb))
        q, k, v = blk.qkv(F.layer_norm(h, h.shape[-1:]) * (1 + sc1) + sh1).chunk(3, dim=-1)
        kc, vc = ctx[li]
        kb, vb = torch.cat([k, kc], 1), torch.cat([v, vc], 1)
        o = blk.attend(q, kb, vb)
        if importance and li == depth - 1:
            b, a, d = q.shape
            qh = q.reshape(b, a, heads, d // heads).transpose(1, 2)
            kh = kb.reshape(b, kb.shape[1], heads, d // heads).transpose(1, 2)
            att = torch.softmax(qh @ kh.transpose(-1, -2) / math.sqrt(d // heads), dim=-1)
            imp = att.mean(dim=(1, 2))[:, :pp]
        h = h + g1 * blk.proj(o)
        h = h + g2 * blk.mlp(F.layer_norm(h, h.shape[-1:]) * (1 + sc2) + sh2)
        ks.append(kb)
        vs.append(vb)
        if capture_all is not None:
            capture_all.append(h)
        if li == layer:
            h_layer = h
        if stop_after is not None and li >= stop_after:
            break
    v_tok = model.to_velocity(model.final(h, temb), patchify(x, cfg.patch), patchify(src, cfg.patch), t)
    return StepZero(v_tok, ks, vs, h_layer, imp, h)


def _plan(idx: torch.Tensor, p: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flat (unpadded) row indices of the active tokens, in row-major (image, slot) order.

    Returns ``fidx`` (1, K) rows of the (B*P) target view, ``kidx`` (1, K) rows of the (B*N) K/V
    view, ``pos`` (B, A) position of each slot in the flat order (-1 for padding) and ``vpos`` (K,)
    the valid slots of the (B*A) padded order.
    """
    valid = idx >= 0
    bs = torch.arange(idx.shape[0])[:, None].expand_as(idx)[valid]
    rows = idx[valid]
    pos = torch.full(idx.shape, -1, dtype=torch.long)
    pos[valid] = torch.arange(rows.numel())
    return (bs * p + rows)[None], (bs * n + rows)[None], pos, valid.reshape(-1).nonzero().squeeze(1)


def cached_step(model: EditDiT, x_tok: torch.Tensor, src_tok: torch.Tensor, t: torch.Tensor, idx: torch.Tensor,
                zero: StepZero, refresh_kv: bool = True, impl: str = "auto") -> torch.Tensor:
    """One sampling step computing only the rows ``idx`` (B, A; -1 padded) of the target tokens.

    The active tokens of all images are packed into one (1, K, D) slab (no padding) for the
    gathers, linear layers and scatters; only the attention pads queries per image to A. All images
    share the timestep ``t`` (B,). Updates ``zero.hidden`` (in place), the K/V caches (if
    ``refresh_kv``) and ``zero.v`` (the velocity buffer, in place) and returns ``zero.v``.
    """
    if not bool((t == t[0]).all()):
        raise ConfigError("cached_step: all images of a batch must share the timestep")
    cfg = model.cfg
    b, a = idx.shape
    p, d = cfg.tokens, cfg.dim
    n = zero.k[0].shape[1]
    fidx, kidx, pos, vpos = _plan(idx, p, n)
    posc = pos.clamp_min(0).reshape(-1)
    temb = model.temb(t[:1])
    h = zero.hidden.view(1, b * p, d)
    xr = x_tok.reshape(b * p, -1).index_select(0, fidx[0])[None]
    sr = src_tok.reshape(b * p, -1).index_select(0, fidx[0])[None]
    scatter_residual(h, fidx, model.embed_target(xr, sr, idx=fidx[0] % p), None, impl=impl)
    for li, blk in enumerate(model.blocks):
        sh1, sc1, g1, sh2, sc2, g2 = _mods(blk, temb)
        q, k, v = blk.qkv(gather_modulate(h, fidx, sh1, sc1, impl=impl)).chunk(3, dim=-1)
        if refresh_kv:
            kv_update(zero.k[li].view(1, b * n, d), zero.vv[li].view(1, b * n, d), kidx, k, v, impl=impl)
        o = active_attention(q[0].index_select(0, posc).view(b, a, d), zero.k[li], zero.vv[li], cfg.heads)
        scatter_residual(h, fidx, blk.proj(o.reshape(b * a, d).index_select(0, vpos))[None], g1, impl=impl)
        scatter_residual(h, fidx, blk.mlp(gather_modulate(h, fidx, sh2, sc2, impl=impl)), g2, impl=impl)
    shift, scale = model.final_mod(F.silu(temb)).chunk(2, dim=-1)
    res = model.out(gather_modulate(h, fidx, shift, scale, impl=impl))
    v_act = model.to_velocity(res, xr, sr, t[:1])
    scatter_residual(zero.v.view(1, b * p, -1), fidx, v_act, None, impl=impl)
    return zero.v


def divergence(h: torch.Tensor, ref: torch.Tensor, tokens: int) -> torch.Tensor:
    """Per target token L2 distance of activations, (B, P)."""
    return (h[:, :tokens] - ref[:, :tokens]).float().norm(dim=-1)
