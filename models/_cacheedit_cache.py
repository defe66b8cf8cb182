"""The Adaptive Activation Cache: first-step divergence -> active tokens -> sparse later steps.

One edit round on a batch of B images (all tensors batched, one image per row):

0. The context tokens (source + instruction) run once per round (:meth:`EditDiT.context_kv`); their
   K/V are exact at every step (every method, ``full`` included, does this).
1. Step 0 (t = 1) runs every target token (:func:`full_step`), keeping each block's K/V buffer
   ``[target | context]`` (heads merged, (B, P + C, D)), the hidden state after block ``layer`` and
   the velocity of every target token.
2. The divergence of each target token's block-``layer`` activation (default the last block, whose
   step-0 divergence separates the edit best on the v3 model: 1.03 inside vs 0.37 outside) from a
   *reference* (default ``reference='identity'``: a pass of the identity instruction ``keep`` on the
   same source and noise, run up to block ``layer``; ``'previous'``: the previous
   round's step 0, identity pass in round 1 -- measured worse on the v1 and v3 models: IoU 0.28 vs
   0.63 on v3, as the previous round's edit region diverges too) is scored
   (default ``score='rel'``: the L2 distance relative to the reference activation's norm, which the
   few massive activation channels of deep blocks do not dominate) and split by Otsu's histogram
   threshold into invariant vs active tokens (:func:`select_active`, batched over images; default
   ``levels=2``: the active class is split by Otsu once more, so only the clearly diverging tokens
   stay), clamped to the [min_active, max_active] budget (fractions of the target tokens; default
   [0.05, 0.1]: the speed comes from a small active set plus periodic full refreshes, see below) and
   dilated by ``ring`` patches (default 0; a ring token joins only if its score is at least
   ``ring_floor`` x the threshold).
3. Steps 1.. run only the active tokens (:func:`cached_step`), packed into one contiguous slab with an
   index plan built once per round (:func:`make_plan`) and the adaLN modulations of every step
   computed once per round (:func:`step_mods`): their queries attend over all keys, with the K/V of
   invariant target tokens taken from the cache (active tokens' K/V are refreshed every step);
   invariant tokens move along their predicted straight path: default ``invariant='forecast'``, their
   x0 prediction extrapolated linearly in t from the last two full steps, ``v = (x_t - x0_hat) / t``
   (until a second full step this is the last full step's velocity, ``invariant='velocity'``; the
   extrapolation follows the slow drift of the model's own prediction, +0.6 dB on the v3 model at no
   compute). Full steps (every token, every cache entry
   refreshed): step 0, the first ``warmup`` steps, every ``refresh``-th step (default 14: one
   mid-round refresh of 28 steps), the steps listed in ``refresh_at`` and the last ``tail`` steps
   (default 1: the last step's full prediction sets every token's output; +3 dB at one step's cost
   on the v1 model). ``forecast=1`` (default) extrapolates the invariant tokens' K/V linearly
   in t from the last two full steps (TaylorSeer-like); stale K/V of invariant tokens, not the
   choice of tokens, is the main error source of the cached steps (v1 and v3 models).
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

from npukit.kernels.cacheedit.ops import _use_triton, active_attention, gather_modulate, kv_update, scatter_residual
from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ._cacheedit_dit import EditDiT, patchify
from .weights import WeightsError

MAC_BITS = (16, 16, 32)  # bf16 operands, fp32 accumulation
ELEM_BITS = 16  # activations / weights / K,V in 16-bit


@dataclass(frozen=True)
class CacheConfig:
    """Options of the Adaptive Activation Cache (defaults work for the shipped model)."""

    layer: int = -1  # block whose output is compared with the reference (deep layer; -1 = the last: IoU 0.63 vs 0.39 at -2, v3)
    ring: int = 0  # dilation of the active set, in patches (Chebyshev distance)
    ring_floor: float = 0.8  # > 0: a ring token joins only if its score >= ring_floor x the split threshold (hysteresis)
    min_active: float = 0.05  # lower compute budget: fraction of target tokens always active
    max_active: float = 0.1  # upper compute budget: at most this fraction before dilation
    bins: int = 64  # histogram bins of the Otsu split
    levels: int = 2  # Otsu splits: 2 = split the active class of the first split again (multi-level Otsu)
    reference: str = "identity"  # 'identity' (keep-instruction pass every round) | 'previous' (last round's step 0)
    refresh_kv: bool = True  # write the active tokens' fresh K/V into the cache every step
    warmup: int = 1  # leading steps that run every token (>= 1; step 0 always does); later steps are sparse
    refresh: int = 14  # > 0: also run a full step every ``refresh`` steps (ToCa-style refresh of every cache entry)
    # invariant tokens at sparse steps: 'forecast' (x0-hat extrapolated linearly in t from the last two full steps,
    # v = (x_t - x0-hat) / t; until a second full step the same as 'velocity') | 'velocity' (keep the last full step's
    # velocity) | 'source' (land on the source)
    invariant: str = "forecast"
    score: str = "rel"  # divergence split by Otsu: 'l2' (L2 distance) | 'log' (its log) | 'rel' (relative to the reference norm)
    refresh_at: tuple[int, ...] = ()  # extra full steps at these step indices (negative: from the end)
    tail: int = 1  # trailing steps that run every token (the last step's full prediction sets every token's output)
    stride: int = 2  # method 'cacheedit+step' only: sparse steps run every ``stride`` steps, the others reuse the last velocity
    forecast: int = 1  # invariant tokens' cached K/V: 0 reuse as is | 1 extrapolate linearly in t from the last two full steps
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
        if self.stride < 1:
            raise ConfigError(f"cache stride must be >= 1 steps, got {self.stride}")
        if self.tail < 0:
            raise ConfigError(f"cache tail must be >= 0 full steps, got {self.tail}")
        if self.refresh < 0:
            raise ConfigError(f"cache refresh must be >= 0 steps (0: never), got {self.refresh}")
        if self.invariant not in ("velocity", "source", "forecast"):
            raise ConfigError(f"invariant must be 'velocity', 'source' or 'forecast', got {self.invariant!r}")
        if self.forecast not in (0, 1):
            raise ConfigError(f"forecast must be 0 (reuse cached K/V) or 1 (linear extrapolation), got {self.forecast}")
        if self.score not in ("l2", "log", "rel"):
            raise ConfigError(f"score must be 'l2', 'log' or 'rel', got {self.score!r}")
        if self.levels < 1:
            raise ConfigError(f"Otsu levels must be >= 1, got {self.levels}")
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


def kv_macs(cfg: Any, a: int) -> int:
    """MACs of the K/V projection alone for ``a`` tokens (the last context block a step reads)."""
    return a * cfg.dim * 2 * cfg.dim


def kv_elems(cfg: Any, a: int) -> int:
    """16-bit DRAM elements of the K/V projection alone: its weights, ``a`` rows in, their K/V out."""
    d = cfg.dim
    return 2 * d * d + a * d + 2 * a * d


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


def otsu_thresholds(scores: torch.Tensor, bins: int = 64, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Row-wise :func:`otsu_threshold` of (B, P) scores, batched (no per-image Python loop); (B,).
    ``valid`` (B, P) bool: split only those entries (each row needs at least one)."""
    s = scores.double()
    if valid is None:
        lo, hi = s.amin(1, keepdim=True), s.amax(1, keepdim=True)
    else:
        lo = torch.where(valid, s, torch.inf).amin(1, keepdim=True)
        hi = torch.where(valid, s, -torch.inf).amax(1, keepdim=True)
    span = hi - lo
    flat = span <= 1e-12
    width = torch.where(flat, torch.ones_like(span), span) / bins
    b_idx = ((s - lo) / width).floor().clamp(0, bins - 1).long()  # histc's binning (max -> last bin)
    ones = torch.ones_like(s) if valid is None else valid.double()
    hist = torch.zeros(s.shape[0], bins, dtype=torch.float64).scatter_add_(1, b_idx, ones)
    centres = lo + (torch.arange(bins, dtype=torch.float64) + 0.5) * width
    w0 = hist.cumsum(1)
    w1 = w0[:, -1:] - w0
    m0 = (hist * centres).cumsum(1)
    mu0 = m0 / w0.clamp_min(1e-12)
    mu1 = (m0[:, -1:] - m0) / w1.clamp_min(1e-12)
    between = torch.where(w1 <= 0, torch.full_like(w0, -1.0), w0 * w1 * (mu0 - mu1) ** 2)
    k = between.argmax(1, keepdim=True)
    thr = lo + (k + 1) * width
    return torch.where(flat, hi, thr).squeeze(1).to(scores.dtype)


