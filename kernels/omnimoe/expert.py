"""Expert-centric fused atomic-expert layer: forward and backward over a :class:`Schedule`.

For token t with experts e_j and routing weights g_j (j < k):
``out[t] = sum_j silu(x_t . u_{e_j}) * g_j * v_{e_j}``.

The schedule groups the P = T*k pairs by expert; each active expert's u_e and v_e are read once
and applied to all its tokens as a dense batch. Backward gives dx (T, H), du and dv (N, H, dense
like ``nn.Embedding``'s), dg (T, k). du and dv are always deterministic (one program owns an
expert and sums its segment in schedule order); dx and out are scattered with 32-bit atomics
unless ``deterministic=True``, which writes per-pair coefficients and combines them per token in
fixed order (a token-centric gather of v resp. u: more DRAM traffic, bit-reproducible).

Paths: :func:`expert_forward_torch` / :func:`expert_backward_torch` (references, same
expert-grouped order, chunked over pairs), ``*_triton`` launchers, and :func:`omni_expert`
(autograd; auto: Triton on CUDA, torch on CPU). Accumulation is fp32 (fp64 for fp64 inputs);
outputs come back in x's dtype, gradients in their inputs' dtypes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ..backend import choose_backend, next_pow2
from . import accounting
from .scheduler import Schedule, build_schedule

CHUNK_PAIRS = 1 << 15  # torch paths: pairs per chunk (bounds the (chunk, H) temporaries)


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_shapes(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, idx: torch.Tensor) -> None:
    if x.dim() != 2 or u.dim() != 2 or u.shape != v.shape or u.shape[1] != x.shape[1]:
        raise ConfigError(
            f"expert inputs: x must be (T, H) and u, v (N, H) with the same H; got {tuple(x.shape)}, "
            f"{tuple(u.shape)}, {tuple(v.shape)}")
    if g.shape != idx.shape or g.dim() != 2 or g.shape[0] != x.shape[0]:
        raise ConfigError(f"routing weights and indices must both be (T, k) with T = {x.shape[0]}; got "
                          f"{tuple(g.shape)} and {tuple(idx.shape)}")


def _sorted_gates(g: torch.Tensor, sched: Schedule, dtype: torch.dtype) -> torch.Tensor:
    return g.reshape(-1).index_select(0, sched.pair_order).to(dtype).contiguous()


# ---------------------------------------------------------------------------------------------- torch
def expert_forward_torch(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, sched: Schedule
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference forward: (out (T, H) in x's dtype, pre-activations s (P,) in schedule order)."""
    ct = acc_dtype(x.dtype)
    T, H = x.shape
    seg, tok = sched.segment_of_pair(), sched.token_ids
    ua = u.index_select(0, sched.expert_ids).to(ct)  # each active expert read once
    va = v.index_select(0, sched.expert_ids).to(ct)
    gs = _sorted_gates(g, sched, ct)
    out = torch.zeros(T, H, dtype=ct, device=x.device)
    s = torch.empty(sched.num_pairs, dtype=ct, device=x.device)
    for c in range(0, sched.num_pairs, CHUNK_PAIRS):
        sl = slice(c, c + CHUNK_PAIRS)
        sc = (x.index_select(0, tok[sl]).to(ct) * ua[seg[sl]]).sum(-1)
        s[sl] = sc
        out.index_add_(0, tok[sl], (F.silu(sc) * gs[sl]).unsqueeze(1) * va[seg[sl]])
    return out.to(x.dtype), s


