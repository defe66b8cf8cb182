"""ONNX nodes -> npukit GEMM layers and vector ops (the lowering of :mod:`npukit.workloads.onnx_workload`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from npukit.sim import Layer, VectorOp, WorkloadError

from ._onnx_gemm import _CONVS, _GemmLowering
from ._onnx_graph import _STD, _first_line, _qualify, _shape_of

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
_MATMULS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
_GEMM_OPS = {*_CONVS, *_MATMULS, "Gemm", "Einsum", "Attention"}
_DATA_DEPENDENT = {"NonZero", "Unique", "NonMaxSuppression", "Compress", "TopK", "StringSplit"}
# what may sit between an attention MatMul and its Softmax
_SCORE_PATH = {"Div", "Mul", "Add", "Sub", "Where", "Cast", "Identity", "Reshape", "Tanh"}
_PROB_PATH = {"Cast", "Dropout", "Identity", "Reshape"}



# ---------------------------------------------------------------------------- lowering
class _Lowering(_GemmLowering):
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
        # dataflow: tensor -> what made it (indices into layers, '<input N>' for a graph input); layer -> what it read
        inits = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer} | set(weights)
        self.made: dict[str, frozenset] = {vi.name: frozenset({f"<input {k}>"}) for k, vi in
                                           enumerate(x for x in graph.input if x.name not in inits)}
        self.reads: dict[int, frozenset] = {}

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
                if not path:
                    base = label  # at the graph's root: no module to name it after
                else:
                    base = path if alone or last.startswith(label) else f"{path}.{label}"
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
             conv: tuple[int, ...] | None = None, role: str | None = None, shared: int = 1) -> None:
        if min(M, N, K, batch) <= 0:
            self.skipped["empty"] = self.skipped.get("empty", 0) + 1
            return
        self.layer_at.setdefault(i, len(self.layers))
        name = self.name(n, i, True, role=role)
        self.layers.append(Layer(name, M, N, K, batch, kind, conv, shared))

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
            src = frozenset().union(*(self.made.get(x, frozenset()) for x in n.input if x))
            before = len(self.layers)
            self._walk(n, i)
            for k in range(before, len(self.layers)):  # a node's later layers also read its earlier ones
                self.reads[k] = src | ({k - 1} if k > before else set())
            made = frozenset({len(self.layers) - 1}) if len(self.layers) > before else \
                frozenset() if n.op_type == "Constant" or all(x in self.const for x in n.output if x) else src
            self.made.update((o, made) for o in n.output if o)
        self._mark_attention()
        return self.layers

    def dataflow(self) -> dict[str, list[str]]:
        """What each layer reads, by name (:mod:`npukit.sim.dataflow`): the layers that made its node's inputs, through
        the nodes that make no layer (layout, casts, data movement, fused away)."""
        out = {}
        for k, made in self.reads.items():
            names = sorted(self.layers[j].name if isinstance(j, int) else j for j in made)
            if names:
                out[self.layers[k].name] = names
        return out

    def _walk(self, n: Any, i: int) -> None:
        """Lower node ``i`` (or fold it: a constant, a static shape, a node fused into a later one)."""
        if i in self.fused:
            return
        std = not n.domain or n.domain in _STD
        op = n.op_type
        has_graph = any(a.type in (5, 10) for a in n.attribute)  # GRAPH / GRAPHS: control flow
        ins = [x for x in n.input if x]
        if std and op == "Constant":
            self.const.update(o for o in n.output if o)
            return
        if std and op in ("Shape", "Size") and ins and self._static(ins[0]):
            self.const.update(o for o in n.output if o)
            self.skip(n)
            return
        if not has_graph and all(x in self.const for x in ins):
            self.const.update(o for o in n.output if o)
            self.folded += 1
            return
        try:
            self._lower(n, i, op, std, has_graph)
        except WorkloadError:
            raise
        except Exception as e:  # noqa: BLE001 - a malformed node: one line, never a traceback
            raise self.fail(n, i, f"cannot lower it ({type(e).__name__}: {_first_line(e)})") from None

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
