"""Read an ONNX model into an npukit :class:`~npukit.sim.Workload` through the ``onnx`` package.

:func:`onnx_workload` loads the graph without its weights' bytes (only their dims are needed),
checks it with ``onnx.checker``, runs ``onnx.shape_inference.infer_shapes`` (strict, with data
propagation), folds the shape arithmetic that inference cannot follow (``Shape`` of a static tensor,
small nodes of constants, evaluated with ``onnx.reference``; torch writes such chains for every dynamic
axis) and lowers every node in graph order, the way ZigZag's ONNX front end reads a model:

GEMM layers (:class:`~npukit.sim.Layer`), lowered as :mod:`npukit.models.trace` lowers torch ops:

* ``Conv`` / ``ConvInteger`` / ``QLinearConv``: M = N_batch*OH*OW, N = Cout/group, K = Cin/group*prod(kernel),
  ``batch`` = group (a grouped or depthwise convolution is one GEMM per group). ``pads``, ``strides``,
  ``dilations``, ``group``, ``auto_pad`` (NOTSET, SAME_UPPER, SAME_LOWER, VALID) are read; ``kernel_shape``
  comes from the weight when the attribute is missing. ``Layer.conv`` = (padded H, padded W, Fh, Fw,
  Cin/group, Cout/group, stride) with padded extent = H + pad_begin + pad_end, as
  :func:`npukit.sim.conv_layer` and the built-in ``resnet18`` write it. A dilated convolution keeps its
  exact GEMM shape (the same MACs as im2col computes them) with ``conv=None``, and so do unequal strides,
  3-D convolutions and N_batch > 1 (the conv tuple describes one image).
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
of one line. This module imports ``onnx`` inside :func:`onnx_workload` only, and never torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from npukit.sim import Layer, VectorOp, Workload, WorkloadError

__all__ = ["onnx_workload"]

_STD = ("", "ai.onnx")
# initializers with more elements than this are replaced by typed graph inputs before checking and shape
# inference (their values are never needed; small ones stay, they may be shapes that inference propagates)
_KEEP_ELEMENTS = 256

_SHAPE_ONLY = {
    "Identity", "Dropout", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
    "Shape", "Size", "Cast", "CastLike", "Expand", "Tile", "Pad", "GatherElements", "GatherND", "DepthToSpace",
    "SpaceToDepth", "ConstantOfShape", "Range", "ReverseSequence", "Optional", "OptionalGetElement",
    "SequenceConstruct", "SequenceAt", "SplitToSequence", "ConcatFromSequence", "Col2Im",
}
_UNARY_OTHER = {
    "Relu", "LeakyRelu", "PRelu", "Clip", "Elu", "Selu", "Celu", "ThresholdedRelu", "HardSigmoid", "HardSwish",
    "Softplus", "Softsign", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor",
    "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
    "Atanh", "Not", "IsNaN", "IsInf", "Mish", "Shrink", "BitwiseNot", "Trilu",
    "Pow", "Max", "Min", "Mean", "Mod", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
    "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Resize", "Upsample", "ScatterND",
    "ScatterElements", "Scatter", "CumSum",
}
_ELEMENTWISE = {**dict.fromkeys(_UNARY_OTHER, "other"), "Add": "add", "Sub": "add", "Sum": "add", "Mul": "mul",
                "Div": "mul", "Gelu": "gelu", "Swish": "silu"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool", "GlobalMaxPool",
           "GlobalLpPool", "LpNormalization"}
_POOLS = {"MaxPool", "AveragePool", "LpPool", "MaxRoiPool"}
_CONVS = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3), "ConvTranspose": (0, 1)}
_MATMULS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
_GEMM_OPS = {*_CONVS, *_MATMULS, "Gemm", "Einsum", "Attention"}
_DATA_DEPENDENT = {"NonZero", "Unique", "NonMaxSuppression", "Compress", "TopK", "StringSplit"}
# what may sit between an attention MatMul and its Softmax
_SCORE_PATH = {"Div", "Mul", "Add", "Sub", "Where", "Cast", "Identity", "Reshape", "Tanh"}
_PROB_PATH = {"Cast", "Dropout", "Identity", "Reshape"}


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
    ``skipped`` and ``approximated`` (op -> count), ``folded`` and ``external_data``.
    """
    p = Path(path)
    if p.is_dir():
        raise WorkloadError(f"ONNX model '{p}' is a folder, not a file")
    if not p.is_file():
        raise WorkloadError(f"ONNX model '{p}' does not exist")
    shapes_in, dims = _parse_overrides(input_shape, dims, batch)
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
    }
    if dims:
        meta["dims"] = {k or "batch": v for k, v in dims.items()}
    return Workload(name or p.stem, layers, meta)


# ---------------------------------------------------------------------------- loading
def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _load(onnx: Any, p: Path) -> Any:
    try:
        data = p.read_bytes()
    except OSError as e:
        raise WorkloadError(f"cannot read ONNX model '{p}': {e.strerror or e}") from None
    if not data:
        raise WorkloadError(f"ONNX model '{p}' is empty")
    try:
        model = onnx.ModelProto.FromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        head = data[:64].lstrip()
        kind = "a text file" if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head) else "truncated or not ONNX"
        raise WorkloadError(f"'{p}' is not an ONNX model ({kind}: protobuf says {_first_line(e)})") from None
    if not model.ir_version or not model.HasField("graph"):
        raise WorkloadError(f"'{p}' is not an ONNX model (no IR version or no graph in the protobuf)")
    return model