def expert_backward_torch(dout: torch.Tensor, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                          s: torch.Tensor, sched: Schedule) -> tuple[torch.Tensor, ...]:
    """Reference backward: (dx (T, H), du (N, H), dv (N, H), dg (T, k))."""
    ct = acc_dtype(x.dtype)
    seg, tok = sched.segment_of_pair(), sched.token_ids
    ua = u.index_select(0, sched.expert_ids).to(ct)
    va = v.index_select(0, sched.expert_ids).to(ct)
    gs = _sorted_gates(g, sched, ct)
    A, (T, H) = sched.num_active, x.shape
    dua = torch.zeros(A, H, dtype=ct, device=x.device)
    dva = torch.zeros(A, H, dtype=ct, device=x.device)
    dx = torch.zeros(T, H, dtype=ct, device=x.device)
    dgs = torch.empty(sched.num_pairs, dtype=ct, device=x.device)
    for c in range(0, sched.num_pairs, CHUNK_PAIRS):
        sl = slice(c, c + CHUNK_PAIRS)
        t, sg = tok[sl], seg[sl]
        do = dout.index_select(0, t).to(ct)
        xs = x.index_select(0, t).to(ct)
        da = (do * va[sg]).sum(-1)
        sig = torch.sigmoid(s[sl])
        act = s[sl] * sig
        dgs[sl] = da * act
        ds = da * gs[sl] * (sig + act * (1 - sig))
        dua.index_add_(0, sg, ds.unsqueeze(1) * xs)
        dva.index_add_(0, sg, (act * gs[sl]).unsqueeze(1) * do)
        dx.index_add_(0, t, ds.unsqueeze(1) * ua[sg])
    du = torch.zeros(u.shape, dtype=u.dtype, device=u.device).index_copy_(0, sched.expert_ids, dua.to(u.dtype))
    dv = torch.zeros(v.shape, dtype=v.dtype, device=v.device).index_copy_(0, sched.expert_ids, dva.to(v.dtype))
    dg = torch.empty(sched.num_pairs, dtype=g.dtype, device=g.device)
    dg[sched.pair_order] = dgs.to(g.dtype)
    return dx.to(x.dtype), du, dv, dg.view_as(g)


# ---------------------------------------------------------------------------------------------- Triton
def _tl_acc(ct: torch.dtype):  # type: ignore[no-untyped-def]
    import triton.language as tl

    return tl.float64 if ct == torch.float64 else tl.float32


def _blocks(H: int) -> tuple[int, int]:
    return 16, min(128, max(16, next_pow2(H)))


