"""Triton kernels of OmniMoE under the Triton interpreter (TRITON_INTERPRET=1), against the torch
references: routing vs brute force, forward/backward fp32 relative error < 1e-4, float64 gradcheck.

The interpreter is switched on by a module fixture before the kernels are first built (they are
built lazily, on first use), and restored afterwards; nothing here needs a GPU.
"""

import os

import pytest
import torch

pytest.importorskip("triton")

from npukit.kernels.omnimoe.expert import (  # noqa: E402
    expert_backward_torch,
    expert_backward_triton,
    expert_forward_torch,
    expert_forward_triton,
    omni_expert,
)
from npukit.kernels.omnimoe.router import (  # noqa: E402
    cartesian_router,
    cartesian_topk_triton,
    dense_topk_torch,
    router_backward_torch,
    router_backward_triton,
)
from npukit.kernels.omnimoe.scheduler import schedule_torch, schedule_triton  # noqa: E402
from npukit.kernels.omnimoe.token import token_centric, token_forward_torch, token_forward_triton  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _interpret():
    old_env = os.environ.get("TRITON_INTERPRET")
    old_threads = torch.get_num_threads()
    os.environ["TRITON_INTERPRET"] = "1"
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old_threads)
    if old_env is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = old_env


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def _problem(T=10, H=40, N=25, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    u = torch.randn(N, H, generator=g) / H**0.5
    v = torch.randn(N, H, generator=g)
    w = torch.rand(T, k, generator=g)
    idx = torch.stack([torch.randperm(N, generator=g)[:k] for _ in range(T)])
    return x, u, v, w, idx


@pytest.mark.parametrize("T,n,k", [(3, 8, 4), (2, 4, 9), (2, 5, 3)])
def test_router_kernel_equals_brute_force(T, n, k):
    g = torch.Generator().manual_seed(n * 10 + k)
    lx = torch.randn(T, n, generator=g).log_softmax(-1)
    ly = torch.randn(T, n, generator=g).log_softmax(-1)
    s, i = cartesian_topk_triton(lx, ly, k)
    s_ref, i_ref = dense_topk_torch(lx, ly, k)
    assert torch.equal(i, i_ref)
    assert rel(s, s_ref) < 1e-6
    ds = torch.randn(T, k, generator=g)
    for a, b in zip(router_backward_triton(ds, i, n), router_backward_torch(ds, i, n), strict=True):
        assert rel(a, b) < 1e-6


def test_router_autograd_through_kernel():
    g = torch.Generator().manual_seed(3)
    lx = torch.randn(2, 4, generator=g, dtype=torch.float64).log_softmax(-1).requires_grad_()
    ly = torch.randn(2, 4, generator=g, dtype=torch.float64).log_softmax(-1).requires_grad_()
    s, _ = cartesian_router(lx, ly, 3, backend="triton")
    s.sum().backward()
    assert torch.allclose(lx.grad.sum(1), torch.full((2,), 3.0, dtype=torch.float64))


def test_scheduler_kernel_equals_torch():
    *_, idx = _problem(T=16, N=30, k=5, seed=1)
    a, b = schedule_torch(idx, 30), schedule_triton(idx, 30)
    for f in ("pair_order", "token_ids", "expert_ids", "offsets", "counts"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f


@pytest.mark.parametrize("deterministic", [False, True])
def test_expert_kernels_forward_backward_fp32(deterministic):
    x, u, v, w, idx = _problem(seed=2)
    sched = schedule_torch(idx, 25)
    ref, s_ref = expert_forward_torch(x, u, v, w, sched)
    out, s = expert_forward_triton(x, u, v, w, idx, sched, deterministic)
    assert rel(out, ref) < 1e-4 and rel(s, s_ref) < 1e-4
    dout = torch.randn_like(x)
    want = expert_backward_torch(dout, x, u, v, w, s_ref, sched)
    got = expert_backward_triton(dout, x, u, v, w, idx, s, sched, deterministic)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and rel(a, b) < 1e-4
    if deterministic:  # bit-reproducible
        again = expert_backward_triton(dout, x, u, v, w, idx, s, sched, True)
        assert all(torch.equal(a, b) for a, b in zip(got, again, strict=True))


@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_token_kernel_forward_fp32(act):
    x, u, v, w, idx = _problem(seed=5)
    assert rel(token_forward_triton(x, u, v, w, idx, act), token_forward_torch(x, u, v, w, idx, act)) < 1e-4


def test_kernels_gradcheck_float64():
    x, u, v, w, idx = _problem(T=2, H=4, N=4, k=2, seed=6)
    leaves = tuple(t.double().requires_grad_() for t in (x, u, v, w))
    for det in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b, c, d, det=det: omni_expert(a, b, c, d, idx, backend="triton", deterministic=det),
            leaves, fast_mode=True)
    assert torch.autograd.gradcheck(lambda a, b, c, d: token_centric(a, b, c, d, idx, backend="triton"),
                                    leaves, fast_mode=True)


def test_kernels_half_precision():
    x, u, v, w, idx = _problem(seed=8)
    ref = token_forward_torch(x, u, v, w, idx)
    for dt in (torch.bfloat16, torch.float16):
        out = omni_expert(*(t.to(dt) for t in (x, u, v, w)), idx, backend="triton")
        assert out.dtype == dt and rel(out, ref) < 3e-2


def test_router_kernel_half_precision():
    g = torch.Generator().manual_seed(9)
    for dt in (torch.bfloat16, torch.float16):
        lx = torch.randn(2, 8, generator=g).log_softmax(-1).to(dt)
        ly = torch.randn(2, 8, generator=g).log_softmax(-1).to(dt)
        s, i = cartesian_topk_triton(lx, ly, 4)
        s_ref, _ = dense_topk_torch(lx, ly, 4)
        assert s.dtype == dt
        # the chosen experts carry the top scores (ties may reorder); within one half-precision ulp
        picked = lx.gather(1, i // 8).float() + ly.gather(1, i % 8).float()
        assert torch.allclose(picked, s_ref.float(), rtol=1e-2, atol=0)
        assert torch.allclose(s.float(), s_ref.float(), rtol=1e-2, atol=0)
