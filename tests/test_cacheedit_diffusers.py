"""CacheEdit as diffusers hooks (npukit.models.cacheedit.apply_cacheedit) on tiny random FLUX / Qwen-Image
transformers. Config checks are fast; the rest builds diffusers models (importing diffusers takes ~8 s): slow."""

from __future__ import annotations

import pytest
import torch

from npukit.models.cacheedit import CacheEditConfig, apply_cacheedit, remove_cacheedit
from npukit.sim.errors import ConfigError

H = W = 4  # target token grid
P = H * W  # target tokens; FLUX Kontext / Qwen-Image-Edit add P context-image tokens
T = 5  # text tokens
TS = (1.0, 0.75, 0.5, 0.25)


# ---------------------------------------------------------------------------------------------- fast: config
class FluxTransformer2DModel(torch.nn.Module):
    """Stand-in with FLUX's block lists (the config is checked before diffusers is imported)."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer_blocks = torch.nn.ModuleList([torch.nn.Identity()])
        self.single_transformer_blocks = torch.nn.ModuleList([torch.nn.Identity()])


@pytest.mark.parametrize("kw", [
    {"layer": 2}, {"layer": -3}, {"layer": 1.0}, {"min_active": 0.5, "max_active": 0.2}, {"max_active": 1.5},
    {"ring": -1}, {"bins": 1}, {"levels": 0}, {"score": "cos"}, {"reference": "identity"}, {"warmup": 0},
    {"refresh": -1}, {"context_image": "skip"},
])
def test_bad_config_is_one_line_config_error(kw: dict) -> None:
    with pytest.raises(ConfigError) as e:
        apply_cacheedit(FluxTransformer2DModel(), CacheEditConfig(**kw))
    assert "\n" not in str(e.value)


def test_unsupported_transformer_and_config_type() -> None:
    with pytest.raises(ConfigError, match="supports FluxTransformer2DModel"):
        apply_cacheedit(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="CacheEditConfig"):
        apply_cacheedit(FluxTransformer2DModel(), {"layer": 0})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- slow: tiny models
def _ids(frame: int) -> torch.Tensor:
    i = torch.zeros(H, W, 3)
    i[..., 0] = frame
    i[..., 1] = torch.arange(H)[:, None]
    i[..., 2] = torch.arange(W)[None]
    return i.reshape(-1, 3)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def flux():
    from diffusers import FluxTransformer2DModel as Flux

    torch.manual_seed(0)
    m = Flux(num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
             pooled_projection_dim=16, in_channels=16, axes_dims_rope=(4, 6, 6)).eval()
    img_ids = torch.cat([_ids(0), _ids(1)])  # Kontext: target tokens, then the context image's (ids[:, 0] = 1)
    enc, pooled = torch.randn(1, T, 32, generator=_g(1)), torch.randn(1, 16, generator=_g(2))

    def call(x: torch.Tensor, t: float) -> torch.Tensor:
        with torch.no_grad():
            b = x.shape[0]  # a batch repeats the text
            return m(hidden_states=x, encoder_hidden_states=enc.expand(b, -1, -1), pooled_projections=pooled.expand(b, -1),
                     timestep=torch.full((b,), t), img_ids=img_ids, txt_ids=torch.zeros(T, 3), return_dict=False)[0]

    return m, call


@pytest.fixture(scope="module")
def qwen():
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(0)
    m = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16,
                                    num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6),
                                    zero_cond_t=True).eval()  # zero_cond_t: Qwen-Image-Edit's per-token modulate_index
    enc = torch.randn(1, T, 32, generator=_g(1))
    mask = torch.ones(1, T, dtype=torch.bool)
    mask[:, -1] = False  # a padded text token

    def call(x: torch.Tensor, t: float) -> torch.Tensor:
        with torch.no_grad():
            b = x.shape[0]  # a batch repeats the text
            return m(hidden_states=x, encoder_hidden_states=enc.expand(b, -1, -1), encoder_hidden_states_mask=mask.expand(b, -1),
                     timestep=torch.full((b,), t), img_shapes=[[(1, H, W), (1, H, W)]] * b, return_dict=False)[0]

    return m, call


def _inputs() -> list[torch.Tensor]:
    return [torch.randn(1, 2 * P, 16, generator=_g(10 + k)) for k in range(len(TS))]


def _mask(k: int) -> torch.Tensor:
    m = torch.zeros(P, dtype=torch.bool)
    m[torch.randperm(P, generator=_g(3))[:k]] = True
    return m


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flux", "qwen"])
def test_all_active_equals_unhooked(name: str, request: pytest.FixtureRequest) -> None:
    m, call = request.getfixturevalue(name)
    xs = _inputs()
    ref = [call(x, t) for x, t in zip(xs, TS, strict=True)]
    st = apply_cacheedit(m, CacheEditConfig())
    try:
        st.force_active(torch.ones(P, dtype=torch.bool))
        for k, (x, t) in enumerate(zip(xs, TS, strict=True)):
            out = call(x, t)
            assert st.rows is None if k == 0 else st.rows.numel() == 2 * P
            assert (out - ref[k]).abs().max() < 1e-5, k
        assert st.scores is not None and st.scores.shape == (1, P) and st.target == P
    finally:
        remove_cacheedit(m)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "ctx"), [("flux", "compute"), ("flux", "cache"), ("qwen", "compute")])
def test_sparse_step_with_exact_cache_equals_unhooked(name: str, ctx: str, request: pytest.FixtureRequest) -> None:
    """A sparse step on the inputs of the last full step: the cached K/V and block outputs are then exact,
    so skipping 11 of 16 target tokens must still give the unhooked output for every token."""
    m, call = request.getfixturevalue(name)
    x = _inputs()[0]
    ref = call(x, 0.6)
    st = apply_cacheedit(m, CacheEditConfig(context_image=ctx))
    try:
        st.force_active(_mask(5))
        assert (call(x, 0.6) - ref).abs().max() < 1e-5  # full
        out = call(x, 0.6)  # sparse
        assert st.rows is not None and st.rows.numel() == 5 + (P if ctx == "compute" else 0)
        assert (out - ref).abs().max() < 1e-5
    finally:
        remove_cacheedit(m)


@pytest.mark.slow
def test_skipped_tokens_do_not_enter_the_blocks(flux) -> None:
    m, call = flux
    seen: list[tuple[str, int]] = []
    hooks = [blk.norm1.register_forward_pre_hook(lambda mod, a, n=f"d{i}": seen.append((n, a[0].shape[1])))
             for i, blk in enumerate(m.transformer_blocks)]
    hooks += [blk.norm.register_forward_pre_hook(lambda mod, a, n=f"s{i}": seen.append((n, a[0].shape[1] - T)))
              for i, blk in enumerate(m.single_transformer_blocks)]
    st = apply_cacheedit(m, CacheEditConfig(refresh=3))
    try:
        st.force_active(_mask(5))
        for x, t in zip(_inputs(), TS, strict=True):
            call(x, t)
        names = ["d0", "d1", "s0", "s1"]
        # calls 0 and 3 are full (warmup, refresh=3): every image token; calls 1, 2: 5 active + 16 context tokens
        want = [(n, c) for c in (2 * P, 5 + P, 5 + P, 2 * P) for n in names]
        assert seen == want
        assert st.executed == [2 * P, 5 + P, 5 + P, 2 * P]
        # the divergence selection (no override): the budget [5%, 10%] of 16 tokens is one token, after new_round
        seen.clear()
        st.force_active(None)
        st.new_round()
        for x, t in zip(_inputs()[:2], TS[:2], strict=True):
            call(x, t)
        assert st.active is not None and int(st.active.sum()) == 1
        assert seen[len(names):] == [(n, 1 + P) for n in names]
        remove_cacheedit(m)
        seen.clear()
        st = apply_cacheedit(m, CacheEditConfig(context_image="cache"))  # the context image's tokens cached too
        st.force_active(_mask(5))
        for x, t in zip(_inputs()[:2], TS[:2], strict=True):
            call(x, t)
        assert seen == [(n, 2 * P) for n in names] + [(n, 5) for n in names]
    finally:
        for h in hooks:
            h.remove()
        remove_cacheedit(m)


@pytest.mark.slow
def test_remove_restores_the_unhooked_model(flux) -> None:
    m, call = flux
    xs = _inputs()
    ref = [call(x, t) for x, t in zip(xs, TS, strict=True)]
    procs = [blk.attn.processor for blk in [*m.transformer_blocks, *m.single_transformer_blocks]]
    st = apply_cacheedit(m, CacheEditConfig())
    with pytest.raises(ConfigError, match="already applied"):
        apply_cacheedit(m)
    st.force_active(_mask(3))
    for x, t in zip(xs, TS, strict=True):
        call(x, t)
    remove_cacheedit(m)
    remove_cacheedit(m)  # a no-op the second time
    assert [blk.attn.processor for blk in [*m.transformer_blocks, *m.single_transformer_blocks]] == procs
    assert all(torch.equal(call(x, t), r) for x, t, r in zip(xs, TS, ref, strict=True))
    assert not m._diffusers_hook.hooks and not m.transformer_blocks[0]._diffusers_hook.hooks
    st2 = apply_cacheedit(m)  # applies again after removal
    assert st2 is not st
    remove_cacheedit(m)


@pytest.mark.slow
def test_changed_image_size_needs_a_new_round(flux) -> None:
    m, call = flux
    st = apply_cacheedit(m)
    try:
        call(_inputs()[0], 1.0)
        with pytest.raises(ConfigError, match="new_round"):
            st.state()._begin(3 * P, P, (H, W))
        with pytest.raises(ConfigError, match="bool tensor"):
            st.force_active(torch.ones(P))
    finally:
        remove_cacheedit(m)


@pytest.mark.slow
def test_cache_contexts_count_and_cache_separately(qwen) -> None:
    """True CFG: interleaved 'cond' / 'uncond' calls (different text) each keep their own step count and caches."""
    m, call = qwen
    xs = _inputs()
    ref = [call(x, t) for x, t in zip(xs, TS, strict=True)]
    ref_u = [call(x.flip(1), t) for x, t in zip(xs, TS, strict=True)]
    st = apply_cacheedit(m)
    try:
        st.force_active(torch.ones(P, dtype=torch.bool))
        for k, (x, t) in enumerate(zip(xs, TS, strict=True)):
            with m.cache_context("cond"):
                assert (call(x, t) - ref[k]).abs().max() < 1e-5
            with m.cache_context("uncond"):
                assert (call(x.flip(1), t) - ref_u[k]).abs().max() < 1e-5
        assert sorted(st.branches) == ["cond", "uncond"]
        assert st.state("cond").step == st.state("uncond").step == len(TS)
        m._reset_stateful_cache()  # what a pipeline's maybe_free_model_hooks() does at the end of a call
        assert st.state("cond").step == 0 and st.state("cond").rounds == 1 and st.state("cond").prev_h is not None
        st.new_round()
        assert st.state("uncond").rounds == 2
    finally:
        remove_cacheedit(m)


@pytest.mark.slow
def test_reference_previous_round_or_block_input(flux) -> None:
    """Round 1 scores block ``layer`` against its input; round 2 against round 1's call-0 activation, which on
    the same inputs is identical (scores 0); ``reference='input'`` keeps scoring against the block input."""
    m, call = flux
    x = _inputs()[0]
    for ref, zero in (("previous", True), ("input", False)):
        st = apply_cacheedit(m, CacheEditConfig(reference=ref, layer=1))
        try:
            call(x, 1.0)
            first = st.scores.clone()
            assert bool((first > 0).all())
            st.new_round()
            call(x, 1.0)
            assert bool((st.scores.abs() < 1e-6).all()) == zero
            if not zero:
                assert torch.allclose(st.scores, first)
        finally:
            remove_cacheedit(m)


def test_padded_rows_pads_with_highest_scores_and_shares_equal_rows() -> None:
    from npukit.models.cacheedit._diffusers import padded_rows

    act = torch.tensor([[True, False, False, True, False], [False, False, True, False, False]])
    scores = torch.tensor([[9.0, 1.0, 2.0, 8.0, 3.0], [0.0, 5.0, 9.0, 1.0, 4.0]])
    assert padded_rows(act, scores).tolist() == [[0, 3], [1, 2]]  # image 1: its active 2 plus its best other (1)
    assert padded_rows(act).tolist() == [[0, 3], [0, 2]]  # no scores: the lowest-index other token
    assert padded_rows(act[:1], scores[:1]).tolist() == [[0, 3]]
    same = torch.tensor([[True, False, True], [True, False, True]])
    assert padded_rows(same).tolist() == [[0, 2]]  # equal rows are shared: (1, A)
    assert padded_rows(torch.zeros(2, 3, dtype=torch.bool)).shape == (1, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["flux", "qwen"])
def test_batch_rows_per_image_equal_each_image_alone(name: str, request: pytest.FixtureRequest) -> None:
    """Two images with different forced active sets in one batch: each image's sparse output equals that image
    run alone with its own padded rows (per-image gathers, RoPE rows, K/V splice and scatter)."""
    m, call = request.getfixturevalue(name)
    xs = _inputs()
    a, b = _mask(3), _mask(5).roll(2)
    masks = torch.stack([a, b])
    from npukit.models.cacheedit._diffusers import padded_rows

    rows = padded_rows(masks)
    assert rows.shape == (2, 5)
    outs = []
    for i in range(2):  # alone: image i, forced to its padded rows
        st = apply_cacheedit(m)
        try:
            st.force_active(torch.zeros(P, dtype=torch.bool).index_fill(0, rows[i], True))
            call(xs[0] if i == 0 else xs[1], TS[0])
            outs.append(call(xs[2] if i == 0 else xs[3], TS[1]))
        finally:
            remove_cacheedit(m)
    st = apply_cacheedit(m)
    try:
        st.force_active(masks)
        call(torch.cat([xs[0], xs[1]]), TS[0])
        got = call(torch.cat([xs[2], xs[3]]), TS[1])
        assert st.rows.shape == (2, 5 + P)  # + the context-image rows (context_image='compute')
        assert st.executed == [2 * P, 5 + P]
        for i in range(2):
            assert (got[i:i + 1] - outs[i]).abs().max() < 1e-5
        full = call(torch.cat([xs[2], xs[3]]), TS[1])  # still sparse: differs from ...
        remove_cacheedit(m)
        unhooked = call(torch.cat([xs[2], xs[3]]), TS[1])
        assert (full - unhooked).abs().max() > 1e-4  # ... the unhooked call (the cache is used)
    finally:
        remove_cacheedit(m)
