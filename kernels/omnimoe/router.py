"""Cartesian product router: exact per-token top-k over N = n*n experts in O(sqrt N + k^2) work.

Given row and column log-probabilities ``lp_x`` and ``lp_y`` (shape ``(T, n)``), the score of expert
``e = i * n + j`` is ``lp_x[i] + lp_y[j]``. The top-k pairs of such sums all lie in the product of
each axis's own top-``min(k, n)`` (a pair outside it is dominated by ``min(k, n)`` pairs inside that
score at least as much), so the router takes the top ``k' = min(k, n)`` of each axis (O(n)) and
then the top ``k`` of the ``k' x k'`` candidate sums (O(k^2)). Scores come back sorted descending
with int64 expert indices, exactly the ``OmniMoE_Pytorch`` reference semantics (which ranks all n
per axis first: same result, more work).

Paths: :func:`cartesian_topk_torch` (reference), :func:`dense_topk_torch` (brute force over all N,
for tests), :func:`dense_router` (the dense N-way router baseline, chunked over tokens), a Triton
kernel (one program per token; bitonic ``tl.topk`` on keys that pack the score with the index), and
:func:`cartesian_router`, differentiable in ``lp_x`` and ``lp_y``.
"""

from __future__ import annotations

import torch

from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ..backend import choose_backend, next_pow2
from .accounting import record_router_topk


def _check(lp_x: torch.Tensor, lp_y: torch.Tensor, k: int) -> int:
    if lp_x.dim() != 2 or lp_y.shape != lp_x.shape:
        raise ConfigError(f"router inputs must both be (tokens, n); got {tuple(lp_x.shape)} and {tuple(lp_y.shape)}")
    n = lp_x.shape[1]
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n * n:
        raise ConfigError(f"top-k must be an integer in 1..{n * n} (n*n experts), got {k!r}")
    return n


