"""CacheEdit on the Flux editor: the editor's parametrisation, the executed-work counter against a hand count,
sessions under every method (CacheEdit, oracle, ToCa-like, diffusers' caches), and the unmodified
FluxKontextPipeline on tiny components built offline, for several rounds.

The selection maths (Otsu, budget, dilation) is quick; everything building a diffusers model is slow (importing
diffusers takes seconds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _cacheedit_util import edit_batch, tiny_model

from npukit.models import cacheedit as ce

# ---------------------------------------------------------------------------------------------- fast: selection


def test_select_active_budget_and_otsu_split() -> None:
    scores = torch.tensor([[0.1, 0.1, 0.12, 0.11, 5.0, 5.2, 0.1, 0.13, 0.1]])
    act, det = ce.select_active(scores, ce.CacheConfig(min_active=0.0, max_active=1.0, levels=1), 3)
    assert det[0].nonzero().squeeze(1).tolist() == [4, 5] and torch.equal(act, det)
    act, det = ce.select_active(scores, ce.CacheConfig(min_active=0.0, max_active=1 / 9, levels=1), 3)
    assert det[0].nonzero().squeeze(1).tolist() == [5]  # budget of 1 token: the top score
    act, _ = ce.select_active(scores, ce.CacheConfig(min_active=0.0, max_active=1 / 9, levels=1, ring=1,
                                                     ring_floor=0.0), 3)
    assert act[0].nonzero().squeeze(1).tolist() == [1, 2, 4, 5, 7, 8]  # ring 1 around (row 1, col 2) of a 3x3 grid


def test_token_mask_marks_the_patches_touching_the_pixels() -> None:
    m = torch.zeros(8, 8, dtype=torch.bool)
    m[5, 1] = True
    assert ce.token_mask(m, 4).tolist() == [False, False, True, False]


# ---------------------------------------------------------------------------------------------- slow: models
@pytest.mark.slow
def test_untrained_editor_returns_the_source_exactly() -> None:
    """The output projection starts at zero: residual 0, x0 = src, and Euler on v = (x_t - src) / t lands on src."""
    src, instr, _, _ = edit_batch(2)
    out = ce.sample(tiny_model(perturb=False), src, instr, steps=4, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(out, src, atol=1e-5)
    moved = ce.sample(tiny_model(), src, instr, steps=4, generator=torch.Generator().manual_seed(0))
    assert (moved - src).abs().max() > 1e-3  # a perturbed editor does edit


def _hand_macs(cfg: ce.FluxEditorConfig, img: int, txt: int, keys: int) -> int:
    """MACs of one FluxTransformer2DModel call with ``img`` image rows and ``txt`` text rows computed per block
    (embedders and the output layer on every image token), attention over ``keys`` keys, from the config."""
    d, pd, j = cfg.heads * cfg.head_dim, cfg.patch_dim, cfg.joint_dim
    n_img_all = 2 * cfg.tokens
    embed = n_img_all * pd * d + txt * j * d + (256 * d + d * d) + (j * d + d * d)  # x, context, time, pooled
    double = (2 * 6 * d * d  # norm1, norm1_context (one row each)
              + img * (3 * d * d + d * d + 8 * d * d) + txt * (3 * d * d + d * d + 8 * d * d)  # qkv, out, ff 4x
              + 2 * (img + txt) * keys * d)
    rows = img + txt
    single = 3 * d * d + rows * (3 * d * d + 4 * d * d + 5 * d * d) + 2 * rows * keys * d  # norm, qkv, mlp, proj_out
    out = 2 * d * d + n_img_all * d * pd  # norm_out (one row), proj_out
    return embed + cfg.layers * double + cfg.single_layers * single + out


@pytest.mark.slow
def test_work_counter_matches_a_hand_count_full_and_sparse() -> None:
    ed = tiny_model()
    cfg, p = ed.cfg, ed.cfg.tokens
    src, instr, _, _ = edit_batch(1)
    counter = ce.WorkCounter(ed.transformer)
    keys = 4 + 2 * p
    with torch.no_grad():
        ed(torch.randn(src.shape), torch.ones(1), src, instr)
    macs, nbytes, calls = counter.reset()
    assert calls == 1 and macs == _hand_macs(cfg, 2 * p, 4, keys)
    mask = torch.zeros(p, dtype=torch.bool)
    mask[[3, 10, 40]] = True
    handle = ce.apply_cacheedit(ed.transformer, ce.CacheEditConfig(context_image="cache"))
    handle.force_active(mask)
    try:
        with torch.no_grad():
            ed(torch.randn(src.shape), torch.ones(1), src, instr)  # call 0: full
            counter.reset()
            ed(torch.randn(src.shape), torch.full((1,), 0.5), src, instr)  # sparse: 3 target rows in every block
        sparse, sbytes, _ = counter.reset()
    finally:
        ce.remove_cacheedit(ed.transformer)
        counter.remove()
    assert sparse == _hand_macs(cfg, 3, 4, keys)
    assert 0 < sbytes < nbytes
    from npukit.sim.ledger import Ledger

    led = Ledger()
    ce.record_work(led, "s", sparse, sbytes, macs, nbytes)
    tot = ce.ledger_totals(led, "s")
    assert tot["flops_executed"] == 2 * sparse and tot["flops_skipped"] == 2 * (macs - sparse)
    assert tot["bytes_executed"] == sbytes and tot["bytes_skipped"] == nbytes - sbytes


@pytest.mark.slow
def test_every_method_runs_a_session_and_leaves_the_model_unhooked() -> None:
    ed = tiny_model()
    src, instr, _, mask = edit_batch(1)
    ins = [instr, instr]
    noise = torch.randn(src.shape, generator=torch.Generator().manual_seed(0))
    gt = [ce.token_mask(mask[0], ed.cfg.patch)] * 2
    counter = ce.WorkCounter(ed.transformer)
    mag = ce.calibrate_mag_ratios(ed, src, instr, noise, 6)
    assert len(mag) == 6
    full = ce.edit_session(ed, src, ins, noise, "full", steps=6, counter=counter)
    knobs = {"cacheedit": 2, "cacheedit-ctx": 0, "oracle": None, "toca-random": 0.2, "toca-attn": 0.2,
             "fbcache": 0.5, "magcache": 0.5, "taylorseer": 2, "pab": 2}
    for m, k in knobs.items():
        r = ce.edit_session(ed, src, ins, noise, m, k, steps=6, gt_masks=gt, mag_ratios=mag, counter=counter)
        assert len(r.images) == 2 and all(bool(torch.isfinite(x).all()) for x in r.images), m
        assert 0 < r.macs <= full.macs * 1.2, m  # cacheedit's reference pass may add a call
        if m in ("oracle", "toca-random", "toca-attn"):
            assert [int(a.sum()) for a in r.active] == ([int(gt[0].sum())] * 2 if m == "oracle" else [13, 13]), m
            assert r.macs < 0.8 * full.macs, m
        again = ce.edit_session(ed, src, ins, noise, "full", steps=6)
        assert torch.equal(again.images[-1], full.images[-1]), f"{m} left hooks behind"
    counter.remove()


@pytest.mark.slow
def test_batched_sessions_equal_each_session_alone() -> None:
    """Three sessions served together: full recomputation equals each session run alone, and CacheEdit and
    toca-attn choose each session's active set as they do alone (one set per image, not a union)."""
    ed = ce.load_editor()
    src, instr, _, _ = edit_batch(3, seed=4)
    noise = torch.randn(src.shape, generator=torch.Generator().manual_seed(1))
    ins = [instr, instr.flip(0)]
    got = {m: ce.edit_session(ed, src, ins, noise, m, steps=5) for m in ("full", "cacheedit", "toca-attn")}
    assert got["cacheedit"].active[0].shape == (3, ed.cfg.tokens)
    for i in range(3):
        one = [x[i:i + 1] for x in ins]
        alone = {m: ce.edit_session(ed, src[i:i + 1], one, noise[i:i + 1], m, steps=5) for m in got}
        assert (got["full"].images[-1][i] - alone["full"].images[-1][0]).abs().max() < 1e-5
        for m in ("cacheedit", "toca-attn"):
            assert all(torch.equal(a[i], b[0]) for a, b in zip(got[m].active, alone[m].active, strict=True)), m
    assert len({int(a.sum()) for a in got["cacheedit"].active[0]}) > 1  # the sessions' sets differ in size


