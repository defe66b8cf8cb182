"""ONNX models for :mod:`npukit.workloads.onnx_workload`: loading without weights, input-shape overrides,
shape inference with constant folding, and shape helpers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from npukit.sim import MAX_DIM, WorkloadError, check_shape, parse_dim, short

_STD = ("", "ai.onnx")
# initializers with more elements than this are replaced by typed graph inputs before checking and shape
# inference (their values are never needed; small ones stay, they may be shapes that inference propagates)
_KEEP_ELEMENTS = 256




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
    known = int(onnx.defs.onnx_opset_version())  # the newest opset of the default domain this onnx package defines
    for o in model.opset_import:
        if (o.domain or "") in ("", "ai.onnx") and not 1 <= o.version <= known:
            raise WorkloadError(f"'{p}' declares ONNX opset {short(o.version)}, which this onnx package does not "
                                f"define (known: 1..{known}); export the model with opset {known} or older")
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
def _dim_size(text: str) -> int:
    """A dim size: a positive decimal integer of at most 12 digits (``int`` alone would take '+1', ' 1', '1_0'
    or a 10^400-digit number)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 12 or int(text) <= 0:  # not ² or ６
        raise ValueError(text)
    return int(text)


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
            shapes[None] = [parse_dim(x, f"ONNX input shape {short(input_shape)}", WorkloadError) for x in parts]
        else:
            from .loader import parse_options

            try:
                out.update(parse_options(input_shape.strip(",").replace(",,", ","), {}, input_shape, other=_dim_size))
            except WorkloadError:
                raise WorkloadError(
                    f"ONNX input shape '{input_shape}' must be the input's shape (1,3,224,224) or dim sizes by "
                    f"name (batch_size=1,sequence_length=128)"
                ) from None
    elif isinstance(input_shape, Mapping):
        shapes.update({str(k): list(v) for k, v in input_shape.items()})
    elif input_shape is not None:
        shapes[None] = list(input_shape)
    for k, v in shapes.items():
        if not v or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= MAX_DIM for d in v):
            raise WorkloadError(f"ONNX input shape {short(v)}{f' for {k!r}' if k else ''} must be positive integers "
                                f"up to {MAX_DIM:,}")
        check_shape(v, f"ONNX input shape{f' for {k!r}' if k else ''}", WorkloadError, max_elements=MAX_DIM)
    for k, d in out.items():
        if isinstance(d, bool) or not isinstance(d, int) or d <= 0 or d > MAX_DIM:
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
