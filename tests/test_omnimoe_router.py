"""Cartesian router (torch paths): exact top-k against brute force over all N, gradients, errors."""

import pytest
import torch

from npukit.kernels.omnimoe.router import (
    cartesian_router,
    cartesian_topk_torch,
    dense_topk_torch,
    router_backward_torch,
)
from npukit.sim.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread (conftest)


def _lp(T, n, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, n, generator=g, dtype=torch.float64).log_softmax(-1).to(dtype),
            torch.randn(T, n, generator=g, dtype=torch.float64).log_softmax(-1).to(dtype))


@pytest.mark.parametrize("T,n,k", [(7, 8, 4), (5, 16, 32), (4, 5, 3), (3, 3, 9), (6, 32, 17), (2, 1, 1), (9, 64, 64)])
def test_cartesian_equals_brute_force_over_all_n(T, n, k):
    lx, ly = _lp(T, n, seed=T * 100 + n + k)
    s, i = cartesian_topk_torch(lx, ly, k)
    s_ref, i_ref = dense_topk_torch(lx, ly, k)
    assert torch.equal(i, i_ref)
    assert torch.equal(s, s_ref)
    # scores really are the sums of the chosen row and column
    assert torch.allclose(s, lx.gather(1, i // n) + ly.gather(1, i % n))
    assert bool((s[:, :-1] >= s[:, 1:]).all())


def test_cartesian_brute_force_many_random_cases():
    g = torch.Generator().manual_seed(1)
    for case in range(40):
        n = int(torch.randint(1, 20, (1,), generator=g))
        k = int(torch.randint(1, n * n + 1, (1,), generator=g))
        lx, ly = _lp(3, n, seed=case)
        assert torch.equal(cartesian_topk_torch(lx, ly, k)[1], dense_topk_torch(lx, ly, k)[1]), (n, k)


def test_router_backward_matches_autograd_of_gather():
    lx, ly = _lp(5, 9, seed=3, dtype=torch.float64)
    lx.requires_grad_()
    ly.requires_grad_()
    s, i = cartesian_router(lx, ly, 7, backend="torch")
    ds = torch.randn_like(s)
    s.backward(ds)
    gx = torch.zeros_like(lx).scatter_add_(1, i // 9, ds)
    gy = torch.zeros_like(ly).scatter_add_(1, i % 9, ds)
    assert torch.allclose(lx.grad, gx) and torch.allclose(ly.grad, gy)
    assert all(torch.allclose(a, b) for a, b in zip(router_backward_torch(ds, i, 9), (gx, gy), strict=True))
    assert torch.autograd.gradcheck(lambda a, b: cartesian_router(a, b, 7, backend="torch")[0],
                                    (lx.detach().requires_grad_(), ly.detach().requires_grad_()))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_router_half_precision_matches_brute_force(dtype):
    lx, ly = _lp(6, 16, seed=5, dtype=dtype)
    s, i = cartesian_router(lx, ly, 8)
    s_ref, _ = dense_topk_torch(lx, ly, 8)
    assert s.dtype == dtype
    assert torch.equal(s, s_ref)  # same score multiset (ties in half precision may reorder indices)


def test_router_rejects_bad_input():
    lx, ly = _lp(2, 4, seed=0)
    with pytest.raises(ConfigError, match="top-k"):
        cartesian_router(lx, ly, 17)
    with pytest.raises(ConfigError, match="top-k"):
        cartesian_router(lx, ly, 0)
    with pytest.raises(ConfigError, match=r"\(tokens, n\)"):
        cartesian_router(lx, ly[:, :3], 2)
    with pytest.raises(ConfigError, match="unknown kernel backend"):
        cartesian_router(lx, ly, 2, backend="cuda")