@pytest.mark.slow
def test_kontext_pipeline_runs_rounds_with_cacheedit_on_tiny_components(tmp_path) -> None:
    """The unmodified FluxKontextPipeline on tiny components (VAE, CLIP and T5 encoders from configs, word-level
    tokenizers written here), hooked, for 2 rounds; every call is one round (the pipeline resets the hooks)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxKontextPipeline, FluxTransformer2DModel
    from PIL import Image
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast, T5Config, T5EncoderModel

    torch.manual_seed(0)
    vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<s>", "</s>", "make", "it", "red", "blue", "move", "left"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()

    def tok(max_len: int) -> PreTrainedTokenizerFast:
        return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                       eos_token="</s>", model_max_length=max_len)

    clip = CLIPTextModel(CLIPTextConfig(vocab_size=10, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, max_position_embeddings=16, projection_dim=16,
                                        pad_token_id=0, bos_token_id=2, eos_token_id=3)).eval()
    t5 = T5EncoderModel(T5Config(vocab_size=10, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)).eval()
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8, 8),
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        layers_per_block=1, norm_num_groups=4, sample_size=32, use_quant_conv=False,
                        use_post_quant_conv=False, shift_factor=0.0, scaling_factor=1.0).eval()
    tr = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=8,
                                num_attention_heads=2, joint_attention_dim=16, pooled_projection_dim=16,
                                guidance_embeds=True, axes_dims_rope=(2, 2, 4)).eval()
    pipe = FluxKontextPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=clip,
                               tokenizer=tok(16), text_encoder_2=t5, tokenizer_2=tok(8), transformer=tr)
    pipe.set_progress_bar_config(disable=True)
    img = Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8))
    kw = dict(height=32, width=32, num_inference_steps=3, max_sequence_length=8, guidance_scale=2.5,
              max_area=32 * 32, _auto_resize=False)
    plain = ce.pipeline_rounds(pipe, img, ["make it red", "move it left"], generator=torch.Generator().manual_seed(0), **kw)
    handle = ce.apply_cacheedit(tr, ce.CacheEditConfig(min_active=1.0, max_active=1.0, context_image="compute"))
    try:
        hooked = ce.pipeline_rounds(pipe, img, ["make it red", "move it left"],
                                    generator=torch.Generator().manual_seed(0), **kw)
        assert handle.rounds >= 2  # each pipeline call ended a round
    finally:
        ce.remove_cacheedit(tr)
    assert len(hooked) == 2 and hooked[0].size == (32, 32)
    for a, b in zip(plain, hooked, strict=True):  # every token active: the hooked pipeline computes the same
        assert np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).max() <= 1
