"""How the tracer lowers what it sees into recorder entries: GEMM-like aten ops (``mm``, ``bmm``,
``convolution`` ...) into GEMM shapes, every other floating-point aten op into a vector op class, norm and
activation modules recorded whole, and the RoPE functions and KV-cache update of transformers and diffusers
wrapped for the trace (see :func:`npukit.workloads.trace.trace_workload` for the lowering rules).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import torch
from torch import nn

from ._trace_record import _MATMUL_FUNCS, _SDPA, _first_tensor, _Recorder, _tensors

# aten ops whose shapes this module lowers; everything else is passed through untouched
_GEMM_OPS = {"mm": (0, 1), "_int_mm": (0, 1), "addmm": (1, 2), "_addmm_activation": (1, 2), "bmm": (0, 1),
             "baddbmm": (1, 2), "addbmm": (1, 2), "mv": (0, 1), "addmv": (1, 2), "dot": (0, 1), "vdot": (0, 1)}
_CONV_OPS = {"convolution", "_convolution"}
_FUSED_SDPA_OPS = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                   "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                   "_scaled_dot_product_fused_attention_overrideable"}
# weight-only-quantized matmuls: activation (M, K) times a packed weight; N is read off the output
_PACKED_WEIGHT_MM = {"_weight_int8pack_mm", "_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu"}
# GEMM-like ops the tracer cannot lower: raise rather than silently drop their work
_UNSUPPORTED = {"_trilinear": "F.bilinear (aten._trilinear)"}
_PLAIN_NAMESPACES = {"aten", "prim", "prims"}


def _bind(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Map an aten op's arguments to their schema names."""
    out: dict[str, Any] = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def _expand(v: Any, n: int) -> list[int]:
    v = [int(x) for x in v] if isinstance(v, (list, tuple)) else [int(v)]
    return v * n if len(v) == 1 else v


