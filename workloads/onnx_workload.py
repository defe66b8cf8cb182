"""Read an ONNX model into an npukit :class:`~npukit.sim.Workload` through the ``onnx`` package.

:func:`onnx_workload` loads the graph without its weights' bytes (only their dims are needed),
checks it with ``onnx.checker``, runs ``onnx.shape_inference.infer_shapes`` (strict, with data
propagation), folds the shape arithmetic that inference cannot follow (``Shape`` of a static tensor,
small nodes of constants, evaluated with ``onnx.reference``; torch writes such chains for every dynamic
axis) and lowers every node in graph order, the way ZigZag's ONNX front end reads a model:

GEMM layers (:class:`~npukit.sim.Layer`), lowered as :mod:`npukit.workloads.trace` lowers torch ops:

* ``Conv`` / ``ConvInteger`` / ``QLinearConv``: M = N_batch*OH*OW, N = Cout/group, K = Cin/group*prod(kernel),
  ``batch`` = group (a grouped or depthwise convolution is one GEMM per group). ``pads``, ``strides``,
  ``dilations``, ``group``, ``auto_pad`` (NOTSET, SAME_UPPER, SAME_LOWER, VALID) are read; ``kernel_shape``
  comes from the weight when the attribute is missing. ``Layer.conv`` = (padded H, padded W, Fh, Fw,
  Cin/group, Cout/group, stride) with padded extent = H + pad_begin + pad_end, as
  :func:`npukit.sim.conv_layer` and the built-in ``resnet18`` write it. A dilated convolution keeps its
  exact GEMM shape (the same MACs as im2col computes them) with ``conv=None``, and so do unequal strides and
  3-D convolutions. A batch of N images is N GEMMs per group on the one-image conv row, sharing the weights
  (``Layer.shared = N``), so each image's input is counted once and the weights once.
* ``ConvTranspose``: the scatter GEMM M = N_batch*H_in*W_in, K = Cin/group, N = Cout/group*prod(kernel).
* ``Gemm``: ``transA``/``transB`` read; ``alpha``, ``beta`` and ``C`` (the bias) do not change the shape.
* ``MatMul`` / ``MatMulInteger`` / ``QLinearMatMul`` (numpy semantics): a 1-D operand gets the missing
  row/column dim; batch dims broadcast into ``batch``; when only one operand has batch dims they are folded
  into M (or N), as a compiler runs ``x @ W`` with a shared weight.
* ``Einsum`` with two operands: shared output letters -> batch, contracted letters -> K, the others M / N.
* ``Attention`` (opset 23): ``scores`` and ``context`` GEMMs and the softmax between them.

``kind``: ``conv``; ``linear`` for a Gemm/MatMul whose B operand is a constant (an initializer, a
``Constant`` node or computed from them only); ``attention`` for a MatMul feeding (through scaling, mask
adds and casts) a Softmax or consuming its output; ``matmul`` otherwise.

Vector-unit operators (:class:`~npukit.sim.VectorOp`; ``elements`` = output elements unless told):

* ``Softmax``/``LogSoftmax``/``Hardmax`` -> ``softmax``, ``reduce`` = the axis length; before opset 13 the
  input is coerced to 2-D at ``axis`` (default 1), so ``reduce`` = prod(shape[axis:]); from 13 the default
  axis is -1 and ``reduce`` = shape[axis].
* ``LayerNormalization`` -> ``layernorm``, ``RMSNormalization`` -> ``rmsnorm`` (``reduce`` = prod(shape[axis:])),
  ``GroupNormalization`` / ``InstanceNormalization`` -> ``groupnorm`` (``reduce`` = C/groups * spatial);
  ``params`` = scale + bias elements.
* ``BatchNormalization`` -> ``mul``: at inference it is one per-channel multiply-add per element;
  ``params`` = scale, bias, mean and variance elements (4*C).
* ``Gelu`` and the erf pattern torch writes for it (``Div``, ``Erf``, ``Add``, ``Mul``, ``Mul``) -> one
  ``gelu``; ``Swish`` and ``Mul(x, Sigmoid(x))`` -> one ``silu``. Other activations (``Relu``, ``Sigmoid``,
  ``Tanh``, ``Erf``, ``Clip``, ``LeakyRelu`` ...) and the remaining elementwise math -> ``other``; the
  pieces of an unfused pattern (e.g. tanh-approximated GELU) are costed one by one.
* ``Add``/``Sub``/``Sum`` -> ``add``, ``Mul``/``Div`` -> ``mul``. For elementwise ops ``inputs`` counts the
  inputs of the output's size and ``params`` the elements of the smaller (broadcast) ones, e.g. a bias.
* ``Gather`` of a constant table with computed indices -> ``embedding``: ``params`` = gathered rows x dim.
* ``MaxPool``/``AveragePool``/``LpPool`` -> ``other`` with ``elements`` = outputs x window and
  ``reduce`` = window; the global pools and the ``Reduce*``/``ArgMax`` ops -> ``other`` with
  ``elements`` = input elements and ``reduce`` = input / output elements. ``Resize`` and the quantize /
  dequantize ops -> ``other``.

Costing nothing (counted in ``meta['skipped']``): layout and data movement (``Reshape``, ``Flatten``,
``Transpose``, ``Concat``, ``Split``, ``Slice``, ``Squeeze``, ``Unsqueeze``, ``Expand``, ``Tile``, ``Pad``,
``Cast``, ``Identity``, ``Dropout``, ``Gather`` of computed data ...) and every node computed from constants
only (``meta['folded']``: weight transposes, shape arithmetic; a ``Shape`` of a static tensor is a constant).
Biases fused into Conv/Gemm are not costed separately. Unknown ops (custom domains, ``LSTM``, ``Loop``,
``TopK`` ...) become ``other`` with their output elements and are listed in ``meta['approximated']``
(op -> count), so a user sees what was approximated.

Weights stored in external data files are never read (``meta['external_data']`` names the files; they may
be missing). Graph inputs must have static shapes: a dynamic dim is refused with a line naming the input
and dim; fix it with ``dims={'batch_size': 1}`` (symbolic dim names), ``batch=N`` (dim 0 of every input
whose dim 0 is dynamic) or ``input_shape`` (the whole shape). Every failure is a :class:`WorkloadError`
of one line. This module imports ``onnx`` inside :func:`onnx_workload` only, and never torch; a file lowered before is
read from the on-disk cache (:mod:`npukit.workloads._onnx_cache`) without importing ``onnx``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from npukit.sim import Layer, Workload, WorkloadError

from ..sim.dataflow import KEY as DATAFLOW
from ._onnx_graph import _apply_overrides, _first_line, _infer_and_fold, _load, _parse_overrides, _without_weights
from ._onnx_lower import _Lowering

__all__ = ["onnx_workload"]

def onnx_workload(
    path: str | Path,
    input_shape: str | Sequence[int] | Mapping[str, Sequence[int]] | None = None,
    *,
    dims: Mapping[str, int] | None = None,
    batch: int | None = None,
    name: str | None = None,
) -> Workload:
    """The :class:`Workload` of the ONNX model at ``path`` (see the module docstring for the lowering).

    ``input_shape`` fixes input shapes: a sequence of ints (or ``"1,3,224,224"``) is the whole shape of the
    model's one input, a mapping gives shapes by input name, and a string ``"batch_size=1,seq=128"`` sets
    symbolic dims by name (as ``dims`` does). ``batch`` sets dim 0 of every input whose dim 0 is dynamic
    (the string form ``"batch=N"`` does too unless a dim is named ``batch``). ``Workload.meta`` holds
    ``source='onnx'``, ``path``, ``opset``, ``producer``, ``input_shapes``, ``onnx_nodes`` (layer -> node),
    ``skipped`` and ``approximated`` (op -> count), ``folded``, ``external_data`` and ``dataflow`` (layer -> the
    layers it reads, through nodes that make none: :mod:`npukit.sim.dataflow`).
    """
    p = Path(path)
    if p.is_dir():
        raise WorkloadError(f"ONNX model '{p}' is a folder, not a file")
    if not p.is_file():
        raise WorkloadError(f"ONNX model '{p}' does not exist")
    shapes_in, dims = _parse_overrides(input_shape, dims, batch)
    # A file lowered before (same bytes, overrides, lowering code and onnx) is read from the cache, without
    # importing onnx (its import alone costs about a second)
    from . import _onnx_cache

    key = _onnx_cache.entry_key(p, (shapes_in, dims), __file__)
    entry = _onnx_cache.entry_for(key)
    wl = _onnx_cache.load(entry, key)
    if wl is None:
        wl = _onnx_cache.store(entry, _lower(p, shapes_in, dims), key)
    return Workload(name or p.stem, wl.layers, {**wl.meta, "path": str(p)})


def _lower(p: Path, shapes_in: Any, dims: Any) -> Workload:
    """The lowering itself (``onnx`` imported here)."""
    try:
        import onnx
    except ImportError:
        raise WorkloadError("reading .onnx models needs the onnx package: pip install onnx==1.23.2") from None
    model = _load(onnx, p)
    lite, external, weights = _without_weights(onnx, model)
    try:
        onnx.checker.check_model(lite)
    except Exception as e:  # noqa: BLE001 - the checker raises several types; all mean an invalid model
        raise WorkloadError(f"'{p}' fails the ONNX checker: {_first_line(e)}") from None
    graph_inputs = _apply_overrides(lite, p, weights, shapes_in, dims)
    inferred, folded = _infer_and_fold(onnx, lite, p)
    opsets = {(o.domain or ""): int(o.version) for o in model.opset_import}
    if "ai.onnx" in opsets:
        opsets.setdefault("", opsets["ai.onnx"])
    lower = _Lowering(onnx, inferred.graph, weights, p, opsets.get("", 1))
    layers = lower.run()
    if not any(isinstance(ly, Layer) for ly in layers):
        raise WorkloadError(f"'{p}' has no Conv, Gemm, MatMul, Einsum or Attention op; nothing to simulate")
    meta: dict[str, Any] = {
        "source": "onnx",
        "path": str(p),
        "opset": opsets,
        "producer": " ".join(x for x in (model.producer_name, model.producer_version) if x),
        "ir_version": int(model.ir_version),
        "input_shapes": graph_inputs,
        "onnx_nodes": lower.node_of,
        "skipped": lower.skipped,
        "folded": lower.folded + folded,
        "approximated": lower.approximated,
        "external_data": external,
        DATAFLOW: lower.dataflow(),
    }
    if dims:
        meta["dims"] = {k or "batch": v for k, v in dims.items()}
    return Workload(p.stem, layers, meta)
