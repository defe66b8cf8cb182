"""Build an npukit :class:`~npukit.sim.Workload` from any PyTorch model by tracing one forward pass.

:func:`trace_workload` runs the model once under ``torch.no_grad()`` with three observers:

* a ``TorchDispatchMode`` that sees every aten op (so functional calls such as ``torch.matmul`` or
  ``F.linear`` and the insides of user ``torch.library`` ops are seen, not just ``nn.Module`` s) and
  records each GEMM-like one: ``mm``/``addmm``/``bmm``/``baddbmm``/``mv``/``dot``, ``convolution`` and the
  fused scaled-dot-product-attention kernels; composite ops that reach it undecomposed (``matmul``,
  ``linear``, ``einsum`` ...) are decomposed so that their GEMMs are seen;
* a ``TorchFunctionMode`` that tells which torch-level call issued each aten op, so that ``F.linear``
  is recorded as ``linear``, ``F.scaled_dot_product_attention`` as two ``attention`` layers (scores and
  context) and ``torch.matmul``/``bmm``/``einsum`` as ``matmul``;
* forward pre/post hooks on every submodule, so that each layer is named after the innermost named
  module that issued it (``layer3.0.conv2``; repeats inside one module get ``.1``, ``.2``; ops outside
  any named submodule get the op name, e.g. ``matmul``, ``attention.scores``).

Lowering (sizes are element counts): a linear on input ``(..., K)`` -> M = product of the leading dims;
a batched matmul -> ``batch`` = product of the batch dims; a convolution -> M = N_batch*OH*OW,
N = out_channels/groups, K = in_channels/groups*Fh*Fw, ``batch`` = groups (a grouped or depthwise
convolution is ``groups`` separate GEMMs) and ``Layer.conv`` = (padded H, padded W, Fh, Fw, Cin/groups,
Cout/groups, stride) as :func:`npukit.sim.workload.conv_layer` writes it (padded extent = H + 2*pad).
Shapes that tuple cannot express (dilation, unequal strides, 3-D or transposed convolution) keep their
exact GEMM shape and get ``conv=None``; a transposed convolution is lowered as the scatter GEMM
M = N_batch*H_in*W_in, K = Cin/groups, N = Cout/groups*Fh*Fw. Attention ``softmax(Q K^T) V`` with Q of
``(B, heads, Lq, E)``, K of ``(B, heads, Lk, E)``, V of ``(B, heads, Lk, Ev)`` -> ``scores``
(M=Lq, N=Lk, K=E, batch=B*heads) and ``context`` (M=Lq, N=Ev, K=Lk, batch=B*heads).

Every non-GEMM operator is recorded too, as a :class:`~npukit.sim.workload.VectorOp` in program order
(softmax, norms, activations, elementwise add/mul, RoPE, adaLN modulation, embedding lookup, KV-cache append,
``other``): aten ops are classified in the dispatch mode; norm and activation modules whose aten ops are a
formula (RMSNorm is pow/mean/rsqrt/mul) are recorded whole from their module hooks, and the RoPE functions and
KV-cache update of transformers and diffusers from wrappers installed for the trace only; the ops inside
anything recorded whole are not recorded again (see :func:`trace_workload` for the counts).

A model and inputs on the ``meta`` device trace shapes only. For speed, the GEMM, elementwise and dtype-cast
aten ops on meta tensors get their (plain, contiguous) outputs made directly rather than through torch's Python
meta kernels; anything with a strided or unusual layout still goes through torch.

The model is traced in eval mode (so batch-norm statistics are not updated and training-only branches
are skipped); its training flags are restored, all hooks removed and the library functions restored afterwards.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial, wraps
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ..sim.errors import WorkloadError
from ..sim.workload import Layer, VectorOp, Workload

__all__ = ["trace_workload"]

_aten = torch.ops.aten
_SDPA = "scaled_dot_product_attention"
_MATMUL_FUNCS = {"matmul", "rmatmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
                 "einsum", "tensordot", "inner", "chain_matmul", "int_mm"}
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


@dataclass
class _Op:
    """One recorded GEMM before naming."""

    scope: str  # innermost named module ('' outside any)
    opname: str  # torch-level call (or aten op) that issued it
    kind: str
    role: str | None  # 'scores' | 'context' for attention
    M: int
    N: int
    K: int
    batch: int
    conv: tuple[int, ...] | None
    dtype: str
    aten: str
    region: int | None
    shared: int = 1  # consecutive batch instances sharing the right operand (a conv's images share its weights)


@dataclass(eq=False)
class _Vec:
    """One recorded vector-unit operator before naming (fields as in :class:`VectorOp`)."""

    scope: str  # innermost named module ('' outside any)
    op: str
    elements: int
    reduce: int
    inputs: int
    params: int
    dtype: str
    aten: str
    own: bool = False  # recorded for a whole module: named after the module itself
    broadcast: bool = False  # a mul by a per-sample (broadcast) operand: may open an adaLN modulation
    scale_src: _Vec | None = None  # the op that produced that broadcast operand, if recorded just before


class _Recorder:
    """Shared state of the module hooks and the two modes."""

    def __init__(self, model: nn.Module, vector_ops: bool = True) -> None:
        self.modules: list[str] = []
        self.regions: list[tuple[int, str]] = []  # (call id, torch-level function name)
        self.region_gemms: dict[int, int] = {}
        self.next_region = 0
        self.ops: list[_Op | _Vec] = []
        self.pending_context: int | None = None
        self.param_storages = {p.untyped_storage().data_ptr() for p in model.parameters() if p.numel()} - {0}
        self.vector_ops = vector_ops
        self.suppress = 0  # > 0 inside an operator recorded whole (a norm module, a RoPE function): inner ops are its own
        self.vec_modules: dict[str, str] = {}  # module name -> op class, for modules recorded as one vector op
        self.vec_stack: list[bool] = []  # per entered vec module: was recording already suppressed there?
        self.recent: dict[int, tuple[torch.Tensor, _Vec]] = {}  # id(output) -> (output, op) of the last few vector ops

    # --------------------------------------------------------------- module hooks
    def enter(self, name: str, module: nn.Module, args: Any) -> None:
        self.modules.append(name)
        if name in self.vec_modules:
            self.vec_stack.append(self.suppress > 0)
            self.suppress += 1

    def exit(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        if name in self.vec_modules and self.vec_stack:
            self.suppress -= 1
            if not self.vec_stack.pop():
                self._module_op(name, module, output)
        if self.modules and self.modules[-1] == name:
            self.modules.pop()

    def _module_op(self, name: str, module: nn.Module, output: Any) -> None:
        """Record a norm or activation module as one vector op (its output's elements)."""
        out = _first_tensor(output)
        if out is None or not out.numel():
            return
        op = self.vec_modules[name]
        params = sum(p.numel() for p in module.parameters(recurse=False))
        if op == "groupnorm":
            reduce = out.numel() // (out.shape[0] * module.num_groups)  # type: ignore[operator]
        elif op in ("layernorm", "rmsnorm"):
            shape = getattr(module, "normalized_shape", None)
            reduce = math.prod(shape) if isinstance(shape, (tuple, list)) and shape else out.shape[-1]
        else:
            reduce, params = 0, 0
        self.vector(op, type(module).__name__, out, reduce=reduce, params=params, own=True)

    # --------------------------------------------------------------- recording
    def _region(self) -> tuple[int | None, str | None]:
        return self.regions[-1] if self.regions else (None, None)

    def record(self, aten_name: str, M: int, N: int, K: int, batch: int, dtype: torch.dtype,
               kind: str | None = None, conv: tuple[int, ...] | None = None, weight: torch.Tensor | None = None,
               shared: int = 1) -> None:
        """Record one GEMM issued by aten op ``aten_name``; ``kind`` None means 'decide from the call site'."""
        if min(M, N, K, batch) <= 0:
            return  # an empty tensor: no multiply-accumulates to simulate
        rid, fname = self._region()
        role = None
        if kind is None:
            if fname == _SDPA and rid is not None:
                n = self.region_gemms.get(rid, 0)
                kind, role = "attention", ("scores", "context")[n % 2]
            elif fname == "linear":
                kind = "linear"
            elif fname in _MATMUL_FUNCS:
                kind = "matmul"
            elif self.pending_context is not None and self.pending_context == rid:
                kind, role = "attention", "context"
                self.pending_context = None
            elif aten_name in ("addmm", "addmv", "_addmm_activation") or self._is_param(weight):
                kind = "linear"  # inside an opaque call (e.g. F.multi_head_attention_forward): a bias or a weight
            else:
                kind = "matmul"
        if rid is not None:
            self.region_gemms[rid] = self.region_gemms.get(rid, 0) + 1
        scope = self.modules[-1] if self.modules else ""
        opname = fname if fname is not None else aten_name.strip("_")
        self.ops.append(_Op(scope, opname, kind, role, M, N, K, batch, conv, _dtype_name(dtype), aten_name, rid, shared))

    def attention(self, aten_name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Record a fused attention kernel as its scores and context GEMMs (layout (..., L, E))."""
        batch = math.prod(q.shape[:-2])
        lq, e, lk, ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
        self.record(aten_name, lq, lk, e, batch, q.dtype, kind="attention")
        self.ops[-1].role = "scores"  # type: ignore[union-attr]
        if self.vector_ops and min(batch, lq, lk):
            self._append(_Vec(self._scope(), "softmax", batch * lq * lk, lk, 1, 0, _dtype_name(q.dtype), aten_name))
        self.record(aten_name, lq, ev, lk, batch, q.dtype, kind="attention")
        self.ops[-1].role = "context"  # type: ignore[union-attr]

    # --------------------------------------------------------------- vector ops
    def _scope(self) -> str:
        return self.modules[-1] if self.modules else ""

    def _append(self, v: _Vec, out: torch.Tensor | None = None) -> None:
        self.ops.append(v)
        if out is not None:
            if len(self.recent) > 16:
                self.recent.clear()
            self.recent[id(out)] = (out, v)

    def _produced(self, t: torch.Tensor) -> _Vec | None:
        """The vector op (among the last few) that produced ``t`` or the tensor ``t`` is a view of."""
        for x in (t, getattr(t, "_base", None)):
            hit = self.recent.get(id(x)) if x is not None else None
            if hit is not None and hit[0] is x:
                return hit[1]
        return None

    def vector(self, op: str, aten_name: str, out: torch.Tensor, elements: int | None = None, reduce: int = 0,
               inputs: int = 1, params: int = 0, operands: Sequence[Any] = (), own: bool = False) -> None:
        """Record one vector op of class ``op`` writing ``out`` (``elements`` defaults to its size)."""
        n = out.numel() if elements is None else elements
        if n <= 0:
            return
        if op == "add" and inputs == 2 and self._fuse_modulate(out, operands):
            return
        v = _Vec(self._scope(), op, n, reduce, inputs, params, _dtype_name(out.dtype), aten_name, own)
        if op == "mul" and inputs == 2:
            small = [t for t in operands if isinstance(t, torch.Tensor) and 0 < t.numel() < n]
            if len(small) == 1:
                v.broadcast, v.scale_src = True, self._produced(small[0])
        self._append(v, out)

    def _fuse_modulate(self, out: torch.Tensor, operands: Sequence[Any]) -> bool:
        """``x * (1 + scale) + shift`` with per-sample (broadcast) scale and shift: turn the mul just recorded into
        one ``modulate`` op of 3 inputs and drop the ``1 + scale`` add that fed it. True if fused."""
        last = self.ops[-1] if self.ops else None
        if not isinstance(last, _Vec) or last.op != "mul" or not last.broadcast or last.elements != out.numel():
            return False
        tensors = [t for t in operands if isinstance(t, torch.Tensor)]
        if len(tensors) != 2:
            return False
        produced = [self._produced(t) is last for t in tensors]
        if produced.count(True) != 1:
            return False
        shift = tensors[produced.index(False)]
        if shift.numel() >= out.numel():
            return False
        last.op, last.inputs, last.aten, last.broadcast = "modulate", 3, "mul+add", False
        src = last.scale_src
        if src is not None and src.op == "add" and src.inputs == 1 and any(src is o for o in self.ops[-3:-1]):
            # the ``1 + scale`` on the per-sample vector is part of the modulation
            del self.ops[next(i for i in range(len(self.ops) - 1, -1, -1) if self.ops[i] is src)]
        self.recent[id(out)] = (out, last)
        return True

    def softmax_seen(self, aten_name: str) -> None:
        """A softmax right after a batched GEMM inside one opaque call (the math path of scaled-dot-product
        attention, which alone uses ``aten._safe_softmax``, or ``F.multi_head_attention_forward``): that GEMM
        is the attention scores and the next one in the same call the context."""
        rid, fname = self._region()
        last = next((o for o in reversed(self.ops) if isinstance(o, _Op)), None)
        if rid is None or fname == _SDPA or fname in _MATMUL_FUNCS or fname == "linear" or last is None:
            return
        batched = last.aten in ("bmm", "baddbmm") or aten_name == "_safe_softmax"
        if last.region == rid and last.role is None and last.kind == "matmul" and batched:
            last.kind, last.role = "attention", "scores"
            self.pending_context = rid

    def _is_param(self, t: torch.Tensor | None) -> bool:
        return t is not None and t.numel() > 0 and t.untyped_storage().data_ptr() in self.param_storages

    # --------------------------------------------------------------- naming
    def layers(self) -> tuple[list[Layer | VectorOp], dict[str, str], dict[str, str]]:
        used: set[str] = set()
        counts: dict[str, int] = {}
        layers: list[Layer | VectorOp] = []
        dtypes: dict[str, str] = {}
        aten_ops: dict[str, str] = {}
        for op in self.ops:
            if isinstance(op, _Vec):
                label = op.op if op.op != "other" else op.aten.strip("_")  # e.g. 'relu', 'mean'
                own = op.own or op.scope.rpartition(".")[2] == label  # a 'relu' module's relu: just the module
                base = op.scope if own and op.scope else f"{op.scope}.{label}" if op.scope else label
            elif op.role is not None:
                base = f"{op.scope or 'attention'}.{op.role}"
            else:
                base = op.scope or op.opname
            n = counts.get(base, 0)
            name = base if n == 0 else f"{base}.{n}"
            while name in used:
                n += 1
                name = f"{base}.{n}"
            counts[base] = n + 1
            used.add(name)
            if isinstance(op, _Vec):
                layers.append(VectorOp(name, op.op, op.elements, op.reduce, op.inputs, op.params))
            else:
                layers.append(Layer(name, op.M, op.N, op.K, op.batch, op.kind, op.conv, op.shared))
            dtypes[name] = op.dtype
            aten_ops[name] = op.aten
        return layers, dtypes, aten_ops


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _fn_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    name = name.split(".")[0].strip("_")
    return "matmul" if name == "rmatmul" else name


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


# ---------------------------------------------------------------------------- vector ops
# aten op -> vector op class; other floating-point pointwise or reduction ops are recorded as 'other'
_VECTOR_ATEN = {"add": "add", "add_": "add", "sub": "add", "sub_": "add", "rsub": "add",
                "mul": "mul", "mul_": "mul", "div": "mul", "div_": "mul",
                "silu": "silu", "silu_": "silu", "gelu": "gelu", "gelu_": "gelu",
                "_softmax": "softmax", "_safe_softmax": "softmax", "_log_softmax": "softmax",
                "native_layer_norm": "layernorm", "native_group_norm": "groupnorm", "_fused_rms_norm": "rmsnorm",
                "embedding": "embedding",
                # normalizations and pooling with no class of their own
                "_native_batch_norm_legit_no_training": "other", "_native_batch_norm_legit": "other",
                "native_batch_norm": "other", "max_pool2d_with_indices": "other", "max_pool3d_with_indices": "other",
                "avg_pool2d": "other", "avg_pool3d": "other", "_adaptive_avg_pool2d": "other",
                "_adaptive_avg_pool3d": "other", "adaptive_max_pool2d": "other"}
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


def _first_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        for y in x:
            t = _first_tensor(y)
            if t is not None:
                return t
    return None


def _tensors(x: Any) -> list[torch.Tensor]:
    """Every tensor in ``x`` (nested tuples, lists and dicts), in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _tensors(y)]
    if isinstance(x, dict):
        return [t for y in x.values() for t in _tensors(y)]
    return []


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
    else:
        inputs = sum(1 for t in operands if t.dim() > 0)
        elements = max([o.numel()] + [t.numel() for t in operands]) if op == "other" else None
        rec.vector(op, name, o, elements=elements, inputs=inputs, operands=operands)


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
                rec.vector("rope", label, o)
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
            rec.vector("kv_append", "cache.update", key_states, elements=key_states.numel() + value_states.numel())
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


_FAST_GEMM = {"mm": 2, "addmm": 2, "bmm": 3, "baddbmm": 3}
_FAST_POINTWISE = {"add", "sub", "mul", "div", "rsub", "neg", "rsqrt", "exp", "silu", "gelu", "pow", "tanh", "sigmoid",
                   "sin", "cos", "reciprocal", "sqrt"}


class _CallSites(TorchFunctionMode):
    """Remembers which torch-level call (``linear``, ``matmul``, ``scaled_dot_product_attention`` ...) is running."""

    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        rec = self.rec
        rec.regions.append((rec.next_region, _fn_name(func)))
        rec.next_region += 1
        try:
            return func(*args, **(kwargs or {}))
        finally:
            rec.regions.pop()


class _GemmCapture(TorchDispatchMode):
    """Records every GEMM-like aten op (see the module docstring)."""

    def __init__(self, rec: _Recorder) -> None:
        super().__init__()
        self.rec = rec
        self._composite: dict[Any, bool] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = func.__name__.split(".")[0]
        if func.namespace == "aten":
            if name in _GEMM_OPS:
                i, j = _GEMM_OPS[name]
                out = _fast_meta(name, args, kwargs) if name in _FAST_GEMM else None
                if out is None:
                    out = func(*args, **kwargs)
                _record_gemm(self.rec, name, args[i], args[j])
                return out
            if name in _CONV_OPS:
                out = func(*args, **kwargs)
                _record_conv(self.rec, name, _bind(func, args, kwargs), out)
                return out
            if name in _PACKED_WEIGHT_MM:
                out = func(*args, **kwargs)
                x = args[0]
                self.rec.record(name, math.prod(x.shape[:-1]), out.shape[-1], x.shape[-1], 1, x.dtype, kind="linear")
                return out
            if name in _UNSUPPORTED:
                raise WorkloadError(f"{_UNSUPPORTED[name]} is not supported by the tracer; "
                                    f"express it with linear/matmul/conv ops to simulate it")
            if name in _FUSED_SDPA_OPS:
                out = func(*args, **kwargs)
                self.rec.attention(name, args[0], args[1], args[2])
                return out
            if name in ("_safe_softmax", "_softmax"):
                self.rec.softmax_seen(name)
        if self._is_composite(func):
            with self:  # run the decomposition with this mode on, so its GEMMs are seen
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if func.namespace == "quantized" and ("linear" in name or "conv" in name):
            raise WorkloadError(f"quantized op {func} is not supported by the tracer (its weight is packed); "
                                f"trace the float model instead, it has the same GEMM shapes")
        if func.namespace not in _PLAIN_NAMESPACES:
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if tensors:
                # a user op: run its kernel below the Python key with this mode on, so its GEMMs are seen
                keys = torch._C._dispatch_keys(tensors[0])
                for t in tensors[1:]:
                    keys = keys | torch._C._dispatch_keys(t)
                keys = keys & torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.Python)
                with self:
                    return func.redispatch(keys, *args, **kwargs)
        if func.namespace == "aten":
            out = _fast_meta(name, args, kwargs) if name in _FAST_POINTWISE or name == "_to_copy" else None
            if out is None:
                out = func(*args, **kwargs)
            _record_vector(self.rec, func, name, args, kwargs, out)
            return out
        return func(*args, **kwargs)

    def _is_composite(self, func: Any) -> bool:
        hit = self._composite.get(func)
        if hit is None:
            hit = torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
            self._composite[func] = hit
        return hit


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,), {}
    if isinstance(example_inputs, dict):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    raise WorkloadError(
        f"example inputs must be a Tensor, a tuple of positional inputs or a dict of keyword inputs, "
        f"not {type(example_inputs).__name__}"
    )


