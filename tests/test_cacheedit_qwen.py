"""CacheEdit inside the unmodified diffusers QwenImageEditPipeline: tiny components built offline
(``tiny_qwen_edit_pipeline`` in tests/_cacheedit_util.py), two rounds through ``pipeline_rounds`` with true CFG
(a negative prompt: the pipeline's "cond" / "uncond" cache contexts), unhooked and with ``apply_cacheedit`` on
``pipe.transformer``. Slow: importing diffusers takes seconds, and every call VAE-encodes the ~1 megapixel context
image the pipeline resizes its input to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
from _cacheedit_util import tiny_qwen_edit_pipeline

from npukit.models import cacheedit as ce

PROMPTS = ["make it red", "move it left"]
KW = dict(num_inference_steps=3, negative_prompt="blurry", true_cfg_scale=4.0)
# input image (h, w) px, output (height, width) px, target and context tokens: the pipeline resizes the input to
# ~1 megapixel (1024 x 1024 px: 16 x 16 tokens; 2:1, 736 x 1440 px: 11 x 22), the output is 256 px / 32 (VAE) / 2
# (patch) = 4 x 4 tokens (128 x 256 px: 2 x 4)
LAYOUTS = {"square": ((64, 64), (256, 256), 16, 256), "wide": ((48, 96), (128, 256), 8, 242)}
TARGET, CONTEXT = 16, 256  # the square layout's
CALLS = 2 * 3 * 2  # rounds x steps x (cond, uncond)

# one torch thread (conftest): on the shared 2-core machine two threads made these runs 3x slower
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@dataclass
class Run:
    images: list[Any]
    out: list[torch.Tensor] = field(default_factory=list)  # every transformer call's output
    macs: list[int] = field(default_factory=list)  # executed MACs of every call (WorkCounter)
    rows: list[int] = field(default_factory=list)  # image rows each block ran (hooked runs)
    sparse: list[bool] = field(default_factory=list)  # the call ran the sparse path (hooked runs)
    active: list[int] = field(default_factory=list)  # selected target tokens at the call (hooked runs)


def _run(pipe: Any, handle: ce.CacheEdit | None = None, layout: str = "square") -> Run:
    """Two rounds from one random image (seed 0) of ``LAYOUTS[layout]``, recording every transformer call."""
    from PIL import Image

    rec = Run(images=[])
    counter = ce.WorkCounter(pipe.transformer)

    def on_call(mod: torch.nn.Module, args: Any, out: Any) -> None:
        rec.out.append(out[0].detach().clone())
        rec.macs.append(counter.reset()[0])
        if handle is not None:
            st = handle.state()  # still inside the pipeline's cache context
            rec.rows.append(st.executed[-1])
            rec.sparse.append(st.rows is not None)
            rec.active.append(-1 if st.active is None else int(st.active.any(0).sum()))

    hook = pipe.transformer.register_forward_hook(on_call)
    (h, w), (height, width), _, _ = LAYOUTS[layout]
    img = Image.fromarray((np.random.default_rng(0).random((h, w, 3)) * 255).astype(np.uint8))
    try:
        rec.images = ce.pipeline_rounds(pipe, img, PROMPTS, generator=torch.Generator().manual_seed(0), height=height,
                                        width=width, **KW)
    finally:
        hook.remove()
        counter.remove()
    return rec


@pytest.fixture(scope="module")
def plain() -> Any:
    """``plain(zero_cond_t, layout)``: the tiny pipeline and its unhooked run (built once per setting)."""
    got: dict[tuple[bool, str], tuple[Any, Run]] = {}

    def get(zero_cond_t: bool, layout: str = "square") -> tuple[Any, Run]:
        if (zero_cond_t, layout) not in got:
            pipe = tiny_qwen_edit_pipeline(zero_cond_t=zero_cond_t)
            got[zero_cond_t, layout] = pipe, _run(pipe, layout=layout)
        return got[zero_cond_t, layout]

    return get


def test_unhooked_pipeline_runs_two_rounds_end_to_end(plain) -> None:
    pipe, ref = plain(False)
    assert [im.size for im in ref.images] == [(256, 256)] * 2
    assert len(ref.out) == CALLS and all(o.shape == (1, TARGET + CONTEXT, 16) for o in ref.out)
    assert all(bool(torch.isfinite(o).all()) for o in ref.out)
    assert np.abs(np.asarray(ref.images[0], dtype=np.int16) - np.asarray(ref.images[1], dtype=np.int16)).max() > 0


@pytest.mark.parametrize(("zero_cond_t", "layout"), [(False, "square"), (True, "square"), (False, "wide")],
                         ids=["edit", "zero_cond_t", "wide"])
def test_all_active_hooked_rounds_equal_unhooked(plain, zero_cond_t: bool, layout: str) -> None:
    """Every target token forced active: each call after call 0 takes the sparse path (gathered rows, spliced
    K/V) yet computes every row, so every transformer output equals the unhooked one."""
    pipe, ref = plain(zero_cond_t, layout)
    _, _, target, context = LAYOUTS[layout]
    handle = ce.apply_cacheedit(pipe.transformer, ce.CacheEditConfig())
    try:
        handle.force_active(torch.ones(target, dtype=torch.bool))
        got = _run(pipe, handle, layout)
        assert handle.state("cond").grid == ((4, 4) if layout == "square" else (2, 4))  # target (h, w) tokens
        assert sorted(handle.branches) == ["cond", "uncond"]
        assert handle.state("cond").rounds == handle.state("uncond").rounds == 2  # one round per pipeline call
    finally:
        ce.remove_cacheedit(pipe.transformer)
    assert got.sparse == [False, False, True, True, True, True] * 2  # call 0 full, then sparse, per context
    assert got.rows == [target + context] * CALLS
    assert all(o.shape == (1, target + context, 16) for o in got.out)
    for k, (a, b) in enumerate(zip(got.out, ref.out, strict=True)):
        assert (a - b).abs().max() < 1e-5, k
    for a, b in zip(got.images, ref.images, strict=True):
        assert np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).max() <= 1


@pytest.mark.parametrize(("ctx", "zero_cond_t"), [("compute", False), ("cache", True)])
def test_selected_tokens_only_skip_work(plain, ctx: str, zero_cond_t: bool) -> None:
    """The divergence selection (default budget: 5-10 % of the 16 target tokens) in the real pipeline: call 0
    of each context runs in full (its MACs equal the unhooked call's), later calls run only the selected target
    tokens (plus, with ``'compute'``, the 256 context tokens; with ``zero_cond_t``, their rows of the per-token
    modulation index) and execute fewer MACs than the unhooked calls."""
    pipe, ref = plain(zero_cond_t)
    handle = ce.apply_cacheedit(pipe.transformer, ce.CacheEditConfig(context_image=ctx))
    try:
        got = _run(pipe, handle)
    finally:
        ce.remove_cacheedit(pipe.transformer)
    assert all(bool(torch.isfinite(o).all()) for o in got.out)
    assert [im.size for im in got.images] == [(256, 256)] * 2
    n = got.active[2]
    assert 1 <= n <= 2 and all(a == n for a in got.active)
    want = n + (CONTEXT if ctx == "compute" else 0)
    assert got.rows == [TARGET + CONTEXT] * 2 + [want] * 4 + [TARGET + CONTEXT] * 2 + [want] * 4
    for k, (m, full, sparse) in enumerate(zip(got.macs, ref.macs, got.sparse, strict=True)):
        assert m < full if sparse else m == full, k
    # the ~290 text tokens (byte-level template) and, with 'compute', the 256 context tokens still run every call
    saved = 1 - sum(got.macs) / sum(ref.macs)  # measured: 0.018 ('compute'), 0.32 ('cache')
    assert saved > (0.01 if ctx == "compute" else 0.25), saved