def _without_weights(onnx: Any, model: Any) -> tuple[Any, list[str], set[str]]:
    """A copy of ``model`` whose large and external initializers are typed graph inputs (values unread),
    the external data files named, and the names of all initializers."""
    lite = onnx.ModelProto()
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(lite, f, getattr(model, f))
    lite.opset_import.extend(model.opset_import)
    lite.functions.extend(model.functions)
    g, src = lite.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    listed = {i.name for i in src.input}
    external: list[str] = []
    for t in src.initializer:
        is_external = t.data_location == onnx.TensorProto.EXTERNAL
        if is_external:
            loc = next((e.value for e in t.external_data if e.key == "location"), "")
            if loc and loc not in external:
                external.append(loc)
        if is_external or math.prod(t.dims) > _KEEP_ELEMENTS:
            if t.name not in listed:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            g.initializer.append(t)
    weights = {t.name for t in src.initializer} | {t.values.name for t in src.sparse_initializer}
    return lite, external, weights


# ---------------------------------------------------------------------------- shapes
def _infer(onnx: Any, model: Any, p: Path) -> Any:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=True, data_prop=True)
    except Exception as e:  # noqa: BLE001 - InferenceError and ValidationError, both one line for the user
        raise WorkloadError(f"'{p}': ONNX shape inference failed: {_first_line(e)}") from None


def _infer_and_fold(onnx: Any, lite: Any, p: Path) -> tuple[Any, int]:
    """Shape inference, then constant folding of the shape arithmetic (``Shape`` of a static tensor and
    the small nodes computed from constants only, evaluated with ``onnx.reference``) until nothing
    changes: ONNX's inference alone cannot follow e.g. ``Range(0, Shape(x)[1])`` or a ``Reshape`` to a
    computed shape, which torch writes for every dynamic axis. Returns the inferred model and how many
    nodes were folded. ``lite`` is changed in place."""
    inferred = _infer(onnx, lite, p)
    folded = 0
    for _ in range(16):
        try:
            done = _fold_once(onnx, lite, inferred)
        except Exception:  # noqa: BLE001 - folding is best effort: keep what inference found
            done = 0
        if not done:
            break
        folded += done
        inferred = _infer(onnx, lite, p)
    return inferred, folded


def _fold_once(onnx: Any, lite: Any, inferred: Any) -> int:
    import numpy as np
    from onnx import numpy_helper

    g = lite.graph
    shapes = {vi.name: _shape_of(vi) for vi in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)}
    values = {t.name: t for t in g.initializer}
    avail = set(values)
    sub, direct = [], {}  # nodes to evaluate; node index -> {output: array} computed here
    for i, n in enumerate(g.node):
        if n.domain and n.domain not in _STD or any(a.type in (5, 10) for a in n.attribute):
            continue
        ins = [x for x in n.input if x]
        if n.op_type in ("Shape", "Size") and ins:
            s = shapes.get(ins[0])
            if s is not None and all(isinstance(d, int) for d in s):
                at = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
                dims = list(s)[at.get("start", 0):at.get("end", len(s))] if n.op_type == "Shape" else math.prod(s)
                direct[i] = {n.output[0]: np.array(dims, dtype=np.int64)}
                avail.add(n.output[0])
            continue
        if n.op_type.startswith("Random") or n.op_type in ("Multinomial", "Bernoulli") or not all(x in avail for x in ins):
            continue
        outs = [shapes.get(o) for o in n.output if o]
        if any(o is not None and all(isinstance(d, int) for d in o) and math.prod(o) > 4096 for o in outs):
            continue  # a big constant (a mask): its shape is known, its values are not needed
        sub.append(i)
        avail.update(o for o in n.output if o)
    todo = [i for i in sub if g.node[i].op_type != "Constant"]
    results: dict[str, Any] = {}
    if todo:
        from onnx.reference import ReferenceEvaluator

        feeds = {**{k: numpy_helper.to_array(t) for k, t in values.items()},
                 **{k: v for d in direct.values() for k, v in d.items()}}
        need = sorted({x for i in sub for x in g.node[i].input if x and x in feeds})
        outs = [o for i in sub for o in g.node[i].output if o]
        graph = onnx.helper.make_graph(
            [g.node[i] for i in sub], "fold",
            [onnx.helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(feeds[k].dtype), None) for k in need],
            [onnx.helper.make_empty_tensor_value_info(o) for o in outs],
        )
        model = onnx.helper.make_model(graph, opset_imports=list(lite.opset_import), ir_version=lite.ir_version)
        try:
            got = ReferenceEvaluator(model).run(None, {k: feeds[k] for k in need})
        except Exception:  # noqa: BLE001 - an op the reference cannot run: keep what inference found
            todo, got = [], []
        results = dict(zip(outs, got, strict=False))
    replace_at: dict[int, dict[str, Any]] = dict(direct)
    for i in todo:
        arrs = {o: results.get(o) for o in g.node[i].output if o}
        if all(isinstance(a, np.ndarray) and a.size <= 65536 for a in arrs.values()):
            replace_at[i] = arrs
    if not replace_at:
        return 0
    nodes = []
    for i, n in enumerate(g.node):
        if i not in replace_at:
            nodes.append(n)
            continue
        for o, a in replace_at[i].items():
            nodes.append(onnx.helper.make_node("Constant", [], [o], name=f"{n.name or n.op_type}:folded",
                                               value=numpy_helper.from_array(np.asarray(a), o)))
    g.ClearField("node")
    g.node.extend(nodes)
    return len(replace_at)


