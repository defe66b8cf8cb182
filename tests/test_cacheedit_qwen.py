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
KW = dict(height=256, width=256, num_inference_steps=3, negative_prompt="blurry", true_cfg_scale=4.0)
TARGET = 16  # 256 px / 32 (VAE) / 2 (patch): 4 x 4 target tokens
CONTEXT = 256  # the context image at 1024 x 1024 px: 16 x 16 tokens
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


def _run(pipe: Any, handle: ce.CacheEdit | None = None) -> Run:
    """Two rounds from one 64 x 64 random image (seed 0), recording every transformer call."""
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
    img = Image.fromarray((np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8))
    try:
        rec.images = ce.pipeline_rounds(pipe, img, PROMPTS, generator=torch.Generator().manual_seed(0), **KW)
    finally:
        hook.remove()
        counter.remove()
    return rec


@pytest.fixture(scope="module")
def plain() -> Any:
    """``plain(zero_cond_t)``: the tiny pipeline and its unhooked run (built once per setting)."""
    got: dict[bool, tuple[Any, Run]] = {}

    def get(zero_cond_t: bool) -> tuple[Any, Run]:
        if zero_cond_t not in got:
            pipe = tiny_qwen_edit_pipeline(zero_cond_t=zero_cond_t)
            got[zero_cond_t] = pipe, _run(pipe)
        return got[zero_cond_t]

    return get


def test_unhooked_pipeline_runs_two_rounds_end_to_end(plain) -> None:
    pipe, ref = plain(False)
    assert [im.size for im in ref.images] == [(256, 256)] * 2
    assert len(ref.out) == CALLS and all(o.shape == (1, TARGET + CONTEXT, 16) for o in ref.out)
    assert all(bool(torch.isfinite(o).all()) for o in ref.out)
    assert np.abs(np.asarray(ref.images[0], dtype=np.int16) - np.asarray(ref.images[1], dtype=np.int16)).max() > 0


@pytest.mark.parametrize("zero_cond_t", [False, True], ids=["edit", "zero_cond_t"])
def test_all_active_hooked_rounds_equal_unhooked(plain, zero_cond_t: bool) -> None:
    pipe, ref = plain(zero_cond_t)
    handle = ce.apply_cacheedit(pipe.transformer, ce.CacheEditConfig())
    try:
        handle.force_active(torch.ones(TARGET, dtype=torch.bool))
        got = _run(pipe, handle)
        assert sorted(handle.branches) == ["cond", "uncond"]
        assert handle.state("cond").rounds == handle.state("uncond").rounds == 2  # one round per pipeline call
    finally:
        ce.remove_cacheedit(pipe.transformer)
    assert got.sparse == [False, False, True, True, True, True] * 2  # call 0 full, then sparse, per context
    assert got.rows == [TARGET + CONTEXT] * CALLS
    for k, (a, b) in enumerate(zip(got.out, ref.out, strict=True)):
        assert (a - b).abs().max() < 1e-5, k
    for a, b in zip(got.images, ref.images, strict=True):
        assert np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).max() <= 1


@pytest.mark.parametrize("ctx", ["compute", "cache"])
def test_selected_tokens_only_skip_work(plain, ctx: str) -> None:
    """The divergence selection (default budget: 5-10 % of the 16 target tokens) in the real pipeline: call 0
    of each context runs in full (its MACs equal the unhooked call's), later calls run only the selected target
    tokens (plus, with ``'compute'``, the 256 context tokens) and execute fewer MACs than the unhooked calls."""
    pipe, ref = plain(False)
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
