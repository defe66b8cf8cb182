"""Scheduler, expert-centric and token-centric torch paths, and their FLOP/byte accounting."""

import pytest
import torch

from npukit.kernels.omnimoe import accounting as acc
from npukit.kernels.omnimoe.expert import expert_backward_torch, expert_forward_torch, omni_expert
from npukit.kernels.omnimoe.scheduler import build_schedule, schedule_torch
from npukit.kernels.omnimoe.token import token_centric, token_forward_torch
from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread (conftest)


def _problem(T=12, H=40, N=25, k=4, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g, dtype=torch.float64)
    u = torch.randn(N, H, generator=g, dtype=torch.float64) / H**0.5
    v = torch.randn(N, H, generator=g, dtype=torch.float64)
    w = torch.rand(T, k, generator=g, dtype=torch.float64)
    idx = torch.stack([torch.randperm(N, generator=g)[:k] for _ in range(T)])
    return *(t.to(dtype) for t in (x, u, v, w)), idx


def _naive(x, u, v, w, idx):
    """Per-token loop, the definition: sum_j silu(x . u_e) w_j v_e."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = idx[t, j]
            out[t] += torch.nn.functional.silu(x[t] @ u[e]) * w[t, j] * v[e]
    return out


def test_schedule_sorted_by_expert_with_segments():
    *_, idx = _problem(T=9, N=7, k=3, seed=2)
    s = schedule_torch(idx, 7)
    flat = idx.reshape(-1)
    experts = flat[s.pair_order]
    assert bool((experts[1:] >= experts[:-1]).all())
    assert torch.equal(s.token_ids, s.pair_order // 3)
    assert torch.equal(s.expert_ids, torch.unique(flat))
    for a, e in enumerate(s.expert_ids.tolist()):
        seg = s.pair_order[s.offsets[a]:s.offsets[a + 1]]
        assert bool((flat[seg] == e).all()) and seg.numel() == int((flat == e).sum())
        assert bool((seg[1:] > seg[:-1]).all())  # stable: token order inside a segment
    assert int(s.offsets[-1]) == 27 and s.num_active == len(set(flat.tolist()))


def test_schedule_rejects_out_of_range():
    with pytest.raises(ConfigError, match="expert indices"):
        build_schedule(torch.tensor([[0, 9]]), 5)


def test_expert_forward_equals_definition_and_token_centric():
    x, u, v, w, idx = _problem()
    ref = _naive(x, u, v, w, idx)
    out, s = expert_forward_torch(x, u, v, w, schedule_torch(idx, 25))
    assert ((out - ref).norm() / ref.norm()).item() < 1e-5
    tok = token_forward_torch(x, u, v, w, idx)
    assert ((tok - ref).norm() / ref.norm()).item() < 1e-5
    assert s.shape == (idx.numel(),)


def test_expert_backward_matches_autograd_fp32():
    x, u, v, w, idx = _problem(seed=4)
    leaves = [t.clone().requires_grad_() for t in (x, u, v, w)]
    dout = torch.randn_like(x)
    token_forward_torch(*leaves, idx).backward(dout)
    sched = schedule_torch(idx, 25)
    _, s = expert_forward_torch(x, u, v, w, sched)
    grads = expert_backward_torch(dout, x, u, v, w, s, sched)
    for got, leaf in zip(grads, leaves, strict=True):
        assert got.shape == leaf.shape
        assert ((got - leaf.grad).norm() / leaf.grad.norm()).item() < 1e-4


def test_expert_gradcheck_float64():
    x, u, v, w, idx = _problem(T=3, H=5, N=6, k=2, seed=7, dtype=torch.float64)
    leaves = tuple(t.clone().requires_grad_() for t in (x, u, v, w))
    assert torch.autograd.gradcheck(lambda a, b, c, d: omni_expert(a, b, c, d, idx, backend="torch"), leaves)
    assert torch.autograd.gradcheck(lambda a, b, c, d: token_centric(a, b, c, d, idx, act="gelu", backend="torch"), leaves)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_expert_half_precision_forward_backward(dtype):
    x, u, v, w, idx = _problem(seed=9)
    ref = _naive(x, u, v, w, idx)
    leaves = [t.to(dtype).requires_grad_() for t in (x, u, v, w)]
    out = omni_expert(*leaves, idx)
    assert out.dtype == dtype
    assert ((out.float() - ref).norm() / ref.norm()).item() < 3e-2
    out.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == dtype and torch.isfinite(t.grad.float()).all() for t in leaves)


def test_accounting_counts_follow_shapes_and_reuse():
    T, H, k, N, A = 64, 32, 4, 1 << 20, 200
    led = Ledger()
    acc.record_expert_forward(led, T, H, k, N, A, 16, scope="e")
    acc.record_token_forward(led, T, H, k, N, A, 16, scope="t")
    P = T * k
    assert led.count("alu", "fp_mac", "e") == 2 * P * H == led.count("alu", "fp_mac", "t")
    assert acc.flops(led, "e") == 4 * P * H + 5 * P
    e_bytes = acc.bytes_moved(led, "e")
    more_reuse = Ledger()
    acc.record_expert_forward(more_reuse, T, H, k, N, A // 2, 16)
    # each active expert costs its u_e and v_e rows (bf16) plus one 32-bit id, once
    assert acc.bytes_moved(more_reuse) == pytest.approx(e_bytes - 2 * (A - A // 2) * H * 2 - (A - A // 2) * 4)
    assert led.energy("horowitz45") > 0


def test_token_centric_pays_gathers_per_pair_when_the_table_spills():
    T, H, k, N = 4096, 1024, 32, 65536
    A = int(N * (1 - (1 - 1 / N) ** (T * k)))  # expected active experts under uniform routing
    t1, t2, e = Ledger(), Ledger(), Ledger()
    acc.record_token_forward(t1, T, H, k, N, A, 16)
    acc.record_token_forward(t2, T, H, k, N, A // 4, 16)
    acc.record_expert_forward(e, T, H, k, N, A, 16)
    assert acc.bytes_moved(t1) == acc.bytes_moved(t2)  # no reuse benefit: rows gathered per pair
    assert acc.bytes_moved(t1) / acc.bytes_moved(e) > 1.5
    small = Ledger()  # a table that fits the L2: token-centric reads each row once too
    acc.record_token_forward(small, T, H, k, 1024, 1024, 16)
    assert acc.bytes_moved(small) < acc.bytes_moved(t1) / 10


def test_omni_expert_records_forward_and_backward():
    x, u, v, w, idx = _problem(seed=11)
    led = Ledger()
    leaves = [t.clone().requires_grad_() for t in (x, u, v, w)]
    omni_expert(*leaves, idx, ledger=led).sum().backward()
    scopes = {sc for sc, *_ in led.counts}
    assert {"scheduler", "expert_fwd", "expert_bwd"} <= scopes
    assert led.count("alu", "fp_mac", "expert_bwd") == 4 * idx.numel() * x.shape[1]


def test_expert_rejects_bad_shapes():
    x, u, v, w, idx = _problem()
    with pytest.raises(ConfigError, match="same H"):
        omni_expert(x[:, :5], u, v, w, idx)
    with pytest.raises(ConfigError, match=r"\(T, k\)"):
        omni_expert(x, u, v, w[:, :2], idx)
    with pytest.raises(ConfigError, match="activation"):
        token_centric(x, u, v, w, idx, act="relu")
