"""Outputs of GEMM, elementwise and dtype-cast aten ops on ``meta`` tensors made directly, so that tracing a
whole real model on the meta device does not pay for torch's Python meta kernels (~0.5 ms a call); anything
with a strided or unusual layout still goes through torch."""

from __future__ import annotations

import math

import torch

from ._trace_lower import _GEMM_OPS

_FAST_GEMM = {"mm": 2, "addmm": 2, "bmm": 3, "baddbmm": 3}
_FAST_POINTWISE = {"add", "sub", "mul", "div", "rsub", "neg", "rsqrt", "exp", "silu", "gelu", "pow", "tanh", "sigmoid",
                   "sin", "cos", "reciprocal", "sqrt"}


def _fast_meta(name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The output of GEMM or elementwise aten op ``name`` on meta tensors, made directly (torch's meta kernels for
    these are Python decompositions, ~0.5 ms a call); None where the shape, dtype or layout is not plain."""
    if "out" in kwargs:
        return None
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors or not all(t.is_meta for t in tensors):
        return None
    if name in _FAST_GEMM:
        i, j = _GEMM_OPS[name]
        a, b = args[i], args[j]
        if a.dim() != _FAST_GEMM[name] or b.dim() != _FAST_GEMM[name] or a.dtype != b.dtype or not a.is_floating_point():
            return None
        shape = (a.shape[0], b.shape[1]) if a.dim() == 2 else (a.shape[0], a.shape[1], b.shape[2])
        return torch.empty(shape, dtype=a.dtype, device="meta")
    if name == "_to_copy":  # a dtype cast of a contiguous tensor
        x = args[0]
        if len(args) != 1 or set(kwargs) - {"dtype", "device", "layout", "memory_format"} or not x.is_contiguous():
            return None
        if kwargs.get("device") not in (None, x.device) or kwargs.get("layout") not in (None, torch.strided):
            return None
        if kwargs.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
            return None
        return torch.empty(x.shape, dtype=kwargs.get("dtype") or x.dtype, device="meta")
    if name not in _FAST_POINTWISE or set(kwargs) - {"alpha", "approximate"} or len(args) > 2:
        return None
    if not all(isinstance(a, (torch.Tensor, int, float)) for a in args):
        return None
    if not all(t.is_floating_point() for t in tensors):
        return None
    shape = _broadcast(*(tuple(t.shape) for t in tensors))
    if shape is None:
        return None
    n = math.prod(shape)
    if any(t.numel() == n and not t.is_contiguous() for t in tensors):
        return None  # a strided full-size input: let torch pick the output layout
    dtype = torch.result_type(args[0], args[1]) if len(args) == 2 else tensors[0].dtype
    return torch.empty(shape, dtype=dtype, device="meta")


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast of ``shapes`` (NumPy rules), None if they do not broadcast."""
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, start=ndim - len(s)):
            if d != out[i]:
                if out[i] == 1:
                    out[i] = d
                elif d != 1:
                    return None
    return tuple(out)
