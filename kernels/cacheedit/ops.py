"""Sparse-token ops of the CacheEdit cached sampler: torch references and the dispatching entry points.

Index convention: ``idx`` is an int64 (B, A) tensor of token rows (sequence positions) per image,
padded with -1 where an image has fewer than A active tokens; padded rows are computed (from row 0)
and never written back.

* :func:`gather_modulate` -- ``LayerNorm(h[b, idx]) * (1 + scale[b]) + shift[b]`` (no affine LN, as
  in adaLN), (B, N, D) -> (B, A, D).
* :func:`scatter_residual` -- in place ``h[b, idx] += gate[b] * y`` (``gate=None``: ``h[b, idx] = y``),
  the block's residual update of the cached hidden states (also used to write velocities).
* :func:`kv_update` -- in place ``k_cache[b, idx] = k``, ``v_cache[b, idx] = v`` (heads merged,
  (B, N, D)), after which attention of the active queries over all keys is plain SDPA
  (:func:`active_attention`).

Each entry point takes ``backend``: ``"auto"`` (Triton on CUDA tensors, torch otherwise), ``"torch"``
or ``"triton"`` (Triton kernels in :mod:`._triton`; on CPU only under ``TRITON_INTERPRET=1``), resolved by
:func:`npukit.kernels.backend.choose_backend`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..backend import choose_backend


def _use_triton(t: torch.Tensor, backend: str) -> bool:
    return choose_backend(backend, t) == "triton"


def _flat(idx: torch.Tensor, n: int) -> torch.Tensor:
    """(B, A) rows (-1 padded) -> (B*A,) rows of the (B*N, D) view (padding -> that image's row 0)."""
    b = torch.arange(idx.shape[0], device=idx.device)[:, None] * n
    return (b + idx.clamp_min(0)).reshape(-1)


def gather_modulate_ref(h: torch.Tensor, idx: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor,
                        eps: float = 1e-5) -> torch.Tensor:
    """Torch reference of :func:`gather_modulate`."""
    b, n, d = h.shape
    x = h.reshape(-1, d).index_select(0, _flat(idx, n)).view(b, idx.shape[1], d)
    return F.layer_norm(x, (d,), eps=eps) * (1 + scale[:, None]) + shift[:, None]


def scatter_residual_ref(h: torch.Tensor, idx: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
    """Torch reference of :func:`scatter_residual` (in place on a contiguous ``h``; returns ``h``)."""
    b, n, d = h.shape
    flat = _flat(idx, n)
    yy = (y if gate is None else gate[:, None] * y).reshape(-1, d).to(h.dtype)
    valid = idx.reshape(-1) >= 0
    if not bool(valid.all()):
        sel = valid.nonzero().squeeze(1)
        flat, yy = flat[sel], yy[sel]
    hv = h.view(-1, d)
    if gate is None:
        hv.index_copy_(0, flat, yy)
    else:
        hv.index_add_(0, flat, yy)
    return h


def kv_update_ref(k_cache: torch.Tensor, v_cache: torch.Tensor, idx: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Torch reference of :func:`kv_update` (in place)."""
    scatter_residual_ref(k_cache, idx, k)
    scatter_residual_ref(v_cache, idx, v)


def gather_modulate(h: torch.Tensor, idx: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor,
                    eps: float = 1e-5, backend: str = "auto") -> torch.Tensor:
    """Gather active rows with fused LayerNorm + adaLN modulation: (B, N, D) -> (B, A, D)."""
    if _use_triton(h, backend):
        from ._triton import gather_modulate_triton

        return gather_modulate_triton(h, idx, shift, scale, eps)
    return gather_modulate_ref(h, idx, shift, scale, eps)


def scatter_residual(h: torch.Tensor, idx: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None = None,
                     backend: str = "auto") -> torch.Tensor:
    """In place ``h[b, idx] += gate[b] * y`` (or ``= y`` when ``gate`` is None); returns ``h``."""
    if _use_triton(h, backend):
        from ._triton import scatter_residual_triton

        return scatter_residual_triton(h, idx, y, gate)
    return scatter_residual_ref(h, idx, y, gate)


def kv_update(k_cache: torch.Tensor, v_cache: torch.Tensor, idx: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              backend: str = "auto") -> None:
    """Write fresh K/V rows of the active tokens into the per-block caches (B, N, D), in place."""
    if _use_triton(k_cache, backend):
        from ._triton import kv_update_triton

        kv_update_triton(k_cache, v_cache, idx, k, v)
        return
    kv_update_ref(k_cache, v_cache, idx, k, v)


def active_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, heads: int) -> torch.Tensor:
    """Attention of active queries (B, A, D) over all cached keys/values (B, N, D) -> (B, A, D)."""
    b, a, d = q.shape
    n = k_cache.shape[1]
    dh = d // heads
    qh = q.reshape(b, a, heads, dh).transpose(1, 2)
    kh = k_cache.reshape(b, n, heads, dh).transpose(1, 2)
    vh = v_cache.reshape(b, n, heads, dh).transpose(1, 2)
    return F.scaled_dot_product_attention(qh, kh, vh).transpose(1, 2).reshape(b, a, d)
