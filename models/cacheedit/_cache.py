"""The Adaptive Activation Cache's token selection: divergence scores -> Otsu split -> budget -> ring dilation.

Used by the diffusers hooks (:mod:`._diffusers`) at call 0 of a round: the divergence of each
target token's deep-block activation from a reference (:func:`divergence`: ``'l2'``, its ``'log'``, or
``'rel'`` the distance relative to the reference activation's norm, which a few massive activation channels
do not dominate) is split by Otsu's histogram threshold into invariant vs active tokens (:func:`select_active`,
batched over images; ``levels=2`` splits the active class once more), clamped to the [min_active, max_active]
budget (fractions of the target tokens) and dilated by ``ring`` tokens (a ring token joins only if its score is
at least ``ring_floor`` x the threshold). :func:`ledger_totals` sums executed / skipped FLOPs and bytes of a
Ledger scope. FLOP = 2 MAC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from npukit.sim.ledger import Ledger

from ..weights import WeightsError


@dataclass(frozen=True)
class CacheConfig:
    """Selection options (see :class:`._diffusers.CacheEditConfig`, which builds this)."""

    ring: int = 0
    ring_floor: float = 0.8
    min_active: float = 0.05
    max_active: float = 0.1
    bins: int = 64
    levels: int = 2


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


# ------------------------------------------------------------------------------------------- steps


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