def _shape_of(x: Any) -> Any:
    return list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__


def trace_workload(model: nn.Module, example_inputs: tuple | torch.Tensor, name: str = "model",
                   vector_ops: bool = True) -> Workload:
    """Run ``model(*example_inputs)`` once and return its GEMM-like and vector ops as a :class:`Workload`.

    ``example_inputs`` is a Tensor, a tuple of positional inputs or a dict of keyword inputs; the model and its
    inputs may live on the ``meta`` device (shapes only, nothing computed). Layer sizes are element counts;
    ``Workload.meta`` holds ``dtypes`` (layer -> operand/output dtype, e.g. ``'float32'``), ``aten_ops``
    (layer -> aten op), ``input_shapes`` and ``source='torch-trace'``.

    With ``vector_ops`` (the default) every non-GEMM operator on floating-point data is recorded, in program
    order, as a :class:`VectorOp` (counts are output elements unless said): softmax (``reduce`` = row length; the
    softmax of scaled-dot-product attention is recorded between its scores and context GEMMs, its scale and mask
    folded in), layer/RMS/group norm (norm modules are recorded whole, see :func:`_module_vector_op`; ``params`` =
    their weight and bias elements), GELU/SiLU, add/sub (``add``), mul/div (``mul``), RoPE (the ``apply_rotary*``
    functions of transformers and diffusers, one op per rotated tensor),
    adaLN modulation ``x * (1 + scale) + shift`` with broadcast scale and shift (``modulate``, 3 inputs), embedding
    lookup (``params`` = gathered rows x dim), KV-cache append (transformers' ``Cache.update``: elements = new key
    + value elements) and any other pointwise or reduction op (``other``; elements = its largest operand). Not
    recorded: ops inside a recorded op, bias adds inside a linear/conv call, data movement (views, copies, dtype
    casts, concatenation, indexing) and integer/boolean index or mask arithmetic. Raises :class:`WorkloadError`
    (one line) if the forward pass fails or the model has no linear, conv, matmul or attention op.
    """
    if not isinstance(model, nn.Module):
        raise WorkloadError(f"trace_workload needs a torch.nn.Module, got {type(model).__name__}")
    args, kwargs = _split_inputs(example_inputs)
    rec = _Recorder(model, vector_ops)
    training = {m: m.training for m in model.modules()}
    handles = []
    patched: list[tuple[Any, str, Any]] = []
    try:
        model.eval()
        for mname, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(partial(rec.enter, mname)))
            handles.append(module.register_forward_hook(partial(rec.exit, mname), always_call=True))
            op = _module_vector_op(module) if vector_ops else None
            if op is not None:
                rec.vec_modules[mname] = op
        patched = _patch_library_functions(rec)
        with torch.no_grad(), _GemmCapture(rec), _CallSites(rec):
            model(*args, **kwargs)
    except WorkloadError:
        raise
    except Exception as e:
        raise WorkloadError(f"model '{name}': forward pass failed while tracing: {_one_line(e)}") from e
    finally:
        for owner, attr, original in reversed(patched):
            setattr(owner, attr, original)
        for h in handles:
            h.remove()
        for m, flag in training.items():
            m.training = flag
    layers, dtypes, aten_ops = rec.layers()
    if not any(isinstance(ly, Layer) for ly in layers):
        raise WorkloadError(f"model '{name}' has no linear, conv, matmul or attention op; nothing to simulate")
    meta = {
        "source": "torch-trace",
        "input_shapes": [_shape_of(a) for a in args] + [f"{k}={_shape_of(v)}" for k, v in kwargs.items()],
        "dtypes": dtypes,
        "aten_ops": aten_ops,
    }
    return Workload(name, layers, meta)
