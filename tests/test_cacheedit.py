"""CacheEdit: dataset, DiT, the Adaptive Activation Cache, baselines and Ledger accounting."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _cacheedit_util import edit_batch, tiny_model

from npukit.models import cacheedit as ce
from npukit.models._cacheedit_baselines import calibrate_threshold, schedule
from npukit.models._cacheedit_cache import cached_step, full_step, mask_to_index
from npukit.models._cacheedit_data import MOVE_PX, OPS, Obj, Scene, apply_edit, make_batch, make_session
from npukit.models._cacheedit_dit import patchify, unpatchify
from npukit.models._cacheedit_metrics import TEXTURE_SMOOTH, edit_correct, iou, patch_mask, psnr_db, ssim
from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger


# ------------------------------------------------------------------------------------------ dataset
def test_sessions_are_valid_and_small() -> None:
    rng = np.random.default_rng(0)
    for _ in range(5):
        src, instrs, tgts, masks = make_session(rng, 3)
        assert len(instrs) == len(tgts) == len(masks) == 3
        prev = src
        for ins, tgt, m in zip(instrs, tgts, masks, strict=True):
            assert 0 < m.mean() <= 0.25 and ins[0] != 0
            diff = np.abs(prev - tgt).max(axis=0) > 1e-4
            assert np.array_equal(diff, m)  # the mask is exactly where the image changes
            prev = tgt


def test_move_moves_the_named_object() -> None:
    bg = np.zeros((3, 32, 32), dtype=np.float32)
    scene = Scene(bg, [Obj(0, 0, 10, 10, 3), Obj(1, 2, 24, 24, 3)])
    after = apply_edit(scene, (OPS.index("move"), 0, 1, 0))  # red right
    assert after is not None
    red = next(o for o in after.objects if o.colour == 0)
    assert (red.cy, red.cx) == (10, 10 + MOVE_PX)
    assert apply_edit(scene, (OPS.index("remove"), 4, 0, 0)) is None  # no magenta object


def test_textured_mode_draws_fresh_textures_only_for_recolor_add_resize() -> None:
    rng = np.random.default_rng(3)
    scene = Scene(np.full((3, 32, 32), 0.4, dtype=np.float32),
                  [Obj(0, 0, 10, 10, 4, (1.0, 3.0, 0.5, 1.0, 2.0, 0.15)), Obj(1, 2, 22, 22, 3, (2.0, 2.5, 0.0, 0.0, 0.0, 0.2))])
    img = scene.render()
    red = img[:, 6:15, 6:15]
    assert red.std() > 0.02 and abs(float(red[0].mean()) - 0.95) < 0.1  # textured around the palette colour
    moved = apply_edit(scene, (OPS.index("move"), 0, 3, 0), rng=rng)  # red down: texture travels with it
    assert moved is not None and moved.objects[0].tex == scene.objects[0].tex
    a, b = moved.render()[:, 6 + MOVE_PX:15 + MOVE_PX, 6:15], img[:, 6:15, 6:15]
    assert np.allclose(a, b)
    recs = [apply_edit(scene, (OPS.index("recolor"), 0, 3, 0), rng=rng) for _ in range(2)]
    assert recs[0] is not None and recs[1] is not None and recs[0].objects[0].tex != recs[1].objects[0].tex
    assert apply_edit(scene, (OPS.index("recolor"), 0, 3, 0)).objects[0].tex == scene.objects[0].tex  # no rng: kept
    src, ins, tgt, mask = make_batch(np.random.default_rng(0), 400, keep_prob=0.0, texture=True,
                                     op_weights=(0, 0.15, 0.3, 0.25, 0.1, 0.2))
    counts = np.bincount(ins[:, 0], minlength=len(OPS))
    assert counts[OPS.index("move")] > counts[OPS.index("remove")] and counts[OPS.index("add")] >= 8


def test_smoothed_edit_correct_ignores_texture_but_not_colour() -> None:
    rng = np.random.default_rng(5)
    bg = np.full((3, 32, 32), 0.4, dtype=np.float32)
    base = Scene(bg, [Obj(0, 0, 12, 12, 5, (1.0, 3.0, 0.3, 0.0, 0.0, 0.15))])
    outs, tgts = [], []
    for _ in range(6):  # the same recolour twice, each with its own random texture: both carry out the instruction
        a, b = (apply_edit(base, (OPS.index("recolor"), 0, 2, 0), rng=rng) for _ in range(2))
        outs.append(a.render())
        tgts.append(b.render())
    wrong = apply_edit(base, (OPS.index("recolor"), 0, 5, 0), rng=rng).render()  # cyan instead of blue
    to = lambda x: torch.from_numpy(np.stack(x) * 2 - 1)  # noqa: E731
    src, tgt, out = to([base.render()] * 6), to(tgts), to(outs)
    mask = torch.from_numpy(np.stack([np.abs(base.render() - t).max(0) > 1e-4 for t in tgts]))
    assert edit_correct(out, src, tgt, mask, smooth=5).float().mean() >= 5 / 6
    assert not edit_correct(to([wrong] * 6), src, tgt, mask, smooth=5).any()
    assert not edit_correct(src, src, tgt, mask, smooth=5).any()


def test_shaded_mode_draws_a_fresh_shade_only_for_recolor_and_add() -> None:
    from npukit.models._cacheedit_data import SHADES

    rng = np.random.default_rng(4)
    scene = Scene(np.full((3, 32, 32), 0.4, dtype=np.float32), [Obj(0, 0, 8, 8, 4, shade=0.5), Obj(1, 2, 22, 22, 3)])
    assert np.allclose(scene.render()[:, 10, 10], [0.475, 0.075, 0.075])  # palette red x 0.5
    for op, a, b in (("move", 3, 0), ("resize", 1, 0), ("remove", 0, 0)):
        after = apply_edit(scene, (OPS.index(op), 0, a, b), rng=rng, mode="shade")
        assert after is not None and all(o.shade == 0.5 for o in after.objects if o.colour == 0)
    recs = {apply_edit(scene, (OPS.index("recolor"), 0, 3, 0), rng=rng, mode="shade").objects[0].shade for _ in range(40)}
    assert recs == set(SHADES)  # every shade is drawn, none other
    adds = {next(o for o in apply_edit(scene, (OPS.index("add"), 4, 0, 9), rng=rng, mode="shade").objects if o.colour == 4).shade
            for _ in range(40)}
    assert adds == set(SHADES)
    assert apply_edit(scene, (OPS.index("recolor"), 0, 3, 0)).objects[0].shade == 0.5  # no rng: kept
    with pytest.raises(ValueError, match="texture or shade"):
        make_batch(np.random.default_rng(0), 2, texture=True, shade=True)
    with pytest.raises(ValueError, match="mode"):
        apply_edit(scene, (OPS.index("recolor"), 0, 3, 0), rng=rng, mode="tint")
    a, b = (make_batch(np.random.default_rng(9), 6, shade=True) for _ in range(2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))  # deterministic given the seed


def test_chroma_edit_correct_ignores_brightness_but_not_hue() -> None:
    bg = np.full((3, 32, 32), 0.4, dtype=np.float32)
    base = Scene(bg, [Obj(0, 0, 12, 12, 5)])
    to = lambda x: torch.from_numpy(np.stack(x) * 2 - 1)  # noqa: E731
    tgt_s = apply_edit(base, (OPS.index("recolor"), 0, 2, 0))
    tgt_s.objects[0].shade = 0.7
    other = apply_edit(base, (OPS.index("recolor"), 0, 2, 0))  # the same blue at full brightness
    wrong = apply_edit(base, (OPS.index("recolor"), 0, 5, 0))  # cyan instead of blue
    src, tgt = to([base.render()]), to([tgt_s.render()])
    mask = torch.from_numpy(np.abs(base.render() - tgt_s.render()).max(0)[None] > 1e-4)
    assert edit_correct(to([other.render()]), src, tgt, mask, chroma=True).all()
    assert not edit_correct(to([other.render()]), src, tgt, mask).any()  # plain colour: the brightness counts
    assert not edit_correct(to([wrong.render()]), src, tgt, mask, chroma=True).any()
    assert not edit_correct(src, src, tgt, mask, chroma=True).any()
    moved = to([apply_edit(tgt_s, (OPS.index("move"), 2, 0, 0)).render()])  # right hue, wrong place
    assert not edit_correct(moved, src, tgt, mask, chroma=True).any()


# ------------------------------------------------------------------------------------------ model
def test_patchify_roundtrip_and_full_step_matches_forward() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    x = torch.randn_like(src)
    assert torch.equal(unpatchify(patchify(x, 4), 4), x)
    t = torch.full((3,), 0.7)
    z = full_step(m, x, t, src, m.context_kv(src, ins))
    assert torch.allclose(unpatchify(z.v, 4), m(x, t, src, ins), atol=1e-6)


def test_cached_step_with_all_target_rows_reproduces_full_step() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    x, t = torch.randn_like(src), torch.ones(3)
    z = full_step(m, x, t, src, m.context_kv(src, ins))
    v0 = z.v.clone()
    idx = torch.arange(64).expand(3, 64).clone()
    idx[1, 40:] = -1  # padding: rows 40.. of image 1 keep the step-0 velocity
    z.v.zero_()
    v = cached_step(m, patchify(x, 4), patchify(src, 4), t, idx, z)
    assert torch.allclose(v[0], v0[0], atol=1e-5) and torch.allclose(v[1, :40], v0[1, :40], atol=1e-5)
    assert v[1, 40:].abs().max() == 0  # untouched rows stay as they were


def test_cached_step_only_changes_active_rows() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    x = torch.randn_like(src)
    z = full_step(m, x, torch.ones(3), src, m.context_kv(src, ins))
    before = z.v.clone()
    idx = mask_to_index(torch.arange(64).expand(3, 64) % 7 == 0)
    v = cached_step(m, patchify(x * 0.5, 4), patchify(src, 4), torch.full((3,), 0.5), idx, z)
    changed = (v - before).abs().amax(-1) > 0
    assert torch.equal(changed, torch.arange(64).expand(3, 64) % 7 == 0)


# ------------------------------------------------------------------------------------------ selection
def test_otsu_splits_bimodal_scores_and_budget_bounds() -> None:
    g = torch.Generator().manual_seed(0)
    low, high = torch.rand(50, generator=g) * 0.2, 1 + torch.rand(14, generator=g) * 0.2
    s = torch.cat([low, high])[torch.randperm(64, generator=g)]
    thr = ce.otsu_threshold(s)
    assert float(low.max()) <= thr < float(high.min())
    act, det = ce.select_active(s[None], ce.CacheConfig(ring=0, levels=1, max_active=0.5), 8)
    assert int(det.sum()) == 14 and torch.equal(act, det) and bool((s[None][det] >= 1).all())
    _, det = ce.select_active(s[None], ce.CacheConfig(ring=0, max_active=0.1), 8)
    assert int(det.sum()) == 6  # floor(0.1 * 64)
    _, det = ce.select_active(s[None], ce.CacheConfig(ring=0, min_active=0.5, max_active=0.6), 8)
    assert int(det.sum()) == 32


def test_dilate_ring() -> None:
    m = torch.zeros(1, 64, dtype=torch.bool)
    m[0, 3 * 8 + 3] = True
    m[0, 0] = True
    d = ce.dilate(m, 1, 8)
    assert int(d.sum()) == 9 + 4
    assert int(ce.dilate(m, 2, 8).sum()) == 25 + 9 - 4  # the two squares overlap on rows/cols 1-2


def test_bad_options_raise_config_errors() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    with pytest.raises(ConfigError, match="method"):
        ce.edit_round(m, src, ins, torch.randn_like(src), "magic")
    with pytest.raises(ConfigError, match="min_active"):
        ce.edit_round(m, src, ins, torch.randn_like(src), "cacheedit", cache=ce.CacheConfig(min_active=0.9, max_active=0.2))
    with pytest.raises(ConfigError, match="layer"):
        ce.CacheConfig(layer=5).check(2)
    with pytest.raises(ConfigError, match="gt_mask"):
        ce.edit_round(m, src, ins, torch.randn_like(src), "oracle", steps=3)
    with pytest.raises(ConfigError, match="weights not found"):
        ce.load_model("/nonexistent/w.pt")


# ------------------------------------------------------------------------------------------ ledger and sessions
def test_ledger_accounts_executed_and_skipped_per_step_and_block() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    cfg, steps, b = m.cfg, 4, 3
    led = Ledger()
    ce.edit_round(m, src, ins, torch.randn_like(src), "full", steps=steps, ledger=led)
    res = ce.edit_round(m, src, ins, torch.randn_like(src), "cacheedit", steps=steps, ledger=led,
                        cache=ce.CacheConfig(ring=0, max_active=0.25, layer=-1, tail=0))
    full = ce.ledger_totals(led, "full")
    pp, nc = cfg.tokens, cfg.seq - cfg.tokens
    # context stream once per round: block 0 whole, the last block (1) only its K/V projection (nc x d x 2d)
    ctx_flops = 2 * b * (ce.block_macs(cfg, nc, nc) + nc * cfg.dim * 2 * cfg.dim)
    step_flops = 2 * b * 2 * ce.block_macs(cfg, pp, cfg.seq)
    assert full["flops_executed"] == steps * step_flops + ctx_flops and full["flops_skipped"] == 0
    c = ce.ledger_totals(led, "cacheedit")
    ref_flops = sum(2 * n for (sc, _, a, _), n in led.counts.items()
                    if a == "mac" and sc.startswith("executed/cacheedit/reference"))
    assert ref_flops == step_flops + ctx_flops  # identity pass (context + target) up to the last block
    assert c["flops_executed"] - ref_flops + c["flops_skipped"] == full["flops_executed"]
    n_act = res.active.sum(1)
    want_exec = 2 * 2 * sum(ce.block_macs(cfg, int(a), cfg.seq) for a in n_act) * (steps - 1)
    step_exec = sum(2 * n for (sc, _, a, _), n in led.counts.items()
                    if a == "mac" and sc.startswith("executed/cacheedit/step") and not sc.startswith("executed/cacheedit/step0/"))
    assert step_exec == want_exec
    assert "executed/cacheedit/step2/block1" in {k[0] for k in led.counts}
    assert c["bytes_skipped"] > 0 and 0 < int(n_act.max()) <= 16


def test_context_kv_of_the_last_block_skips_nothing_it_returns() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    got = m.context_kv(src, ins)
    h = m.embed_context(src, ins)  # the plain stream: every block whole
    temb = m.temb(torch.zeros(src.shape[0]))
    for li, blk in enumerate(m.blocks):
        h, k, v = blk.forward_context(h, blk.modulation(temb))
        assert torch.allclose(got[li][0], k, atol=1e-6) and torch.allclose(got[li][1], v, atol=1e-6)
    part = m.context_kv(src, ins, upto=0)
    assert len(part) == 1 and torch.allclose(part[0][0], got[0][0], atol=1e-6)


def test_session_carries_reference_across_rounds() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    led = Ledger()
    s = ce.EditSession(m, src, "cacheedit", steps=3, ledger=led, cache=ce.CacheConfig(reference="previous"))
    s.edit(ins)
    assert s.state.prev_h is not None and s.state.rounds == 1
    s.edit(ins.flip(0))
    scopes = {k[0] for k in led.counts}
    assert any(sc.startswith("executed/cacheedit/round0/reference") for sc in scopes)
    assert not any(sc.startswith("executed/cacheedit/round1/reference") for sc in scopes)
    assert len(s.results) == 2 and s.source.shape == src.shape


def test_step_reuse_schedule_and_calibration() -> None:
    ind = [0.0] + np.random.default_rng(0).uniform(0.05, 0.15, 27).tolist()
    for target in (4, 8, 14):
        thr = calibrate_threshold(ind, target)
        assert abs(sum(schedule(ind, thr)) - target) <= 2
    assert sum(schedule(ind, 0.0)) == 28
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    r = ce.edit_round(m, src, ins, torch.randn_like(src), "step-reuse", steps=8, threshold=1e9)
    assert r.steps_run == 2  # first and last only


def test_toca_baselines_use_the_given_counts() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    counts = torch.tensor([3, 7, 5])
    for meth in ("toca-random", "toca-attn"):
        r = ce.edit_round(m, src, ins, torch.randn_like(src), meth, steps=3, counts=counts)
        assert torch.equal(r.active.sum(1), counts)


def test_metrics() -> None:
    a = torch.rand(2, 3, 16, 16) * 2 - 1
    assert float(psnr_db(a, a).min()) == 100.0 and torch.allclose(ssim(a, a), torch.ones(2))
    b = a + 0.2
    assert 15 < float(psnr_db(a, b)[0]) < 30 and float(ssim(a, b)[0]) < 1
    mask = torch.zeros(2, 16, 16, dtype=torch.bool)
    mask[:, :4, :4] = True
    tgt = a.clone()
    tgt[:, :, :4, :4] = 1.0
    ok = edit_correct(tgt, a, tgt, mask)
    assert ok.all() and not edit_correct(a, a, tgt, mask).any()
    # PSNR over chosen pixels: the edited corner does not count outside, counts alone inside
    assert float(psnr_db(a, tgt, ~mask).min()) == 100.0
    err = (((a - tgt) / 2) ** 2).mean(1)[0][:4, :4].mean()
    assert float(psnr_db(a, tgt, mask)[0]) == pytest.approx(float(-10 * torch.log10(err)), rel=1e-5)
    pm = patch_mask(mask, 4)
    assert pm.shape == (2, 16) and int(pm[0].sum()) == 1 and iou(pm[0], pm[0]) == 1.0


# ------------------------------------------------------------------------------------------ the trained model
@pytest.mark.skipif(not ce.WEIGHTS.is_file(), reason="shipped weights missing")
def test_trained_model_edits_and_cache_is_faithful() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small ops: one thread is fastest and immune to a busy shared machine
    try:
        _trained_model_edits_and_cache_is_faithful()
    finally:
        torch.set_num_threads(threads)


def _trained_model_edits_and_cache_is_faithful() -> None:
    model = ce.load_model()
    # a model trained on textured / shaded edits is judged on sessions of its data mode, low-passed / on chromaticity
    texture, shade = bool(model.cfg.texture), bool(model.cfg.shade)
    rng = np.random.default_rng(777)
    sess = [make_session(rng, 1, texture=texture, shade=shade) for _ in range(8)]
    src = torch.from_numpy(np.stack([s[0] for s in sess]))
    ins = torch.tensor([s[1][0] for s in sess])
    tgt = torch.from_numpy(np.stack([s[2][0] for s in sess]))
    mask = torch.from_numpy(np.stack([s[3][0] for s in sess]))
    noise = torch.randn(src.shape, generator=torch.Generator().manual_seed(0))
    full = ce.edit_round(model, src, ins, noise, "full").image.clamp(-1, 1)
    cached = ce.edit_round(model, src, ins, noise, "cacheedit")
    assert edit_correct(full, src, tgt, mask, smooth=TEXTURE_SMOOTH if texture else 1, chroma=shade).float().mean() >= 0.6
    assert float(psnr_db(cached.image.clamp(-1, 1), full).mean()) > 25.0
    gt = patch_mask(mask, 4)
    assert np.mean([iou(cached.detected[i], gt[i]) for i in range(8)]) > 0.3


def test_invariant_source_mode_lands_on_the_source() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    r = ce.edit_round(m, src, ins, torch.randn_like(src), "cacheedit", steps=6,
                      cache=ce.CacheConfig(invariant="source", ring=0, max_active=0.3, tail=0))
    inv = ~r.active
    out, s = patchify(r.image, 4), patchify(src, 4)
    assert torch.allclose(out[inv], s[inv], atol=1e-5)
    assert not torch.allclose(out[r.active], s[r.active], atol=1e-2)
    with pytest.raises(ConfigError, match="invariant"):
        ce.CacheConfig(invariant="zero").check(2)


def test_invariant_forecast_extrapolates_x0_after_a_second_full_step() -> None:
    m = tiny_model()
    src, ins, _, _ = edit_batch()
    noise = torch.randn(src.shape, generator=torch.Generator().manual_seed(1))

    def go(invariant: str, **kw: object) -> ce.RoundResult:
        cc = ce.CacheConfig(invariant=invariant, ring=0, max_active=0.3, **kw)
        return ce.edit_round(m, src, ins, noise, "cacheedit", steps=8, cache=cc)

    # one full step before the last: forecasting from a single x0 snapshot is exactly keeping the velocity
    a, b = go("forecast", refresh=0), go("velocity", refresh=0)
    assert torch.equal(a.image, b.image)
    # a mid-round full step gives a slope: the invariant tokens' later steps change, the choice of tokens does not
    a, b = go("forecast", refresh=3, tail=0), go("velocity", refresh=3, tail=0)
    assert torch.equal(a.active, b.active)
    inv = ~a.active
    da = (patchify(a.image, 4) - patchify(b.image, 4)).abs()
    assert da[inv].max() > 1e-4
    with pytest.raises(ConfigError, match="forecast"):
        ce.CacheConfig(invariant="taylor").check(2)


def test_ring_floor_keeps_only_divergent_neighbours() -> None:
    s = torch.zeros(1, 64)
    s[0, 27] = 10.0  # detected token at (3, 3)
    s[0, 28] = 4.0  # a neighbour with some divergence
    s[0, 0] = 0.5
    cfg = ce.CacheConfig(ring=1, ring_floor=0.0, min_active=0.0, max_active=1 / 64)
    act, det = ce.select_active(s, cfg, 8)
    assert int(det.sum()) == 1 and int(act.sum()) == 9
    act, _ = ce.select_active(s, ce.CacheConfig(ring=1, ring_floor=0.3, min_active=0.0, max_active=1 / 64), 8)
    assert act[0].nonzero().flatten().tolist() == [27, 28]
