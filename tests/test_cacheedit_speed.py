"""CacheEdit speed-path features: batched selection, the per-round index plan and modulation table,
the trailing full step, K/V forecasting, the ``cacheedit+step`` hybrid and opt-in change indicators."""

from __future__ import annotations

import pytest
import torch
from _cacheedit_util import edit_batch, tiny_model

from npukit.models import cacheedit as ce
from npukit.models._cacheedit_cache import (
    _mods,
    cached_step,
    divergence,
    full_step,
    make_plan,
    mask_to_index,
    otsu_threshold,
    otsu_thresholds,
    step_mods,
)
from npukit.models._cacheedit_dit import patchify
from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger


def _exec_tokens(led: Ledger, scope: str, cfg: ce.DiTConfig, images: int) -> int:
    """Query tokens per image executed by block 0 of one step (from its executed MACs)."""
    macs = sum(n for (sc, _, a, _), n in led.counts.items() if a == "mac" and sc == f"executed/{scope}/block0")
    per = ce.block_macs(cfg, 1, cfg.seq) - ce.block_macs(cfg, 0, cfg.seq)
    return round(macs / images / per)


def test_batched_otsu_and_selection_match_the_per_image_rule() -> None:
    g = torch.Generator().manual_seed(3)
    s = torch.rand(6, 64, generator=g) ** 3
    s[2] = 0.1 * s[2]
    s[2, 10:20] += 1.5  # a clearly bimodal image
    thr = otsu_thresholds(s)
    for i in range(6):
        assert abs(float(thr[i]) - otsu_threshold(s[i])) < 1e-5
    cfg = ce.CacheConfig(ring=1, ring_floor=0.8, min_active=0.1, max_active=0.3, levels=1)
    act, det = ce.select_active(s, cfg, 8)
    for i in range(6):  # each row alone gives the same sets
        a1, d1 = ce.select_active(s[i:i + 1], cfg, 8)
        assert torch.equal(a1[0], act[i]) and torch.equal(d1[0], det[i])
    assert torch.equal(det[2].nonzero().flatten(), torch.arange(10, 20))
    assert bool((det.sum(1) >= 7).all()) and bool((det.sum(1) <= 19).all())  # ceil(0.1 * 64), floor(0.3 * 64)


def test_two_level_otsu_keeps_only_the_top_class() -> None:
    g = torch.Generator().manual_seed(5)
    s = 0.05 * torch.rand(2, 64, generator=g)
    s[:, 0:20] += 2.0  # a medium class
    s[:, 40:45] += 3.0  # the clearly diverging tokens
    s[1, 40:45] = s[1, 0:5] = 0.02  # image 1: one class above the background only
    s[1, 50:52] += 2.0
    cfg = ce.CacheConfig(ring=0, min_active=0.0, max_active=1.0)
    _, one = ce.select_active(s, ce.CacheConfig(ring=0, min_active=0.0, max_active=1.0, levels=1), 8)
    _, two = ce.select_active(s, cfg, 8)
    assert int(one[0].sum()) == 25 and two[0].nonzero().flatten().tolist() == list(range(40, 45))
    assert int(two[1].sum()) < int(one[1].sum())  # image 1's active class is split again as well
    with pytest.raises(ConfigError, match="levels"):
        ce.CacheConfig(levels=0).check(2)


def test_mask_to_index_and_plan() -> None:
    m = torch.zeros(3, 64, dtype=torch.bool)
    m[0, [5, 1, 9]] = True
    m[1, [0]] = True
    m[2, [63, 2, 4]] = True
    idx = mask_to_index(m)
    assert idx.tolist() == [[1, 5, 9], [0, -1, -1], [2, 4, 63]]
    plan = make_plan(idx, 64, 132)
    assert plan.fidx.tolist() == [1, 5, 9, 64, 130, 132, 191]
    assert plan.kidx.tolist() == [1, 5, 9, 132, 266, 268, 327]
    assert plan.pidx.tolist() == [1, 5, 9, 0, 2, 4, 63]
    assert plan.vpos.tolist() == [0, 1, 2, 3, 6, 7, 8] and plan.posc.tolist() == [0, 1, 2, 3, 0, 0, 4, 5, 6]
    assert make_plan(idx[[0, 2]], 64, 132).posc is None  # equal counts: no padding


