"""Token-centric (PEER-style) atomic-expert layer: the baseline the expert-centric kernel beats.

Each token gathers the u and v rows of its own k experts:
``out[t] = sum_j act(x_t . u_{e_j}) * g_j * v_{e_j}`` with ``act`` silu (OmniMoE) or exact GELU
(PEER's default). Expert rows are read once per (token, expert) pair, whatever the reuse.

Paths: :func:`token_forward_torch` (gather + einsum, chunked over tokens), a Triton forward
(one program per token) and :func:`token_centric` (autograd; the backward recomputes through the
torch reference, which is what PEER-pytorch's autograd does too).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ..backend import choose_backend, next_pow2
from . import accounting
from .expert import acc_dtype, check_shapes

ACTS = ("silu", "gelu")
CHUNK_TOKENS = 1024


def _act(s: torch.Tensor, act: str) -> torch.Tensor:
    return F.silu(s) if act == "silu" else F.gelu(s)


def token_forward_torch(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, idx: torch.Tensor,
                        act: str = "silu") -> torch.Tensor:
    """Reference: per token chunk, gather (C, k, H) expert rows and contract. Differentiable."""
    ct = acc_dtype(x.dtype)
    outs = []
    for c in range(0, x.shape[0], CHUNK_TOKENS):
        i = idx[c:c + CHUNK_TOKENS]
        s = torch.einsum("th,tkh->tk", x[c:c + CHUNK_TOKENS].to(ct), u[i].to(ct))
        a = _act(s, act) * g[c:c + CHUNK_TOKENS].to(ct)
        outs.append(torch.einsum("tk,tkh->th", a, v[i].to(ct)))
    if not outs:
        return x.new_zeros(x.shape)
    return torch.cat(outs).to(x.dtype)


def token_forward_triton(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, idx: torch.Tensor,
                         act: str = "silu") -> torch.Tensor:
    """Triton launcher (one program per token): same results as :func:`token_forward_torch`."""
    import triton.language as tl

    from . import _triton_expert as K

    ct = acc_dtype(x.dtype)
    x, u, v, g, idx = (t.contiguous() for t in (x, u, v, g, idx))
    T, H = x.shape
    k = idx.shape[1]
    out = torch.empty(T, H, dtype=x.dtype, device=x.device)
    s = torch.empty(T, k, dtype=ct, device=x.device)
    if T:
        K._token_fwd[(T,)](x, u, v, g, idx, s, out, k, H, x.stride(0), u.stride(0), v.stride(0), out.stride(0),
                           ACT=ACTS.index(act), KB=max(2, next_pow2(k)),
                           ACC=tl.float64 if ct == torch.float64 else tl.float32,
                           BLOCK_H=min(128, max(16, next_pow2(H))))
    return out


class _TokenCentric(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, u, v, g, idx, act):  # type: ignore[override]
        ctx.save_for_backward(x, u, v, g, idx)
        ctx.act = act
        return token_forward_triton(x, u, v, g, idx, act)

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        x, u, v, g, idx = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(t.requires_grad) for t in (x, u, v, g)]
            out = token_forward_torch(*leaves, idx, ctx.act)
            want = [t for t in leaves if t.requires_grad]
            grads = iter(torch.autograd.grad(out, want, dout, allow_unused=True)) if want else iter(())
        res = [next(grads) if t.requires_grad else None for t in leaves]
        return (*res, None, None)


def token_centric(x: torch.Tensor, u: torch.Tensor, v: torch.Tensor, g: torch.Tensor, idx: torch.Tensor,
                  act: str = "silu", backend: str = "auto", ledger: Ledger | None = None) -> torch.Tensor:
    """Token-centric ``sum_j act(x . u_e) g_j v_e`` (T, H), differentiable in x, u, v and g."""
    check_shapes(x, u, v, g, idx)
    if act not in ACTS:
        raise ConfigError(f"unknown activation '{act}'; use one of {', '.join(ACTS)}")
    be = choose_backend(backend, x)
    active = 0
    if ledger is not None:
        T, k = idx.shape
        active = int(torch.unique(idx).numel()) if idx.numel() else 0
        accounting.record_token_forward(ledger, T, x.shape[1], k, u.shape[0], active, x.element_size() * 8)
    out = _TokenCentric.apply(x, u, v, g, idx, act) if be == "triton" else token_forward_torch(x, u, v, g, idx, act)
    if ledger is not None and out.requires_grad:
        T, k = idx.shape
        H, N, bits = x.shape[1], u.shape[0], x.element_size() * 8
        out.register_hook(lambda _g: accounting.record_token_backward(ledger, T, H, k, N, active, bits))
    return out
