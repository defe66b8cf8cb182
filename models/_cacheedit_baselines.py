"""Baselines of the CacheEdit harness: token selection without the first-step signal, and step reuse.

* ``toca-random`` -- recompute a random set of target tokens of the same size as CacheEdit's (equal
  compute), cache the rest (ToCa-like token caching without any edit signal).
* ``toca-attn`` -- recompute the target tokens that receive the most attention in the last block at
  step 0 (ToCa's attention-score importance), same count as CacheEdit's.
* ``oracle`` -- recompute the ground-truth edit mask's patches, dilated by the same ring.
* ``step-reuse`` -- TeaCache/FORA-like whole-step reuse: accumulate the relative L1 change of the
  first block's modulated input since the last computed step and skip the step (reuse the last
  velocity) while it stays under a threshold; the first and last steps always run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._cacheedit_dit import EditDiT, patchify


def random_selection(counts: torch.Tensor, tokens: int, generator: torch.Generator) -> torch.Tensor:
    """(B, P) bool with ``counts[i]`` random tokens set per image."""
    out = torch.zeros(counts.shape[0], tokens, dtype=torch.bool)
    for i, c in enumerate(counts.tolist()):
        out[i, torch.randperm(tokens, generator=generator)[: int(c)]] = True
    return out


def topk_selection(scores: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(B, P) bool with the ``counts[i]`` highest-scoring tokens set per image."""
    out = torch.zeros_like(scores, dtype=torch.bool)
    for i, c in enumerate(counts.tolist()):
        if c > 0:
            out[i, torch.topk(scores[i], int(c)).indices] = True
    return out


def change_indicator(model: EditDiT, x: torch.Tensor, t: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """TeaCache's cheap proxy: the first block's modulated input of the target tokens, (B, P, D)."""
    cfg = model.cfg
    h = model.embed_target(patchify(x, cfg.patch), patchify(src, cfg.patch))
    sh, sc = model.blocks[0].mod(F.silu(model.temb(t))).chunk(6, dim=-1)[:2]
    return F.layer_norm(h, h.shape[-1:]) * (1 + sc[:, None]) + sh[:, None]


def rel_l1(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative L1 change ``|a - b|_1 / |b|_1`` over the whole batch."""
    return float((a - b).abs().mean().item() / max(b.abs().mean().item(), 1e-12))


def schedule(indicators: list[float], threshold: float) -> list[bool]:
    """Which steps run under the accumulate-and-skip rule, given per-step changes ``indicators[k]``
    (change from step k-1 to k; entry 0 unused). First and last steps always run."""
    n = len(indicators)
    run, acc = [], 0.0
    for k in range(n):
        if k == 0 or k == n - 1:
            run.append(True)
            acc = 0.0
            continue
        acc += indicators[k]
        if acc >= threshold:
            run.append(True)
            acc = 0.0
        else:
            run.append(False)
    return run


def calibrate_threshold(indicators: list[float], target_steps: int) -> float:
    """Threshold (bisection) at which :func:`schedule` runs about ``target_steps`` steps."""
    lo, hi = 0.0, max(sum(indicators), 1e-9) * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        if sum(schedule(indicators, mid)) > target_steps:
            lo = mid
        else:
            hi = mid
    return hi