def _combine(coef_sorted: torch.Tensor, sched: Schedule, idx: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype
             ) -> torch.Tensor:
    """out[t] = sum_j c[t, j] w[idx[t, j]] in fixed j order (deterministic scatter)."""
    from . import _triton_expert as K

    T, k = idx.shape
    H = w.shape[1]
    coef = torch.empty(sched.num_pairs, dtype=coef_sorted.dtype, device=w.device)
    coef[sched.pair_order] = coef_sorted
    out = torch.empty(T, H, dtype=out_dtype, device=w.device)
    _, bh = _blocks(H)
    if T:
        K._token_combine[(T, -(-H // bh))](coef, idx.contiguous(), w, out, k, H, w.stride(0), out.stride(0),
                                            KB=max(2, next_pow2(k)), ACC=_tl_acc(coef.dtype), BLOCK_H=bh)
    return out


def expert_forward_triton(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, idx: torch.Tensor,
                          sched: Schedule, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton launcher (one program per active expert): same results as :func:`expert_forward_torch`."""
    from . import _triton_expert as K

    ct = acc_dtype(x.dtype)
    x, u, v = x.contiguous(), u.contiguous(), v.contiguous()
    T, H = x.shape
    gs = _sorted_gates(g, sched, ct)
    s = torch.empty(sched.num_pairs, dtype=ct, device=x.device)
    a = torch.empty_like(s)
    out = torch.zeros(T, H, dtype=ct, device=x.device)
    bm, bh = _blocks(H)
    if sched.num_active:
        K._expert_fwd[(sched.num_active,)](
            x, u, v, gs, sched.token_ids, sched.expert_ids, sched.offsets, s, a, out, H,
            x.stride(0), u.stride(0), v.stride(0), out.stride(0),
            ATOMIC=not deterministic, ACC=_tl_acc(ct), BLOCK_M=bm, BLOCK_H=bh)
    if deterministic:
        return _combine(a, sched, idx, v, x.dtype), s
    return out.to(x.dtype), s


def expert_backward_triton(dout: torch.Tensor, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                           idx: torch.Tensor, s: torch.Tensor, sched: Schedule, deterministic: bool = False
                           ) -> tuple[torch.Tensor, ...]:
    """Triton launcher of the backward: same results as :func:`expert_backward_torch`."""
    from . import _triton_expert as K

    ct = acc_dtype(x.dtype)
    x, u, v, dout = x.contiguous(), u.contiguous(), v.contiguous(), dout.contiguous()
    T, H = x.shape
    gs = _sorted_gates(g, sched, ct)
    dgs = torch.empty(sched.num_pairs, dtype=ct, device=x.device)
    ds = torch.empty_like(dgs)
    asc = torch.empty_like(dgs)
    du = torch.zeros(u.shape, dtype=ct, device=u.device)
    dv = torch.zeros(v.shape, dtype=ct, device=v.device)
    dx = torch.zeros(T, H, dtype=ct, device=x.device)
    bm, bh = _blocks(H)
    if sched.num_active:
        K._expert_bwd[(sched.num_active,)](
            x, u, v, gs, sched.token_ids, sched.expert_ids, sched.offsets, s, dout, dgs, ds, asc, du, dv, dx, H,
            x.stride(0), u.stride(0), v.stride(0), dout.stride(0), du.stride(0), dv.stride(0), dx.stride(0),
            ATOMIC=not deterministic, ACC=_tl_acc(ct), BLOCK_M=bm, BLOCK_H=bh)
    if deterministic:
        dx = _combine(ds, sched, idx, u, x.dtype)
    dg = torch.empty(sched.num_pairs, dtype=g.dtype, device=g.device)
    dg[sched.pair_order] = dgs.to(g.dtype)
    return dx.to(x.dtype), du.to(u.dtype), dv.to(v.dtype), dg.view_as(g)


# ---------------------------------------------------------------------------------------------- autograd
def _bits(t: torch.Tensor) -> int:
    return t.element_size() * 8


class _ExpertCentric(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, u, v, g, idx, sched, backend, deterministic, ledger):  # type: ignore[override]
        if backend == "triton":
            out, s = expert_forward_triton(x, u, v, g, idx, sched, deterministic)
        else:
            out, s = expert_forward_torch(x, u, v, g, sched)
        ctx.save_for_backward(x, u, v, g, idx, s)
        ctx.sched, ctx.backend, ctx.deterministic, ctx.ledger = sched, backend, deterministic, ledger
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        x, u, v, g, idx, s = ctx.saved_tensors
        sched = ctx.sched
        if ctx.backend == "triton":
            dx, du, dv, dg = expert_backward_triton(dout, x, u, v, g, idx, s, sched, ctx.deterministic)
        else:
            dx, du, dv, dg = expert_backward_torch(dout, x, u, v, g, s, sched)
        if ctx.ledger is not None:
            accounting.record_expert_backward(ctx.ledger, x.shape[0], x.shape[1], idx.shape[1], u.shape[0],
                                              sched.num_active, _bits(x), deterministic=ctx.deterministic)
        return dx, du, dv, dg, None, None, None, None, None


def omni_expert(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, idx: torch.Tensor,
                schedule: Schedule | None = None, backend: str = "auto", deterministic: bool = False,
                ledger: Ledger | None = None) -> torch.Tensor:
    """Expert-centric ``sum_j silu(x . u_e) g_j v_e`` (T, H), differentiable in x, u, v and g.

    ``schedule`` is built from ``idx`` when not given (pass it to share it with other calls);
    ``ledger`` (optional) receives the FLOPs and bytes of the scheduler, forward and backward.
    """
    check_shapes(x, u, v, g, idx)
    be = choose_backend(backend, x)
    if schedule is None:
        schedule = build_schedule(idx, u.shape[0], be, ledger)
    if ledger is not None:
        accounting.record_expert_forward(ledger, x.shape[0], x.shape[1], idx.shape[1], u.shape[0],
                                         schedule.num_active, _bits(x), deterministic=deterministic)
    return _ExpertCentric.apply(x, u, v, g, idx, schedule, be, deterministic, ledger)