def _record_gemm(rec: _Recorder, name: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if name in ("dot", "vdot"):
        rec.record(name, 1, 1, a.shape[0], 1, a.dtype, weight=b)
    elif name in ("mv", "addmv"):
        rec.record(name, a.shape[0], 1, a.shape[1], 1, a.dtype, weight=a)
    elif name in ("bmm", "baddbmm", "addbmm"):
        rec.record(name, a.shape[1], b.shape[2], a.shape[2], a.shape[0], a.dtype, weight=b)
    else:
        rec.record(name, a.shape[0], b.shape[1], a.shape[1], 1, a.dtype, weight=b)


def _record_conv(rec: _Recorder, name: str, p: dict[str, Any], out: torch.Tensor) -> None:
    x, w = p["input"], p["weight"]
    g = int(p["groups"])
    sp = w.dim() - 2
    ks = list(w.shape[2:])
    batched = x.dim() == w.dim()
    nb = x.shape[0] if batched else 1
    cin = x.shape[1] if batched else x.shape[0]
    in_sp = list(x.shape[-sp:]) if sp else []
    if p.get("transposed"):
        cout = w.shape[1] * g  # weight of a transposed conv is (Cin, Cout/groups, *kernel)
        rec.record(name, nb * math.prod(in_sp), cout // g * math.prod(ks), cin // g, g, x.dtype, kind="conv")
        return
    cout = w.shape[0]
    out_sp = list(out.shape[-sp:]) if sp else []
    stride, pad, dil = _expand(p["stride"], sp), _expand(p["padding"], sp), _expand(p["dilation"], sp)
    conv = None
    if sp in (1, 2) and all(d == 1 for d in dil) and len(set(stride)) == 1:
        if sp == 2:
            conv = (in_sp[0] + 2 * pad[0], in_sp[1] + 2 * pad[1], ks[0], ks[1], cin // g, cout // g, stride[0])
        else:
            conv = (1, in_sp[0] + 2 * pad[0], 1, ks[0], cin // g, cout // g, stride[0])
        oh = (conv[0] - conv[2]) // conv[6] + 1
        ow = (conv[1] - conv[3]) // conv[6] + 1
        if oh * ow != math.prod(out_sp):
            conv = None  # not expressible as a SCALE-Sim conv row; keep the GEMM shape only
    if conv is not None and nb > 1:
        # the conv row describes one image: one GEMM per (group, image), the images of a group sharing its
        # weights, so each image's unique input data is counted (not one image's for all of them)
        rec.record(name, math.prod(out_sp), cout // g, cin // g * math.prod(ks), g * nb, x.dtype, kind="conv", conv=conv,
                   shared=nb)
        return
    rec.record(name, nb * math.prod(out_sp), cout // g, cin // g * math.prod(ks), g, x.dtype, kind="conv", conv=conv)


# aten op -> vector op class; other floating-point pointwise or reduction ops are recorded as 'other'
_VECTOR_ATEN = {"add": "add", "add_": "add", "sub": "add", "sub_": "add", "rsub": "add",
                "mul": "mul", "mul_": "mul", "div": "mul", "div_": "mul",
                "silu": "silu", "silu_": "silu", "gelu": "gelu", "gelu_": "gelu",
                "_softmax": "softmax", "_safe_softmax": "softmax", "_log_softmax": "softmax",
                "native_layer_norm": "layernorm", "native_group_norm": "groupnorm", "_fused_rms_norm": "rmsnorm",
                "embedding": "embedding",
                # batch norm at inference: one per-channel multiply-add per element (as the ONNX lowering has it)
                "_native_batch_norm_legit_no_training": "mul", "_native_batch_norm_legit": "mul",
                "native_batch_norm": "mul",
                # pooling with no class of its own
                "max_pool2d_with_indices": "other", "max_pool3d_with_indices": "other",
                "avg_pool2d": "other", "avg_pool3d": "other", "_adaptive_avg_pool2d": "other",
                "_adaptive_avg_pool3d": "other", "adaptive_max_pool2d": "other"}
_BATCH_NORMS = {"_native_batch_norm_legit_no_training", "_native_batch_norm_legit", "native_batch_norm"}
# windowed pools -> spatial dims of their kernel: one lane operation per (output, window element), as in ONNX
_WINDOW_POOLS = {"max_pool2d_with_indices": 2, "max_pool3d_with_indices": 3, "avg_pool2d": 2, "avg_pool3d": 3}
# pointwise-tagged aten ops that only move or copy data
_NOT_COMPUTE = {"clone", "_to_copy", "copy", "copy_", "lift_fresh_copy", "alias_copy", "detach_copy"}
# torch-level calls whose inner elementwise ops (a bias add, a scale) are part of their GEMM
_GEMM_CALLS = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
               "convolution", "bilinear"} | _MATMUL_FUNCS
# module-level RoPE functions of the model libraries (looked up in their modules' globals at call time)
_ROPE_PREFIX = "apply_rotary"
_LIBRARY_MODULES = ("transformers.models.", "diffusers.models.")
_POINTWISE, _REDUCTION = torch.Tag.pointwise, torch.Tag.reduction


def _module_vector_op(module: nn.Module) -> str | None:
    """The vector op a norm or activation module is recorded as (whole, its inner aten ops not), else None.

    Normalizations: ``nn.LayerNorm``/``nn.GroupNorm``/``nn.RMSNorm`` and any class named ``*RMSNorm`` (transformers'
    ``LlamaRMSNorm``, diffusers' ``RMSNorm``: pow/mean/rsqrt/mul in aten). Activations: the GELU/SiLU classes of
    ``transformers.activations`` (some are tanh/erf formulas in aten). Adaptive norms (diffusers' ``AdaLayerNorm*``)
    are not: their linear, inner norm and modulation are recorded one by one.
    """
    name = type(module).__name__
    if isinstance(module, nn.LayerNorm):
        return "layernorm"
    if isinstance(module, nn.GroupNorm):
        return "groupnorm"
    if isinstance(module, nn.RMSNorm) or name.endswith("RMSNorm") or name == "T5LayerNorm":
        return "rmsnorm"
    if type(module).__module__ == "transformers.activations":
        if "GELU" in name:
            return "gelu"
        if "SiLU" in name:
            return "silu"
    return None


def _record_vector(rec: _Recorder, func: Any, name: str, args: tuple, kwargs: dict, out: Any) -> None:
    """Record aten op ``func`` as a vector op if it computes on floating-point data (see :func:`trace_workload`)."""
    if rec.suppress or not rec.vector_ops:
        return
    _, fname = rec._region()
    if fname in _GEMM_CALLS:
        return
    op = _VECTOR_ATEN.get(name)
    if op is None:
        if name in _NOT_COMPUTE or (_POINTWISE not in func.tags and _REDUCTION not in func.tags):
            return
        op = "other"
    if fname == _SDPA and op != "softmax":
        return  # inside attention: its scale, mask and softmax are the softmax op
    o = _first_tensor(out)
    if o is None or not (o.is_floating_point() or o.is_complex()):
        return  # integer/boolean index and mask arithmetic is bookkeeping, not vector work
    operands = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if op == "softmax":
        x = args[0]
        rec.vector(op, name, o, reduce=x.shape[int(args[1])] if x.dim() else 1)
    elif op == "layernorm":
        p = _bind(func, args, kwargs)
        params = sum(t.numel() for t in (p["weight"], p["bias"]) if isinstance(t, torch.Tensor))
        rec.vector(op, name, o, reduce=math.prod(p["normalized_shape"]), params=params)
    elif op == "rmsnorm":
        p = _bind(func, args, kwargs)
        params = p["weight"].numel() if isinstance(p["weight"], torch.Tensor) else 0
        rec.vector(op, name, o, reduce=math.prod(p["normalized_shape"]), params=params)
    elif op == "groupnorm":
        p = _bind(func, args, kwargs)
        params = sum(t.numel() for t in (p["weight"], p["bias"]) if isinstance(t, torch.Tensor))
        rec.vector(op, name, o, reduce=int(p["C"]) // int(p["group"]) * int(p["HxW"]), params=params)
    elif op == "embedding":
        rec.vector(op, name, o, inputs=0, params=o.numel())
    elif name in _WINDOW_POOLS:
        p = _bind(func, args, kwargs)
        window = math.prod(_expand(p["kernel_size"], _WINDOW_POOLS[name]))
        rec.vector(op, name, o, elements=o.numel() * window, reduce=window)
    else:
        # operands of the op's size are activation inputs; a smaller (broadcast) one, e.g. a bias, a per-channel
        # scale or batch norm's statistics, is a parameter read of its elements (as the ONNX lowering counts them)
        elements = max([o.numel()] + [t.numel() for t in operands]) if op == "other" else o.numel()
        inputs = sum(1 for t in operands if t.dim() > 0 and t.numel() >= elements)
        params = sum(t.numel() for t in operands if t.dim() > 0 and t.numel() < elements)
        rec.vector(op, name, o, elements=elements, inputs=inputs, params=params, operands=operands,
                   label="batchnorm" if name in _BATCH_NORMS else None)


def _rope_function(rec: _Recorder, fn: Callable, label: str) -> Callable:
    """``fn`` (a library's RoPE function) recorded as one ``rope`` op per rotated output tensor; its inner
    elementwise ops are not recorded. The cos/sin (or complex frequency) tables are activations computed once per
    forward, not parameters: ``params`` = 0, as in the ``llama3-8b-layer`` built-in."""

    @wraps(fn)
    def rope(*args: Any, **kwargs: Any) -> Any:
        if rec.suppress:
            return fn(*args, **kwargs)
        rec.suppress += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            rec.suppress -= 1
        if rec.vector_ops:
            for o in _tensors(out):
                made = rec.made_from([o])  # its inner ops are not recorded: what fed them
                rec.produce(rec.vector("rope", label, o), made, [o])
        return out

    rope._npukit_original = fn  # type: ignore[attr-defined]
    return rope


def _kv_update(rec: _Recorder, fn: Callable) -> Callable:
    """A KV-cache ``update(key_states, value_states, ...)`` recorded as one ``kv_append`` op of the new key and
    value elements (the rows written into the cache); the concatenation inside is not recorded."""

    @wraps(fn)
    def update(self: Any, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if rec.suppress:
            return fn(self, key_states, value_states, *args, **kwargs)
        rec.suppress += 1
        try:
            out = fn(self, key_states, value_states, *args, **kwargs)
        finally:
            rec.suppress -= 1
        if rec.vector_ops:
            op = rec.vector("kv_append", "cache.update", key_states, elements=key_states.numel() + value_states.numel())
            rec.produce(op, rec.made_from([key_states, value_states]), _tensors(out))
        return out

    return update


def _patch_library_functions(rec: _Recorder) -> list[tuple[Any, str, Any]]:
    """Wrap the RoPE functions and the KV-cache update of the loaded model libraries (transformers, diffusers)
    for this trace; returns ``(owner, attribute, original)`` to restore."""
    patched: list[tuple[Any, str, Any]] = []
    for modname, mod in list(sys.modules.items()):
        if mod is None or not modname.startswith(_LIBRARY_MODULES):
            continue
        names = getattr(mod, "__dict__", {})
        for attr, fn in list(names.items()):
            if attr.startswith(_ROPE_PREFIX) and callable(fn) and not isinstance(fn, type):
                patched.append((mod, attr, fn))
                setattr(mod, attr, _rope_function(rec, fn, attr))
    cache_utils = sys.modules.get("transformers.cache_utils")
    cache = getattr(cache_utils, "Cache", None)
    if cache is not None and "update" in vars(cache):
        patched.append((cache, "update", vars(cache)["update"]))
        cache.update = _kv_update(rec, vars(cache)["update"])
    return patched