def test_step_mods_and_plan_reuse_match_the_plain_cached_step() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    x = torch.randn_like(src)
    t = torch.full((3,), 0.4)
    mods = step_mods(m, torch.tensor([0.9, 0.4]))[1]
    for li, blk in enumerate(m.blocks):
        want = _mods(blk, m.temb(t[:1]))
        assert torch.allclose(mods[0][li][0], want[0][0]) and torch.allclose(mods[0][li][1], 1 + want[1][0])
    idx = mask_to_index(torch.arange(64).expand(3, 64) % 5 == torch.arange(3)[:, None])
    outs = []
    for kw in ({}, {"plan": make_plan(idx, 64, m.cfg.seq), "mods": mods}):
        z = full_step(m, x, torch.ones(3), src, m.context_kv(src, ins))
        outs.append(cached_step(m, patchify(x, 4), patchify(src, 4), t, idx, z, **kw).clone())
    assert torch.allclose(outs[0], outs[1], atol=1e-6)


def test_divergence_scores() -> None:
    h, ref = torch.ones(1, 4, 3), torch.zeros(1, 4, 3)
    ref[0, 1] = 2.0
    d = divergence(h, ref, 4)
    assert torch.allclose(d[0], torch.tensor([3**0.5, 3**0.5, 3**0.5, 3**0.5]))
    rel = divergence(h, ref, 4, "rel")
    assert abs(float(rel[0, 1]) - 0.5) < 1e-6 and float(rel[0, 0]) > 1e5  # zero reference norm: clamped
    assert torch.allclose(divergence(h, ref, 4, "log"), torch.log(d + 1e-6))
    with pytest.raises(ConfigError, match="score"):
        ce.CacheConfig(score="cos").check(2)


def test_tail_step_is_full_and_stride_skips_steps() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    steps, cfg = 8, m.cfg
    led = Ledger()
    noise = torch.randn_like(src)
    base = dict(ring=0, max_active=0.2, min_active=0.2)
    r = ce.edit_round(m, src, ins, noise, "cacheedit", steps=steps, ledger=led, scope="ce",
                      cache=ce.CacheConfig(tail=1, **base))
    a = int(r.active.sum(1).float().mean().round())
    assert _exec_tokens(led, "ce/step7", cfg, 3) == 64 and _exec_tokens(led, "ce/step3", cfg, 3) == a < 64
    h = ce.edit_round(m, src, ins, noise, "cacheedit+step", steps=steps, ledger=led, scope="hy",
                      cache=ce.CacheConfig(tail=1, stride=3, **base))
    ran = [_exec_tokens(led, f"hy/step{k}", cfg, 3) for k in range(steps)]
    assert ran == [64, a, 0, 0, a, 0, 0, 64]  # steps 1, 4 sparse; 2, 3, 5, 6 reuse the velocity; 7 full
    assert not torch.allclose(h.image, r.image)
    assert float((h.image - r.image).abs().mean()) < 0.5 * float((r.image - noise).abs().mean())
    with pytest.raises(ConfigError, match="stride"):
        ce.CacheConfig(stride=0).check(2)


@torch.no_grad()
def test_forecast_extrapolates_the_cached_kv_linearly() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    x = torch.randn_like(src)
    ctx = m.context_kv(src, ins)
    z0 = full_step(m, x, torch.ones(3), src, ctx)
    z1 = full_step(m, 0.8 * x + 0.2 * src, torch.full((3,), 0.8), src, ctx)
    hist = [ce._kv_snapshot(z0, 64, 1.0), ce._kv_snapshot(z1, 64, 0.8)]
    ce._kv_forecast(z1, ce._kv_slope(*hist), 64, 0.5)  # K1 + (0.5 - 0.8) (K1 - K0) / (0.8 - 1.0) = K1 + 1.5 (K1 - K0)
    want = hist[1][1][0] + 1.5 * (hist[1][1][0] - hist[0][1][0])
    assert torch.allclose(z1.k[0][:, :64], want, atol=1e-5)
    assert torch.equal(z1.k[0][:, 64:], z0.k[0][:, 64:])  # context rows untouched (exact at every step)
    r = ce.edit_round(m, src, ins, torch.randn_like(src), "cacheedit", steps=6,
                      cache=ce.CacheConfig(forecast=1, refresh_at=(2,), tail=0))
    assert r.image.shape == src.shape and bool(torch.isfinite(r.image).all())
    with pytest.raises(ConfigError, match="forecast"):
        ce.CacheConfig(forecast=2).check(2)


def test_full_computes_change_indicators_only_when_asked() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    noise = torch.randn_like(src)
    assert ce.edit_round(m, src, ins, noise, "full", steps=4).indicators is None
    with_ind = ce.edit_round(m, src, ins, noise, "full", steps=4, indicators=True)
    assert len(with_ind.indicators) == 4 and with_ind.indicators[0] == 0.0 and with_ind.indicators[2] > 0
    assert torch.equal(with_ind.image, ce.edit_round(m, src, ins, noise, "full", steps=4).image)
