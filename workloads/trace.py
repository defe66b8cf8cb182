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

This module holds the two modes and :func:`trace_workload`; the recorder and the naming are in
:mod:`npukit.workloads._trace_record`, the lowering of ops into GEMMs and vector ops in
:mod:`npukit.workloads._trace_lower`, the meta-tensor fast path in :mod:`npukit.workloads._trace_meta`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from ..sim.dataflow import KEY as DATAFLOW
from ..sim.errors import WorkloadError
from ..sim.workload import Layer, Workload
from ._trace_lower import (
    _CONV_OPS,
    _FUSED_SDPA_OPS,
    _GEMM_OPS,
    _PACKED_WEIGHT_MM,
    _PLAIN_NAMESPACES,
    _UNSUPPORTED,
    _bind,
    _module_vector_op,
    _patch_library_functions,
    _record_conv,
    _record_gemm,
    _record_vector,
)
from ._trace_meta import _FAST_GEMM, _FAST_POINTWISE, _fast_meta
from ._trace_moe import MoeState, moe_forwards
from ._trace_record import _Recorder, _tensors
from .moe_routing import Routing

__all__ = ["trace_workload"]

# aten ops whose output carries no dataflow from their tensor inputs: tensors made from another's shape
_SHAPE_ONLY = {"new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "empty_like", "zeros_like",
               "ones_like", "full_like", "rand_like", "randn_like", "randint_like"}
# gathers of rows (a mixture-of-experts layer's tokens of one expert: a different tensor for each expert, made after
# its inputs and the indices, not a whole tensor of them)
_GATHERS = {"index", "_unsafe_index", "index_select", "gather", "take", "take_along_dim", "masked_select", "nonzero"}


def _fn_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or type(func).__name__
    name = name.split(".")[0].strip("_")
    return "matmul" if name == "rmatmul" else name


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
        self._depth = 0  # nested aten calls (a composite op's decomposition runs inside its own call)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        """Run and record ``func`` (:meth:`_dispatch`), and the dataflow: the ops it recorded read what made its
        tensor inputs; its outputs were made by the last of them, or (recording nothing: a view, a copy, a cast)
        by what made its inputs. A gather of rows carries its inputs as gathered (an order, not a whole tensor); a
        tensor made from another's shape carries nothing."""
        kwargs = kwargs or {}
        rec = self.rec
        if not self._depth:
            rec.written.clear()
        mark = len(rec.written)
        name = func.__name__.split(".")[0]
        made = frozenset() if name in _SHAPE_ONLY else rec.made_from(_tensors(args) + _tensors(kwargs))
        if name in _GATHERS:
            made = rec.gathered(made)
        self._depth += 1
        try:
            out = self._dispatch(func, types, args, kwargs)
        finally:
            self._depth -= 1
        new = rec.written[mark:]
        for op in new:
            if op.reads is None:
                op.reads = made
        rec.mark(_tensors(out), frozenset({id(new[-1])}) if new else made)
        return out

    def _dispatch(self, func, types, args, kwargs):  # type: ignore[no-untyped-def]
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
                   vector_ops: bool = True, routing: Routing | None = None) -> Workload:
    """Run ``model(*example_inputs)`` once and return its GEMM-like and vector ops as a :class:`Workload`.

    ``example_inputs`` is a Tensor, a tuple of positional inputs or a dict of keyword inputs; the model and its
    inputs may live on the ``meta`` device (shapes only, nothing computed). Layer sizes are element counts;
    ``Workload.meta`` holds ``dtypes`` (layer -> operand/output dtype, e.g. ``'float32'``), ``aten_ops``
    (layer -> aten op), ``input_shapes``, ``source='torch-trace'`` and ``dataflow`` (layer -> the recorded ops and
    ``<input N>`` it reads: :mod:`npukit.sim.dataflow`).

    With ``vector_ops`` (the default) every non-GEMM operator on floating-point data is recorded, in program
    order, as a :class:`VectorOp` (counts are output elements unless said): softmax (``reduce`` = row length; the
    softmax of scaled-dot-product attention is recorded between its scores and context GEMMs, its scale and mask
    folded in), layer/RMS/group norm (norm modules are recorded whole, see :func:`_module_vector_op`; ``params`` =
    their weight and bias elements), GELU/SiLU, add/sub (``add``), mul/div (``mul``), RoPE (the ``apply_rotary*``
    functions of transformers and diffusers, one op per rotated tensor),
    adaLN modulation ``x * (1 + scale) + shift`` with broadcast scale and shift (``modulate``, 3 inputs), embedding
    lookup (``params`` = gathered rows x dim), KV-cache append (transformers' ``Cache.update``: elements = new key
    + value elements), batch norm (``mul``: one per-channel multiply-add per element, ``params`` = weight, bias,
    running mean and variance, 4*C), max/average pooling (``other``, elements = outputs x window, ``reduce`` =
    window) and any other pointwise or reduction op (``other``; elements = its largest operand). For these
    elementwise ops ``inputs`` counts the operands of the op's size and ``params`` the elements of the smaller
    (broadcast) ones, e.g. a bias or a per-channel scale, as :mod:`npukit.workloads.onnx_workload` counts them. Not
    recorded: ops inside a recorded op, bias adds inside a linear/conv call, data movement (views, copies, dtype
    casts, concatenation, indexing) and integer/boolean index or mask arithmetic. Raises :class:`WorkloadError`
    (one line) if the forward pass fails or the model has no linear, conv, matmul or attention op.

    Mixture-of-experts layers (transformers' experts classes, npukit's OmniMoE and PEER) on meta inputs compute the
    tokens ``routing`` sends each expert (default uniform; see :mod:`npukit.workloads.moe_routing` and
    :mod:`npukit.workloads._trace_moe`); ``meta['moe']`` then holds the routing, the number of MoE layers run and,
    per experts module, the parameters one token does not touch (``inactive_params``).
    """
    if not isinstance(model, nn.Module):
        raise WorkloadError(f"trace_workload needs a torch.nn.Module, got {type(model).__name__}")
    args, kwargs = _split_inputs(example_inputs)
    rec = _Recorder(model, vector_ops)
    for i, t in enumerate(_tensors(list(args) + list(kwargs.values()))):
        rec.mark([t], frozenset({f"<input {i}>"}))
    moe = MoeState(routing or Routing(), f"model '{name}'")
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
        with torch.no_grad(), moe_forwards(model, rec, moe), _GemmCapture(rec), _CallSites(rec):
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
    layers, dtypes, aten_ops, flow = rec.layers()
    if not any(isinstance(ly, Layer) for ly in layers):
        raise WorkloadError(f"model '{name}' has no linear, conv, matmul or attention op; nothing to simulate")
    meta = {
        "source": "torch-trace",
        "input_shapes": [_shape_of(a) for a in args] + [f"{k}={_shape_of(v)}" for k, v in kwargs.items()],
        "dtypes": dtypes,
        "aten_ops": aten_ops,
        DATAFLOW: flow,
    }
    if moe.layers:
        meta["moe"] = {"routing": moe.routing.text, "layers": moe.layers, "inactive_params": moe.inactive}
    return Workload(name, layers, meta)