# ---------------------------------------------------------------------------- input shapes
def _parse_overrides(
    input_shape: Any, dims: Mapping[str, int] | None, batch: int | None
) -> tuple[dict[str | None, list[int]], dict[str, int]]:
    """(input name or None for 'the one input' -> shape, dim name -> size); ``batch`` is the key ''."""
    shapes: dict[str | None, list[int]] = {}
    out = dict(dims or {})
    if batch is not None:
        out.setdefault("", batch)
    if isinstance(input_shape, str):
        parts = [x.strip() for x in input_shape.replace("x", ",").split(",")] if "=" not in input_shape else []
        if parts and all(x.isdigit() for x in parts):
            shapes[None] = [int(x) for x in parts]
        else:
            for item in filter(None, (x.strip() for x in input_shape.split(","))):
                key, eq, val = item.partition("=")
                if not eq or not key.strip() or not val.strip().isdigit():
                    raise WorkloadError(
                        f"ONNX input shape '{input_shape}' must be the input's shape (1,3,224,224) or dim sizes by "
                        f"name (batch_size=1,sequence_length=128)"
                    )
                out[key.strip()] = int(val)
    elif isinstance(input_shape, Mapping):
        shapes.update({str(k): list(v) for k, v in input_shape.items()})
    elif input_shape is not None:
        shapes[None] = list(input_shape)
    for k, v in shapes.items():
        if not v or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v):
            raise WorkloadError(f"ONNX input shape {v!r}{f' for {k!r}' if k else ''} must be positive integers")
    for k, d in out.items():
        if isinstance(d, bool) or not isinstance(d, int) or d <= 0:
            raise WorkloadError(f"ONNX dim {k or 'batch'!r} must be a positive integer, got {d!r}")
    return shapes, out


def _apply_overrides(
    lite: Any, p: Path, weights: set[str], shapes: dict[str | None, list[int]], dims: dict[str, int]
) -> dict[str, list[int]]:
    """Fix the graph inputs' shapes in ``lite``; refuse dynamic dims. Returns input name -> shape."""
    g = lite.graph
    inputs = [i for i in g.input if i.name not in weights]
    names = [i.name for i in inputs]
    if None in shapes:
        if len(inputs) != 1:
            raise WorkloadError(
                f"'{p}' has {len(inputs)} inputs ({', '.join(names)}); give shapes by name "
                f"(Python: input_shape={{'{names[0] if names else 'x'}': [...]}}) or fix dims by name (NAME=N,...)"
            )
        shapes = {names[0]: shapes[None]}
    unknown = [k for k in shapes if k not in names]
    if unknown:
        raise WorkloadError(f"'{p}' has no input '{unknown[0]}' (inputs: {', '.join(names)})")
    params = {d.dim_param for i in inputs for d in _tensor_dims(i) if d.WhichOneof("value") == "dim_param"}
    bad = [k for k in dims if k and k not in params and not (k == "batch" and "" not in dims)]
    if bad:
        raise WorkloadError(
            f"'{p}' has no dynamic dim named '{bad[0]}' (its inputs' named dims: {', '.join(sorted(params)) or 'none'})"
        )
    if "batch" in dims and "batch" not in params:
        dims = {**dims, "": dims["batch"]}
    renamed: dict[str, int] = {k: v for k, v in dims.items() if k}
    changed = False
    for inp in inputs:
        tdims = _tensor_dims(inp)
        if inp.name in shapes:
            want = shapes[inp.name]
            if tdims is not None and len(tdims) and len(tdims) != len(want):
                raise WorkloadError(f"'{p}': input '{inp.name}' has rank {len(tdims)}, the given shape {want} has {len(want)}")
            tt = inp.type.tensor_type
            tt.shape.ClearField("dim")
            for v in want:
                tt.shape.dim.add().dim_value = v
            changed = True
            continue
        for k, d in enumerate(tdims or ()):
            which = d.WhichOneof("value")
            if which == "dim_value" and d.dim_value > 0:
                continue
            if k == 0 and "" in dims:
                if which == "dim_param":
                    renamed.setdefault(d.dim_param, dims[""])
                d.dim_value = dims[""]
            elif which == "dim_param" and d.dim_param in dims:
                d.dim_value = dims[d.dim_param]
    # the same symbolic dims elsewhere (outputs, value_info) take the same sizes
    for vi in (*g.output, *g.value_info):
        for d in _tensor_dims(vi) or ():
            if d.WhichOneof("value") == "dim_param" and d.dim_param in renamed:
                d.dim_value = renamed[d.dim_param]
    if changed:  # whole shapes replaced: the file's intermediate shapes may be stale
        g.ClearField("value_info")
        for vi in g.output:
            for d in _tensor_dims(vi) or ():
                d.Clear()
    result: dict[str, list[int]] = {}
    for inp in inputs:
        tdims = _tensor_dims(inp)
        if tdims is None:
            raise WorkloadError(
                f"'{p}': input '{inp.name}' has no shape; give it, e.g. --input-shape 1,3,224,224 "
                f"(Python: input_shape={{'{inp.name}': [...]}})"
            )
        shape = []
        for k, d in enumerate(tdims):
            which = d.WhichOneof("value")
            if which == "dim_value" and d.dim_value > 0:
                shape.append(int(d.dim_value))
                continue
            if which == "dim_param":
                alt = " (or batch=N)" if k == 0 and d.dim_param != "batch" else ""
                raise WorkloadError(
                    f"'{p}': input '{inp.name}' dim {k} is dynamic ('{d.dim_param}'); fix it with --input-shape "
                    f"{d.dim_param}=N{alt} (Python: dims={{'{d.dim_param}': N}})"
                )
            raise WorkloadError(
                f"'{p}': input '{inp.name}' dim {k} has no fixed size; fix it with --input-shape and the whole shape"
                + (" (or batch=N for dim 0)" if k == 0 else "") + f" (Python: input_shape={{'{inp.name}': [...]}})"
            )
        result[inp.name] = shape
    return result