def select_active(scores: torch.Tensor, cfg: CacheConfig, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image: Otsu split of divergence ``scores`` (B, P), clamped to the budget, then dilated.

    Batched over images. Returns ``(active, detected)``: bool (B, P) after and before dilation.
    """
    b, p = scores.shape
    if not bool(torch.isfinite(scores).all()):  # NaN would bin to index -2**63 below
        raise WeightsError("the divergence scores hold NaN/Inf: the model's activations overflowed; check the weights "
                           "and the input images")
    k_min = max(1, math.ceil(cfg.min_active * p))
    k_max = max(k_min, math.floor(cfg.max_active * p))
    thrs = otsu_thresholds(scores, cfg.bins)
    det = scores > thrs[:, None]
    for _ in range(cfg.levels - 1):  # multi-level: split the active class again (where it has >= 2 tokens)
        again = det.sum(1) >= 2
        if not bool(again.any()):
            break
        t2 = otsu_thresholds(scores, cfg.bins, valid=torch.where(again[:, None], det, torch.ones_like(det)))
        thrs = torch.where(again, t2, thrs)
        det = scores > thrs[:, None]
    c = det.sum(1)
    out = (c < k_min) | (c > k_max)
    if bool(out.any()):  # outside the budget: the top-k tokens, k clamped into [k_min, k_max]
        k = c.clamp(k_min, k_max)
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(p).expand(b, p).contiguous())
        top = rank < k[:, None]
        kth = scores.gather(1, order.gather(1, (k - 1)[:, None])).squeeze(1)
        det = torch.where(out[:, None], top, det)
        thrs = torch.where(out, kth, thrs)
    act = dilate(det, cfg.ring, grid)
    if cfg.ring_floor > 0:
        act = det | (act & (scores >= cfg.ring_floor * thrs[:, None]))
    return act, det


def mask_to_index(mask: torch.Tensor) -> torch.Tensor:
    """(B, P) bool -> (B, A_max) int64 token rows in ascending order, padded with -1."""
    counts = mask.sum(1)
    a = max(1, int(counts.max().item()))
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :a]
    return torch.where(torch.arange(a) < counts[:, None], order, torch.full_like(order, -1))


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


@dataclass
class Plan:
    """Index plan of one round's active set, built once per round (:func:`make_plan`) and reused by
    every sparse step. ``K`` = active tokens of all images together (no padding)."""

    idx: torch.Tensor  # (B, A) token rows per image, -1 padded
    fidx: torch.Tensor  # (K,) rows of the (B*P) target view, row-major (image, slot) order
    kidx: torch.Tensor  # (K,) rows of the (B*N) K/V view
    pidx: torch.Tensor  # (K,) patch position of each active token
    posc: torch.Tensor | None  # (B*A,) packed row of each padded attention slot (None: every image has A tokens)
    vpos: torch.Tensor | None  # (K,) the valid slots of the (B*A) padded order (None: no padding)
    sr: torch.Tensor | None = None  # (K, patch_dim) the active tokens' source patches (constant within a round)
    src_emb: torch.Tensor | None = None  # (K, D) their share of the target embedding: source half of x_in + bias + pos + type


def _src_embed(model: EditDiT, sr: torch.Tensor, pidx: torch.Tensor) -> torch.Tensor:
    """The source-patch half of :meth:`EditDiT.embed_target` (plus bias, position and type), (K, D)."""
    w = model.x_in.weight
    return torch.addmm(model.x_in.bias + model.type_emb[0], sr, w[:, sr.shape[-1]:].t()) + model.pos[pidx]


def make_plan(idx: torch.Tensor, p: int, n: int, model: EditDiT | None = None, src_tok: torch.Tensor | None = None) -> Plan:
    """Flat (unpadded) row indices of the active tokens ``idx`` (B, A; -1 padded) of a batch with
    ``p`` target tokens and ``n`` keys per image. With ``model`` and ``src_tok`` (B, P, patch_dim)
    the plan also carries the active tokens' source rows and source embedding (constant per round)."""
    valid = idx >= 0
    bs = torch.arange(idx.shape[0], device=idx.device)[:, None].expand_as(idx)[valid]
    rows = idx[valid]
    if bool(valid.all()):
        posc = vpos = None
    else:
        pos = torch.full(idx.shape, -1, dtype=torch.long, device=idx.device)
        pos[valid] = torch.arange(rows.numel(), device=idx.device)
        posc, vpos = pos.clamp_min(0).reshape(-1), valid.reshape(-1).nonzero().squeeze(1)
    plan = Plan(idx, bs * p + rows, bs * n + rows, rows, posc, vpos)
    if model is not None and src_tok is not None:
        plan.sr = src_tok.reshape(-1, src_tok.shape[-1]).index_select(0, plan.fidx)
        plan.src_emb = _src_embed(model, plan.sr, rows)
    return plan


StepMods = tuple[list[tuple[torch.Tensor, ...]], tuple[torch.Tensor, torch.Tensor]]


def step_mods(model: EditDiT, t: torch.Tensor) -> list[StepMods]:
    """adaLN modulations of every block at each time of ``t`` (S,), computed in one batched pass: per
    time ``([(shift1, 1+scale1, gate1, shift2, 1+scale2, gate2) per block], (shift, 1+scale))``, each (D,)."""
    e = F.silu(model.temb(t))
    blocks = []
    for blk in model.blocks:
        sh1, sc1, g1, sh2, sc2, g2 = blk.mod(e).chunk(6, dim=-1)
        blocks.append((sh1, 1 + sc1, g1, sh2, 1 + sc2, g2))
    fs, fc = model.final_mod(e).chunk(2, dim=-1)
    fc = 1 + fc
    return [([tuple(m[i] for m in bm) for bm in blocks], (fs[i], fc[i])) for i in range(t.shape[0])]


def cached_step(model: EditDiT, x_tok: torch.Tensor, src_tok: torch.Tensor, t: torch.Tensor, idx: torch.Tensor,
                zero: StepZero, refresh_kv: bool = True, impl: str = "auto", plan: Plan | None = None,
                mods: StepMods | None = None) -> torch.Tensor:
    """One sampling step computing only the rows ``idx`` (B, A; -1 padded) of the target tokens.

    The active tokens of all images are packed into one contiguous (K, D) slab (no padding) that
    carries their hidden states through the blocks; only the attention pads queries per image to A
    (when counts differ). All images share the timestep ``t`` (B,). ``plan`` (:func:`make_plan`) and
    ``mods`` (:func:`step_mods`) may be precomputed once per round. Updates the K/V caches (if
    ``refresh_kv``) and ``zero.v`` (the velocity buffer) in place at the active rows and returns
    ``zero.v``. On CUDA (or ``impl='triton'``) the Triton kernels of :mod:`npukit.kernels.cacheedit`
    do the gathers and scatters on the cached hidden states ``zero.hidden`` (updated there too).
    """
    if not bool((t == t[0]).all()):
        raise ConfigError("cached_step: all images of a batch must share the timestep")
    if _use_triton(zero.hidden, impl):
        return _cached_step_kernels(model, x_tok, src_tok, t, idx, zero, refresh_kv, impl)
    cfg = model.cfg
    b, a = idx.shape
    p, d = cfg.tokens, cfg.dim
    n = zero.k[0].shape[1]
    plan = plan if plan is not None else make_plan(idx, p, n)
    blk_mods, (fsh, fsc) = mods if mods is not None else step_mods(model, t[:1])[0]
    fidx = plan.fidx
    xr = x_tok.reshape(b * p, -1).index_select(0, fidx)
    if plan.sr is not None and plan.src_emb is not None:
        sr, base = plan.sr, plan.src_emb
    else:
        sr = src_tok.reshape(b * p, -1).index_select(0, fidx)
        base = _src_embed(model, sr, plan.pidx)
    ha = torch.addmm(base, xr, model.x_in.weight[:, : xr.shape[-1]].t())  # (K, D) the packed slab = embed_target
    for li, blk in enumerate(model.blocks):
        sh1, sc1, g1, sh2, sc2, g2 = blk_mods[li]
        q, k, v = blk.qkv(F.layer_norm(ha, (d,), sc1, sh1)).chunk(3, dim=-1)  # LN(h) * (1 + scale) + shift, fused
        if refresh_kv:
            zero.k[li].view(b * n, d).index_copy_(0, plan.kidx, k)
            zero.vv[li].view(b * n, d).index_copy_(0, plan.kidx, v)
        qa = q.view(b, a, d) if plan.posc is None else q.index_select(0, plan.posc).view(b, a, d)
        o = active_attention(qa, zero.k[li], zero.vv[li], cfg.heads).reshape(b * a, d)
        if plan.vpos is not None:
            o = o.index_select(0, plan.vpos)
        ha = torch.addcmul(ha, g1, blk.proj(o))
        ha = torch.addcmul(ha, g2, blk.mlp(F.layer_norm(ha, (d,), sc2, sh2)))
    res = model.out(F.layer_norm(ha, (d,), fsc, fsh))
    v_act = (xr - sr - res) / t[0].clamp_min(1e-3)
    zero.v.view(b * p, -1).index_copy_(0, fidx, v_act)
    return zero.v


def _cached_step_kernels(model: EditDiT, x_tok: torch.Tensor, src_tok: torch.Tensor, t: torch.Tensor, idx: torch.Tensor,
                         zero: StepZero, refresh_kv: bool, impl: str) -> torch.Tensor:
    """:func:`cached_step` through the sparse-token kernel entry points (gather with fused adaLN,
    residual scatter into the cached hidden states, K/V cache update), as on CUDA."""
    cfg = model.cfg
    b, a = idx.shape
    p, d = cfg.tokens, cfg.dim
    n = zero.k[0].shape[1]
    plan = make_plan(idx, p, n)
    fidx, kidx = plan.fidx[None], plan.kidx[None]
    posc = plan.posc if plan.posc is not None else torch.arange(b * a, device=idx.device)
    temb = model.temb(t[:1])
    h = zero.hidden.view(1, b * p, d)
    xr = x_tok.reshape(b * p, -1).index_select(0, fidx[0])[None]
    sr = src_tok.reshape(b * p, -1).index_select(0, fidx[0])[None]
    scatter_residual(h, fidx, model.embed_target(xr, sr, idx=plan.pidx), None, impl=impl)
    for li, blk in enumerate(model.blocks):
        sh1, sc1, g1, sh2, sc2, g2 = _mods(blk, temb)
        q, k, v = blk.qkv(gather_modulate(h, fidx, sh1, sc1, impl=impl)).chunk(3, dim=-1)
        if refresh_kv:
            kv_update(zero.k[li].view(1, b * n, d), zero.vv[li].view(1, b * n, d), kidx, k, v, impl=impl)
        o = active_attention(q[0].index_select(0, posc).view(b, a, d), zero.k[li], zero.vv[li], cfg.heads).reshape(b * a, d)
        if plan.vpos is not None:
            o = o.index_select(0, plan.vpos)
        scatter_residual(h, fidx, blk.proj(o)[None], g1, impl=impl)
        scatter_residual(h, fidx, blk.mlp(gather_modulate(h, fidx, sh2, sc2, impl=impl)), g2, impl=impl)
    shift, scale = model.final_mod(F.silu(temb)).chunk(2, dim=-1)
    res = model.out(gather_modulate(h, fidx, shift, scale, impl=impl))
    v_act = model.to_velocity(res, xr, sr, t[:1])
    scatter_residual(zero.v.view(1, b * p, -1), fidx, v_act, None, impl=impl)
    return zero.v


def divergence(h: torch.Tensor, ref: torch.Tensor, tokens: int, score: str = "l2") -> torch.Tensor:
    """Per target token divergence of activations, (B, P): the L2 distance (``score='l2'``), its
    logarithm (``'log'``; Otsu then splits the heavy-tailed distances more evenly) or the distance
    relative to the reference activation's norm (``'rel'``)."""
    d = (h[:, :tokens] - ref[:, :tokens]).float().norm(dim=-1)
    if score == "log":
        return torch.log(d + 1e-6)
    if score == "rel":
        return d / ref[:, :tokens].float().norm(dim=-1).clamp_min(1e-6)
    return d
