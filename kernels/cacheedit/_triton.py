"""Triton kernels of the CacheEdit sparse-token ops (one program per active row; D up to 8192).

Imported only when a Triton path is chosen (CUDA tensors, or ``backend='triton'`` under
``TRITON_INTERPRET=1`` on CPU). Semantics and references: :mod:`.ops`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _gather_modulate_kernel(h_ptr, idx_ptr, shift_ptr, scale_ptr, out_ptr, N, A, D, eps, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)  # = b * A + a
    b = pid // A
    r = tl.load(idx_ptr + pid)
    r = tl.maximum(r, 0)
    offs = tl.arange(0, BLOCK_D)
    m = offs < D
    x = tl.load(h_ptr + (b * N + r) * D + offs, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / D
    xc = tl.where(m, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / D
    y = xc * (1.0 / tl.sqrt(var + eps))
    sc = tl.load(scale_ptr + b * D + offs, mask=m, other=0.0).to(tl.float32)
    sh = tl.load(shift_ptr + b * D + offs, mask=m, other=0.0).to(tl.float32)
    y = y * (1.0 + sc) + sh
    tl.store(out_ptr + pid * D + offs, y.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _scatter_kernel(h_ptr, idx_ptr, y_ptr, gate_ptr, N, A, D, HAS_GATE: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // A
    r = tl.load(idx_ptr + pid)
    offs = tl.arange(0, BLOCK_D)
    m = (offs < D) & ((offs * 0 + r) >= 0)
    rr = tl.maximum(r, 0)
    y = tl.load(y_ptr + pid * D + offs, mask=m, other=0.0).to(tl.float32)
    dst = h_ptr + (b * N + rr) * D + offs
    if HAS_GATE:
        g = tl.load(gate_ptr + b * D + offs, mask=m, other=0.0).to(tl.float32)
        base = tl.load(dst, mask=m, other=0.0).to(tl.float32)
        y = base + g * y
    tl.store(dst, y.to(h_ptr.dtype.element_ty), mask=m)


@triton.jit
def _kv_update_kernel(k_ptr, v_ptr, idx_ptr, kn_ptr, vn_ptr, N, A, D, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // A
    r = tl.load(idx_ptr + pid)
    offs = tl.arange(0, BLOCK_D)
    m = (offs < D) & ((offs * 0 + r) >= 0)
    rr = tl.maximum(r, 0)
    kn = tl.load(kn_ptr + pid * D + offs, mask=m, other=0.0)
    vn = tl.load(vn_ptr + pid * D + offs, mask=m, other=0.0)
    tl.store(k_ptr + (b * N + rr) * D + offs, kn.to(k_ptr.dtype.element_ty), mask=m)
    tl.store(v_ptr + (b * N + rr) * D + offs, vn.to(v_ptr.dtype.element_ty), mask=m)


def _block(d: int) -> int:
    return max(16, triton.next_power_of_2(d))


def gather_modulate_triton(h: torch.Tensor, idx: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor,
                           eps: float = 1e-5) -> torch.Tensor:
    """Launcher of the gather + LayerNorm + adaLN-modulation kernel; (B, N, D) -> (B, A, D)."""
    b, n, d = h.shape
    a = idx.shape[1]
    h, idx = h.contiguous(), idx.contiguous()
    out = torch.empty(b, a, d, dtype=h.dtype, device=h.device)
    _gather_modulate_kernel[(b * a,)](h, idx, shift.contiguous(), scale.contiguous(), out, n, a, d, eps, BLOCK_D=_block(d))
    return out


def scatter_residual_triton(h: torch.Tensor, idx: torch.Tensor, y: torch.Tensor,
                            gate: torch.Tensor | None = None) -> torch.Tensor:
    """Launcher of the in-place scatter (``h[b, idx] += gate * y`` or ``= y``); ``h`` must be contiguous."""
    if not h.is_contiguous():
        raise ValueError("scatter_residual: the cached hidden states must be contiguous")
    b, n, d = h.shape
    a = idx.shape[1]
    g = gate.contiguous() if gate is not None else h  # dummy pointer when there is no gate
    _scatter_kernel[(b * a,)](h, idx.contiguous(), y.contiguous(), g, n, a, d, HAS_GATE=gate is not None, BLOCK_D=_block(d))
    return h


def kv_update_triton(k_cache: torch.Tensor, v_cache: torch.Tensor, idx: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Launcher of the K/V cache update (both caches in one launch); caches must be contiguous."""
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("kv_update: the K/V caches must be contiguous")
    b, n, d = k_cache.shape
    a = idx.shape[1]
    _kv_update_kernel[(b * a,)](k_cache, v_cache, idx.contiguous(), k.contiguous(), v.contiguous(), n, a, d, BLOCK_D=_block(d))