def _tensor_dims(vi: Any) -> Any:
    """The repeated ``dim`` field of a tensor value info, or None (not a tensor, or no shape)."""
    t = vi.type
    if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.HasField("shape"):
        return None
    return t.tensor_type.shape.dim


def _shape_of(vi: Any) -> tuple[int | str | None, ...] | None:
    dims = _tensor_dims(vi)
    if dims is None:
        return None
    out: list[int | str | None] = []
    for d in dims:
        which = d.WhichOneof("value")
        out.append(int(d.dim_value) if which == "dim_value" else d.dim_param if which == "dim_param" else None)
    return tuple(out)


def _qualify(comps: list[str]) -> str:
    """torch's ONNX scope components (``layer1``, ``layer1.0``, ``conv1``: each the last non-numeric atom
    of a module's qualified name plus its trailing numeric atoms) back to ``layer1.0.conv1``."""
    q = ""
    for c in comps:
        atoms = c.split(".")
        qa = q.split(".") if q else []
        head = next((k for k in range(len(qa) - 1, -1, -1) if not qa[k].isdigit()), None)
        if head is not None and atoms[0] == qa[head] and len(atoms) > 1 and all(a.isdigit() for a in atoms[1:]):
            tail = qa[head + 1:]
            if atoms[1:1 + len(tail)] == tail and len(atoms) - 1 > len(tail):
                q = ".".join(qa + atoms[1 + len(tail):])
                continue
        q = f"{q}.{c}" if q else c
    return q


def _broadcast(a: Sequence[int], b: Sequence[int]) -> list[int] | None:
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return out[::-1]