def cartesian_topk_torch(lp_x: torch.Tensor, lp_y: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Torch reference: (scores (T, k) in the input dtype, indices (T, k) int64), scores descending."""
    n = _check(lp_x, lp_y, k)
    kk = min(k, n)
    sx, ix = lp_x.topk(kk, dim=-1)
    sy, iy = lp_y.topk(kk, dim=-1)
    cand = (sx.unsqueeze(-1) + sy.unsqueeze(-2)).flatten(-2)
    cidx = (ix.unsqueeze(-1) * n + iy.unsqueeze(-2)).flatten(-2)
    scores, pos = cand.topk(k, dim=-1)
    return scores, cidx.gather(-1, pos)


def dense_topk_torch(lp_x: torch.Tensor, lp_y: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Brute force over all N = n*n sums (O(N) per token): the ground truth in tests."""
    _check(lp_x, lp_y, k)
    full = (lp_x.unsqueeze(-1) + lp_y.unsqueeze(-2)).flatten(-2)
    return full.topk(k, dim=-1)


DENSE_CHUNK = 128  # tokens per chunk of :func:`dense_router`


def dense_router(x: torch.Tensor, w: torch.Tensor, k: int, chunk: int = DENSE_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """A dense N-way router, the baseline the Cartesian router replaces: logits ``x @ w.T`` (x: (T, H),
    w: (N, H)), top-k, log-softmax normaliser (logsumexp over all N); ``chunk`` tokens at a time so the (T, N)
    logits never exist at once. Returns (scores (T, k), indices (T, k) int64), scores descending."""
    scores, idx = [], []
    for c in range(0, x.shape[0], chunk):
        logits = x[c:c + chunk] @ w.t()
        s, i = logits.topk(k, dim=-1)
        scores.append(s - torch.logsumexp(logits, dim=-1, keepdim=True))
        idx.append(i)
    return torch.cat(scores), torch.cat(idx)


def router_backward_torch(
    dscores: torch.Tensor, indices: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """d lp_x, d lp_y (T, n) from d scores (T, k): each score adds its gradient to its row and column."""
    T = dscores.shape[0]
    ct = torch.float64 if dscores.dtype == torch.float64 else torch.float32
    ds = dscores.to(ct)
    dlx = torch.zeros(T, n, dtype=ct, device=ds.device).scatter_add_(1, indices // n, ds)
    dly = torch.zeros(T, n, dtype=ct, device=ds.device).scatter_add_(1, indices % n, ds)
    return dlx.to(dscores.dtype), dly.to(dscores.dtype)


# ---------------------------------------------------------------------------------------------- Triton
def _kernels():  # type: ignore[no-untyped-def]
    """The Triton kernels, imported on first use (so TRITON_INTERPRET set late still applies)."""
    from . import _triton_router

    return _triton_router


def cartesian_topk_triton(lp_x: torch.Tensor, lp_y: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton launcher (one program per token): same results as :func:`cartesian_topk_torch`
    (fp64 inputs are ranked at fp32 precision, so near-ties may order differently)."""
    n = _check(lp_x, lp_y, k)
    lp_x, lp_y = lp_x.contiguous(), lp_y.contiguous()
    T = lp_x.shape[0]
    NP = max(2, next_pow2(n))
    KP = max(2, next_pow2(min(k, n)))
    KQ = max(2, next_pow2(k))
    scores = torch.empty(T, k, dtype=lp_x.dtype, device=lp_x.device)
    idx = torch.empty(T, k, dtype=torch.int64, device=lp_x.device)
    if T:
        _kernels()._router_fwd[(T,)](lp_x, lp_y, scores, idx, n, k, lp_x.stride(0), k, NP=NP, KP=KP, KQ=KQ,
                                     ACC=_tl_acc(lp_x.dtype))
    return scores, idx


def _tl_acc(dtype: torch.dtype):  # type: ignore[no-untyped-def]
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32


def router_backward_triton(dscores: torch.Tensor, indices: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    T, k = dscores.shape
    dscores, indices = dscores.contiguous(), indices.contiguous()
    dlx = torch.empty(T, n, dtype=dscores.dtype, device=dscores.device)
    dly = torch.empty_like(dlx)
    block = min(256, max(2, next_pow2(n)))
    if T:
        _kernels()._router_bwd[(T, -(-n // block))](dscores, indices, dlx, dly, n, k, k, n,
                                                KQ=max(2, next_pow2(k)), ACC=_tl_acc(dscores.dtype), BLOCK_N=block)
    return dlx, dly


class _Router(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lp_x, lp_y, k, backend):  # type: ignore[override]
        fn = cartesian_topk_triton if backend == "triton" else cartesian_topk_torch
        scores, idx = fn(lp_x, lp_y, k)
        ctx.save_for_backward(idx)
        ctx.n, ctx.backend = lp_x.shape[1], backend
        ctx.mark_non_differentiable(idx)
        return scores, idx

    @staticmethod
    def backward(ctx, dscores, _didx):  # type: ignore[override]
        (idx,) = ctx.saved_tensors
        fn = router_backward_triton if ctx.backend == "triton" else router_backward_torch
        dlx, dly = fn(dscores, idx, ctx.n)
        return dlx, dly, None, None


def cartesian_router(
    lp_x: torch.Tensor, lp_y: torch.Tensor, k: int, backend: str = "auto", ledger: Ledger | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k experts per token over the Cartesian product, differentiable in ``lp_x``/``lp_y``.

    Returns ``(scores, indices)``: scores (T, k) descending in the input dtype, indices (T, k)
    int64 in ``[0, n*n)`` with ``index = row * n + column``. ``ledger`` (optional) receives the
    top-k work and traffic (scope ``router_topk``; the projections belong to the caller).
    """
    be = choose_backend(backend, lp_x)
    n = _check(lp_x, lp_y, k)
    if ledger is not None:
        record_router_topk(ledger, lp_x.shape[0], n, k, lp_x.element_size() * 8)
    return _Router.apply(lp_x, lp_y, k, be)