# ---------------------------------------------------------------------------- lowering
class _Lowering:
    """Walks the inferred graph once, in order, and emits layers (see the module docstring)."""

    def __init__(self, onnx: Any, graph: Any, weights: set[str], path: Path, opset: int) -> None:
        self.helper = onnx.helper
        self.path = path
        self.opset = opset
        self.nodes = list(graph.node)
        self.shapes: dict[str, tuple[int | str | None, ...] | None] = {}
        for vi in (*graph.input, *graph.value_info, *graph.output):
            self.shapes[vi.name] = _shape_of(vi)
        for t in graph.initializer:
            self.shapes[t.name] = tuple(int(d) for d in t.dims)
        for t in graph.sparse_initializer:
            self.shapes[t.values.name] = tuple(int(d) for d in t.dims)
        self.const = set(weights)
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for x in n.input:
                if x:
                    self.consumers.setdefault(x, []).append(i)
        for o in graph.output:
            self.consumers.setdefault(o.name, []).append(-1)  # a graph output is never fused away
        self.layers: list[Layer | VectorOp] = []
        self.layer_at: dict[int, int] = {}  # node index -> index in layers of its (first) GEMM
        self.node_of: dict[str, str] = {}
        self.skipped: dict[str, int] = {}
        self.approximated: dict[str, int] = {}
        self.folded = 0
        self._used: set[str] = set()
        self._counts: dict[str, int] = {}
        self.fusion: dict[int, tuple[str, int]] = {}  # last node -> (op class, node that names it)
        self.fused: set[int] = set()
        self._path_nodes: dict[str, int] = {}
        self._parents: set[str] = set()

    # ------------------------------------------------------------------ helpers
    def attrs(self, n: Any) -> dict[str, Any]:
        out = {}
        for a in n.attribute:
            v = self.helper.get_attribute_value(a)
            out[a.name] = v.decode() if isinstance(v, bytes) else v
        return out

    def where(self, n: Any, i: int) -> str:
        dom = f"{n.domain}." if n.domain and n.domain not in _STD else ""
        return f"node '{n.name or f'#{i}'}' ({dom}{n.op_type})"

    def fail(self, n: Any, i: int, msg: str) -> WorkloadError:
        return WorkloadError(f"'{self.path}': {self.where(n, i)}: {msg}")

    def need(self, name: str, i: int) -> tuple[int, ...]:
        """The static shape of tensor ``name`` used by node ``i``, else a one-line error naming the culprit."""
        s = self.shapes.get(name)
        if s is not None and all(isinstance(d, int) and d >= 0 for d in s):
            return s  # type: ignore[return-value]
        n = self.nodes[i]
        role = "output" if name in n.output else "input"
        msg = f"shape inference could not resolve the shape of its {role} '{name}'"
        culprit = self._culprit(name)
        if culprit is not None:
            c = self.nodes[culprit]
            if c.domain and c.domain not in _STD:
                why = "ONNX has no shape function for this custom op"
            elif c.op_type in _DATA_DEPENDENT or s is not None:
                why = "its output size depends on the data"
            else:
                why = "ONNX cannot infer its output shape"
            msg += f" ({why})" if culprit == i else f" (it comes from {self.where(c, culprit)}: {why})"
        raise WorkloadError(f"'{self.path}': {self.where(n, i)}: {msg}; export the model with static shapes")

    def _culprit(self, name: str) -> int | None:
        seen = set()
        while name not in seen:
            seen.add(name)
            j = self.producer.get(name)
            if j is None:
                return None
            bad = [x for x in self.nodes[j].input if x and not self._static(x)]
            if not bad:
                return j
            name = bad[0]
        return None

    def _static(self, name: str) -> bool:
        s = self.shapes.get(name)
        return s is not None and all(isinstance(d, int) for d in s)

    def sole_consumer(self, tensor: str) -> int | None:
        c = self.consumers.get(tensor, [])
        return c[0] if len(c) == 1 and c[0] >= 0 else None

    def name(self, n: Any, i: int, gemm: bool, label: str | None = None, role: str | None = None) -> str:
        """A unique layer name: torch's scoped node names (``/layer1/layer1.0/conv1/Conv``) become module
        paths (``layer1.0.conv1``; vector ops get the op class appended unless the module is named after
        it, attention GEMMs ``.scores``/``.context``), other node names are used as they are."""
        nm = n.name
        label = label or n.op_type.lower()
        if nm.startswith("/") and nm.count("/") >= 1:
            path = _qualify([c for c in nm.strip("/").split("/")[:-1] if c])
            if role:
                base = f"{path or 'attention'}.{role}"
            elif gemm:
                base = path or label
            else:
                last = path.rpartition(".")[2].lower()
                alone = self._path_nodes.get(path) == 1 and path not in self._parents
                base = path if alone or last.startswith(label) else (f"{path}.{label}" if path else label)
        else:
            base = nm or f"{label}_{i}"
            base = f"{base}.{role}" if role else base
        k = self._counts.get(base, 0)
        out = base if k == 0 else f"{base}.{k}"
        while out in self._used:
            k += 1
            out = f"{base}.{k}"
        self._counts[base] = k + 1
        self._used.add(out)
        self.node_of[out] = nm or f"#{i}"
        return out

    def gemm(self, n: Any, i: int, M: int, N: int, K: int, batch: int = 1, kind: str = "gemm",
             conv: tuple[int, ...] | None = None, role: str | None = None) -> None:
        if min(M, N, K, batch) <= 0:
            self.skipped["empty"] = self.skipped.get("empty", 0) + 1
            return
        self.layer_at.setdefault(i, len(self.layers))
        name = self.name(n, i, True, role=role)
        self.layers.append(Layer(name, M, N, K, batch, kind, conv))

    def vector(self, n: Any, i: int, op: str, elements: int, reduce: int = 0, inputs: int = 1, params: int = 0,
               label: str | None = None, role: str | None = None) -> None:
        if elements <= 0:
            self.skipped["empty"] = self.skipped.get("empty", 0) + 1
            return
        name = self.name(n, i, False, label or (op if op not in ("other", "add", "mul") else None), role)
        self.layers.append(VectorOp(name, op, elements, reduce, inputs, params))

    def skip(self, n: Any) -> None:
        self.skipped[n.op_type] = self.skipped.get(n.op_type, 0) + 1

    # ------------------------------------------------------------------ the walk
    def run(self) -> list[Layer | VectorOp]:
        self._find_fusions()
        for i, n in enumerate(self.nodes):  # nodes per torch module: a vector op alone in a leaf module takes its name
            if n.name.startswith("/") and i not in self.fused and n.op_type != "Constant":
                path = _qualify([c for c in n.name.strip("/").split("/")[:-1] if c])
                self._path_nodes[path] = self._path_nodes.get(path, 0) + 1
                self._parents.update(path.rsplit(".", k)[0] for k in range(1, path.count(".") + 1))
        for i, n in enumerate(self.nodes):
            if i in self.fused:
                continue
            std = not n.domain or n.domain in _STD
            op = n.op_type
            has_graph = any(a.type in (5, 10) for a in n.attribute)  # GRAPH / GRAPHS: control flow
            ins = [x for x in n.input if x]
            if std and op == "Constant":
                self.const.update(o for o in n.output if o)
                continue
            if std and op in ("Shape", "Size") and ins and self._static(ins[0]):
                self.const.update(o for o in n.output if o)
                self.skip(n)
                continue
            if not has_graph and all(x in self.const for x in ins):
                self.const.update(o for o in n.output if o)
                self.folded += 1
                continue
            try:
                self._lower(n, i, op, std, has_graph)
            except WorkloadError:
                raise
            except Exception as e:  # noqa: BLE001 - a malformed node: one line, never a traceback
                raise self.fail(n, i, f"cannot lower it ({type(e).__name__}: {_first_line(e)})") from None
        self._mark_attention()
        return self.layers

    def _lower(self, n: Any, i: int, op: str, std: bool, has_graph: bool) -> None:
        if i in self.fusion:
            cls, named = self.fusion[i]
            self.vector(self.nodes[named], named, cls, math.prod(self.need(n.output[0], i)))
        elif not std or has_graph:
            self.unknown(n, i)
        elif op in _CONVS:
            self.conv(n, i)
        elif op == "Gemm":
            self.gemm_op(n, i)
        elif op in _MATMULS:
            a, b = _MATMULS[op]
            self.matmul(n, i, self.need(n.input[a], i), self.need(n.input[b], i), n.input[b] in self.const)
        elif op == "Einsum":
            self.einsum(n, i)
        elif op == "Attention":
            self.attention(n, i)
        elif op in _SHAPE_ONLY:
            self.skip(n)
        elif op == "Gather":
            if n.input[0] in self.const:
                e = math.prod(self.need(n.output[0], i))
                self.vector(n, i, "embedding", e, inputs=0, params=e)
            else:
                self.skip(n)  # a gather of computed data: data movement, like Slice
        else:
            self.vector_op(n, i)

    def _find_fusions(self) -> None:
        nodes, const = self.nodes, self.const

        def other_input(n: Any, x: str) -> str | None:
            ins = list(n.input)
            if len(ins) != 2 or x not in ins:
                return None
            return ins[1] if ins[0] == x else ins[0]

        def is_const(t: str) -> bool:  # before the walk only initializers are known constants
            j = self.producer.get(t)
            return t in const or (j is not None and nodes[j].op_type == "Constant")

        for i, n in enumerate(nodes):
            if n.domain and n.domain not in _STD:
                continue
            if n.op_type == "Erf":  # torch's F.gelu: Div(x, sqrt2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5)
                j = self.producer.get(n.input[0])
                if j is None or nodes[j].op_type not in ("Div", "Mul") or self.sole_consumer(n.input[0]) != i:
                    continue
                pre = nodes[j]
                consts = [x for x in pre.input if is_const(x)]
                if len(pre.input) != 2 or len(consts) != 1:
                    continue
                x = pre.input[0] if pre.input[1] == consts[0] else pre.input[1]
                a = self.sole_consumer(n.output[0])
                if a is None or nodes[a].op_type != "Add" or not is_const(other_input(nodes[a], n.output[0]) or ""):
                    continue
                m1 = self.sole_consumer(nodes[a].output[0])
                if m1 is None or nodes[m1].op_type != "Mul":
                    continue
                y = other_input(nodes[m1], nodes[a].output[0])
                region, last = {j, i, a}, m1
                if y == x:
                    t = self.sole_consumer(nodes[m1].output[0])
                    if t is not None and nodes[t].op_type == "Mul" and is_const(other_input(nodes[t], nodes[m1].output[0]) or ""):
                        region.add(m1)
                        last = t
                else:
                    h = self.producer.get(y or "")
                    if h is None or nodes[h].op_type != "Mul" or self.sole_consumer(y or "") != m1:
                        continue
                    hy = other_input(nodes[h], x)
                    if hy is None or not is_const(hy):
                        continue
                    region.add(h)
                self.fused |= region
                self.fusion[last] = ("gelu", i)
            elif n.op_type == "Sigmoid":  # SiLU: Mul(x, Sigmoid(x))
                m = self.sole_consumer(n.output[0])
                if m is not None and nodes[m].op_type == "Mul" and other_input(nodes[m], n.output[0]) == n.input[0]:
                    self.fused.add(i)
                    self.fusion[m] = ("silu", m)

    def _mark_attention(self) -> None:
        marks: dict[int, str] = {}  # MatMul node -> scores | context
        for n in self.nodes:
            if n.op_type not in ("Softmax", "LogSoftmax") or (n.domain and n.domain not in _STD):
                continue
            t = n.input[0]
            for _ in range(8):  # back to the scores MatMul through scaling, masking and casts
                j = self.producer.get(t)
                if j is None:
                    break
                if j in self.layer_at and self.nodes[j].op_type in ("MatMul", "Einsum"):
                    marks.setdefault(j, "scores")
                    break
                if self.nodes[j].op_type not in _SCORE_PATH:
                    break
                ins = [x for x in self.nodes[j].input if x and x not in self.const]
                if not ins:
                    break
                t = ins[0]
            frontier = [n.output[0]]
            for _ in range(4):  # on to the context MatMul that takes the probabilities as its A operand
                nxt = []
                for t in frontier:
                    for c in self.consumers.get(t, []):
                        if c < 0:
                            continue
                        cn = self.nodes[c]
                        if c in self.layer_at and cn.op_type in ("MatMul", "Einsum") and cn.input[0] == t:
                            marks.setdefault(c, "context")
                        elif cn.op_type in _PROB_PATH:
                            nxt.append(cn.output[0])
                frontier = nxt
        for j, role in sorted(marks.items()):
            k = self.layer_at[j]
            ly = self.layers[k]
            if isinstance(ly, Layer) and ly.kind == "matmul":
                del self.node_of[ly.name]
                self.layers[k] = replace(ly, name=self.name(self.nodes[j], j, True, role=role), kind="attention")

    # ------------------------------------------------------------------ GEMM ops
    def conv(self, n: Any, i: int) -> None:
        xi, wi = _CONVS[n.op_type]
        x, w, y = self.need(n.input[xi], i), self.need(n.input[wi], i), self.need(n.output[0], i)
        at = self.attrs(n)
        if len(x) < 3 or len(w) != len(x) or len(y) != len(x):
            raise self.fail(n, i, f"expected input and weight of rank >= 3 (N, C, spatial...), got {list(x)} and {list(w)}")
        g, sp = int(at.get("group", 1)), len(x) - 2
        ks = [int(k) for k in (at.get("kernel_shape") or w[2:])]
        strides = [int(s) for s in (at.get("strides") or [1] * sp)]
        dil = [int(d) for d in (at.get("dilations") or [1] * sp)]
        nb, cin = x[0], x[1]
        if not len(ks) == len(strides) == len(dil) == sp or min(ks + strides + dil) <= 0:
            raise self.fail(n, i, f"kernel_shape {ks}, strides {strides} and dilations {dil} must be {sp} positive ints")
        if g <= 0 or cin % g:
            raise self.fail(n, i, f"group {g} does not divide the {cin} input channels")
        if n.op_type == "ConvTranspose":  # weight (Cin, Cout/group, *kernel): the scatter GEMM
            self.gemm(n, i, nb * math.prod(x[2:]), w[1] * math.prod(ks), cin // g, g, "conv")
            return
        cout = w[0]
        if w[1] * g != cin or cout % g:
            raise self.fail(n, i, f"input has {cin} channels but weight {list(w)} with group {g} takes {w[1] * g}")
        out_sp = list(y[2:])
        pads = self._pads(n, i, at, list(x[2:]), out_sp, ks, strides, dil)
        conv = None
        if nb == 1 and sp in (1, 2) and all(d == 1 for d in dil) and len(set(strides)) == 1:
            if sp == 2:
                conv = (x[2] + pads[0], x[3] + pads[1], ks[0], ks[1], cin // g, cout // g, strides[0])
            else:
                conv = (1, x[2] + pads[0], 1, ks[0], cin // g, cout // g, strides[0])
            h, wd, fh, fw, *_, s = conv
            if fh > h or fw > wd or ((h - fh) // s + 1) * ((wd - fw) // s + 1) != math.prod(out_sp):
                conv = None  # not a SCALE-Sim conv row: keep the exact GEMM shape only
        self.gemm(n, i, nb * math.prod(out_sp), cout // g, w[1] * math.prod(ks), g, "conv", conv)

    def _pads(self, n: Any, i: int, at: dict[str, Any], in_sp: list[int], out_sp: list[int], ks: list[int],
              strides: list[int], dil: list[int]) -> list[int]:
        """Total padding (begin + end) per spatial dim."""
        auto = at.get("auto_pad", "NOTSET")
        sp = len(in_sp)
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            dims = zip(in_sp, out_sp, ks, strides, dil, strict=True)
            return [max((o - 1) * s + (k - 1) * d + 1 - x, 0) for x, o, k, s, d in dims]
        if auto == "VALID":
            return [0] * sp
        if auto != "NOTSET":
            raise self.fail(n, i, f"unknown auto_pad '{auto}' (NOTSET, SAME_UPPER, SAME_LOWER or VALID)")
        pads = [int(v) for v in (at.get("pads") or [0] * (2 * sp))]
        if len(pads) != 2 * sp:
            raise self.fail(n, i, f"pads {pads} should have {2 * sp} values (begins then ends)")
        return [pads[k] + pads[k + sp] for k in range(sp)]

    def gemm_op(self, n: Any, i: int) -> None:
        a, b = self.need(n.input[0], i), self.need(n.input[1], i)
        at = self.attrs(n)
        if len(a) != 2 or len(b) != 2:
            raise self.fail(n, i, f"Gemm operands must be 2-D, got {list(a)} and {list(b)}")
        M, K = (a[1], a[0]) if at.get("transA", 0) else (a[0], a[1])
        K2, N = (b[1], b[0]) if at.get("transB", 0) else (b[0], b[1])
        if K != K2:
            raise self.fail(n, i, f"A {list(a)} and B {list(b)} (transA={at.get('transA', 0)}, "
                                  f"transB={at.get('transB', 0)}) do not share K")
        self.gemm(n, i, M, N, K, 1, "linear" if n.input[1] in self.const else "matmul")

    def matmul(self, n: Any, i: int, a: tuple[int, ...], b: tuple[int, ...], const_b: bool) -> None:
        if not a or not b:
            raise self.fail(n, i, "MatMul of a scalar")
        a2 = (1, a[0]) if len(a) == 1 else a
        b2 = (b[0], 1) if len(b) == 1 else b
        M, K, K2, N = a2[-2], a2[-1], b2[-2], b2[-1]
        if K != K2:
            raise self.fail(n, i, f"operands {list(a)} and {list(b)} do not share K")
        ba, bb = a2[:-2], b2[:-2]
        pa, pb = math.prod(ba), math.prod(bb)
        batch = 1
        if pb == 1:
            M *= pa  # a shared right operand (a weight): the batch dims are rows of one GEMM
        elif pa == 1:
            N *= pb  # a shared left operand: its columns
        else:
            full = _broadcast(ba, bb)
            if full is None:
                raise self.fail(n, i, f"batch dims of {list(a)} and {list(b)} do not broadcast")
            batch = math.prod(full)
        self.gemm(n, i, M, N, K, batch, "linear" if const_b and pb == 1 else "matmul")

    def einsum(self, n: Any, i: int) -> None:
        ins = [x for x in n.input if x]
        eq = str(self.attrs(n).get("equation", "")).replace(" ", "")
        if len(ins) != 2:
            if len(ins) == 1:  # a transpose, trace or sum of one operand
                x = self.need(ins[0], i)
                self.vector(n, i, "other", math.prod(x))
            else:
                self.unknown(n, i)
            return
        shapes = [self.need(x, i) for x in ins]
        lhs, arrow, rhs = eq.partition("->")
        terms = lhs.split(",")
        if len(terms) != 2:
            raise self.fail(n, i, f"equation '{eq}' does not have two operands")
        ell = "".join(chr(0x2460 + k) for k in range(16))  # stand-ins for the dims of '...', right-aligned
        size: dict[str, int] = {}
        letters, ranks = [], []
        for term, shape in zip(terms, shapes, strict=True):
            k = len(shape) - (len(term) - 3) if "..." in term else 0
            if not 0 <= k <= 16:
                raise self.fail(n, i, f"equation term '{term}' does not match operand shape {list(shape)}")
            term = term.replace("...", ell[16 - k:])
            if len(term) != len(shape):
                raise self.fail(n, i, f"equation term '{term}' does not match operand shape {list(shape)}")
            for ch, d in zip(term, shape, strict=True):
                size[ch] = max(size.get(ch, 1), d)
            letters.append(term)
            ranks.append(k)
        both = letters[0] + letters[1]
        if arrow:
            out = rhs.replace("...", ell[16 - max(ranks):])
        else:  # implicit output: the broadcast dims, then the letters seen once, in alphabetical order
            out = ell[16 - max(ranks):] + "".join(sorted(c for c in set(both) if both.count(c) == 1 and c not in ell))
        A, B, O = set(letters[0]), set(letters[1]), set(out)
        prod = lambda cs: math.prod(size[c] for c in cs)  # noqa: E731
        batch, M, N, K = prod(A & B & O), prod((A & O) - B), prod((B & O) - A), prod((A & B) - O)
        self.gemm(n, i, M, N, K, batch, "linear" if ins[1] in self.const and batch == 1 else "matmul")

    def attention(self, n: Any, i: int) -> None:
        at = self.attrs(n)
        q, k, v = (self.need(n.input[j], i) for j in range(3))
        if len(q) == 4:
            b, hq, lq, e = q
            lk, ev = k[-2], v[-1]
        elif len(q) == 3:
            hq, hkv = int(at.get("q_num_heads", 0)), int(at.get("kv_num_heads", 0))
            if hq <= 0 or hkv <= 0:
                raise self.fail(n, i, "3-D Attention needs the q_num_heads and kv_num_heads attributes")
            b, lq, e = q[0], q[1], q[2] // hq
            lk, ev = k[1], v[2] // hkv
        else:
            raise self.fail(n, i, f"Q must be 3-D or 4-D, got {list(q)}")
        if len(n.input) > 4 and n.input[4]:
            lk += self.need(n.input[4], i)[-2]  # past keys
        self.gemm(n, i, lq, lk, e, b * hq, "attention", role="scores")
        self.vector(n, i, "softmax", b * hq * lq * lk, reduce=lk, role="softmax")
        self.gemm(n, i, lq, ev, lk, b * hq, "attention", role="context")

    # ------------------------------------------------------------------ vector ops
    def vector_op(self, n: Any, i: int) -> None:
        op, at = n.op_type, self.attrs(n)
        if op in ("Softmax", "LogSoftmax", "Hardmax"):
            x = self.need(n.input[0], i)
            if not x:
                self.vector(n, i, "softmax", 1, reduce=1)
                return
            ax = int(at.get("axis", 1 if self.opset < 13 else -1)) % len(x)
            self.vector(n, i, "softmax", math.prod(x), reduce=math.prod(x[ax:]) if self.opset < 13 else x[ax])
        elif op in ("LayerNormalization", "RMSNormalization"):
            x = self.need(n.input[0], i)
            ax = int(at.get("axis", -1)) % len(x)
            self.vector(n, i, "layernorm" if op == "LayerNormalization" else "rmsnorm", math.prod(x),
                        reduce=math.prod(x[ax:]), params=self._elements(n, i, n.input[1:3]))
        elif op in ("GroupNormalization", "InstanceNormalization"):
            x = self.need(n.input[0], i)
            groups = int(at.get("num_groups", x[1])) if op == "GroupNormalization" else x[1]
            if groups <= 0 or x[1] % groups:
                raise self.fail(n, i, f"num_groups {groups} does not divide the {x[1]} channels")
            self.vector(n, i, "groupnorm", math.prod(x), reduce=x[1] // groups * math.prod(x[2:]),
                        params=self._elements(n, i, n.input[1:3]))
        elif op == "BatchNormalization":
            x = self.need(n.input[0], i)
            self.vector(n, i, "mul", math.prod(x), params=self._elements(n, i, n.input[1:5]), label="batchnorm")
        elif op in _POOLS:
            y = self.need(n.output[0], i)
            window = math.prod(int(k) for k in at.get("kernel_shape", [1]))
            self.vector(n, i, "other", math.prod(y) * window, reduce=window)
        elif op in _REDUCE:
            x = self.need(n.input[0], i)
            if op == "LpNormalization":
                self.vector(n, i, "other", math.prod(x), reduce=x[int(at.get("axis", -1)) % len(x)] if x else 0)
            else:
                y = self.need(n.output[0], i)
                self.vector(n, i, "other", math.prod(x), reduce=max(1, math.prod(x) // max(1, math.prod(y))))
        elif op in _ELEMENTWISE or op == "LRN":
            e = math.prod(self.need(n.output[0], i))
            ins = [x for x in n.input if x]
            sizes = [math.prod(self.need(x, i)) for x in ins]
            full = sum(1 for s in sizes if s == e)
            self.vector(n, i, _ELEMENTWISE.get(op, "other"), e, inputs=full, params=sum(s for s in sizes if s != e))
        else:
            self.unknown(n, i)

    def _elements(self, n: Any, i: int, names: Sequence[str]) -> int:
        return sum(math.prod(self.need(x, i)) for x in names if x)

    def unknown(self, n: Any, i: int) -> None:
        """An op this module does not lower: ``other`` with its output elements, listed in meta."""
        outs = [o for o in n.output if o]
        if not outs:
            self.skip(n)
            return
        e = sum(math.prod(self.need(o, i)) for o in outs)
        label = f"{n.domain}.{n.op_type}" if n.domain and n.domain not in _STD else n.op_type
        self.approximated[label] = self.approximated.get(label, 0) + 1
        self.vector(n, i, "other", e)
