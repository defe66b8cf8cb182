"""The tracer's recorder: the GEMMs and vector ops one forward pass issued, in program order, and their names.

Shared state of the module hooks and the two torch modes of :mod:`npukit.workloads.trace`; :meth:`_Recorder.layers`
turns what was recorded into :class:`~npukit.sim.Layer` / :class:`~npukit.sim.workload.VectorOp` entries named
after the innermost named module (``layer3.0.conv2``, repeats ``.1``, ``.2``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..sim.dataflow import GATHERED
from ..sim.workload import Layer, VectorOp

_SDPA = "scaled_dot_product_attention"
_MATMUL_FUNCS = {"matmul", "rmatmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
                 "einsum", "tensordot", "inner", "chain_matmul", "int_mm"}


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
    reads: frozenset | None = None  # what it reads: ids of earlier ops, '<input N>', ('~', either) if gathered


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
    label: str | None = None  # what its name calls it, if not its op class (or, for 'other', its aten op)
    broadcast: bool = False  # a mul by a per-sample (broadcast) operand: may open an adaLN modulation
    scale_src: _Vec | None = None  # the op that produced that broadcast operand, if recorded just before
    reads: frozenset | None = None  # what it reads: ids of earlier ops, '<input N>', ('~', either) if gathered


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
        # dataflow: id(tensor) -> (weak reference, what made it: ids of recorded ops and '<input N>' markers)
        self.sources: dict[int, tuple[weakref.ref, frozenset]] = {}
        self.written: list[_Op | _Vec] = []  # ops recorded or rewritten since the outermost aten call began
        self.dropped: list[_Vec] = []  # ops removed after recording, kept alive so that no new op takes their id

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
                made = self.made_from(_tensors(output))  # its inner ops are not recorded: what its input came from
                self.produce(self._module_op(name, module, output), made, [_first_tensor(output)])
        if self.modules and self.modules[-1] == name:
            self.modules.pop()

    def _module_op(self, name: str, module: nn.Module, output: Any) -> _Vec | None:
        """Record a norm or activation module as one vector op (its output's elements); returns it (None: none)."""
        out = _first_tensor(output)
        if out is None or not out.numel():
            return None
        op = self.vec_modules[name]
        params = sum(p.numel() for p in module.parameters(recurse=False))
        if op == "groupnorm":
            reduce = out.numel() // (out.shape[0] * module.num_groups)  # type: ignore[operator]
        elif op in ("layernorm", "rmsnorm"):
            shape = getattr(module, "normalized_shape", None)
            reduce = math.prod(shape) if isinstance(shape, (tuple, list)) and shape else out.shape[-1]
        else:
            reduce, params = 0, 0
        return self.vector(op, type(module).__name__, out, reduce=reduce, params=params, own=True)

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
        self.written.append(self.ops[-1])

    def attention(self, aten_name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Record a fused attention kernel as its scores and context GEMMs (layout (..., L, E))."""
        batch = math.prod(q.shape[:-2])
        lq, e, lk, ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
        before = len(self.ops)
        self.record(aten_name, lq, lk, e, batch, q.dtype, kind="attention")
        if len(self.ops) == before:
            return
        scores = self.ops[-1]
        scores.role, scores.reads = "scores", self.made_from([q, k])  # type: ignore[union-attr]
        last: _Op | _Vec = scores
        if self.vector_ops and min(batch, lq, lk):
            self._append(_Vec(self._scope(), "softmax", batch * lq * lk, lk, 1, 0, _dtype_name(q.dtype), aten_name))
            self.ops[-1].reads = frozenset({id(scores)})
            last = self.ops[-1]
        self.record(aten_name, lq, ev, lk, batch, q.dtype, kind="attention")
        self.ops[-1].role = "context"  # type: ignore[union-attr]
        self.ops[-1].reads = frozenset({id(last)}) | self.made_from([v])

    # --------------------------------------------------------------- vector ops
    def _scope(self) -> str:
        return self.modules[-1] if self.modules else ""

    def _append(self, v: _Vec, out: torch.Tensor | None = None) -> None:
        self.ops.append(v)
        self.written.append(v)
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
               inputs: int = 1, params: int = 0, operands: Sequence[Any] = (), own: bool = False,
               label: str | None = None) -> _Vec | None:
        """Record one vector op of class ``op`` writing ``out`` (``elements`` defaults to its size; ``inputs``
        activation tensors of that size, ``params`` parameter elements, ``label`` its name if not its class);
        returns it, or None where nothing new was recorded (no elements, or an add folded into the modulation
        before it)."""
        n = out.numel() if elements is None else elements
        if n <= 0:
            return None
        tensors = [t for t in operands if isinstance(t, torch.Tensor) and t.dim() > 0]
        if op == "add" and len(tensors) == 2 and self._fuse_modulate(out, tensors):
            return None
        v = _Vec(self._scope(), op, n, reduce, inputs, params, _dtype_name(out.dtype), aten_name, own, label)
        if op == "mul" and len(tensors) == 2:
            small = [t for t in tensors if 0 < t.numel() < n]
            if len(small) == 1:
                v.broadcast, v.scale_src = True, self._produced(small[0])
        self._append(v, out)
        return v

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
        # the modulation reads x, scale and shift as activations (per-sample vectors computed in this forward)
        last.op, last.inputs, last.params, last.aten, last.broadcast = "modulate", 3, 0, "mul+add", False
        last.reads = (last.reads or frozenset()) | self.made_from([shift])
        self.written.append(last)
        src = last.scale_src
        if src is not None and src.op == "add" and src.inputs == 1 and any(src is o for o in self.ops[-3:-1]):
            # the ``1 + scale`` on the per-sample vector is part of the modulation
            del self.ops[next(i for i in range(len(self.ops) - 1, -1, -1) if self.ops[i] is src)]
            self.dropped.append(src)
            last.reads = (last.reads - {id(src)}) | (src.reads or frozenset())
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

    # --------------------------------------------------------------- dataflow
    def made_from(self, tensors: Iterable[Any]) -> frozenset:
        """What made ``tensors`` (and the tensors they are views of): ids of recorded ops and input markers."""
        out: set = set()
        for t in tensors:
            for x in (t, getattr(t, "_base", None)):
                hit = self.sources.get(id(x)) if isinstance(x, torch.Tensor) else None
                if hit is not None and hit[0]() is x:
                    out |= hit[1]
                    break
        return frozenset(out)

    @staticmethod
    def gathered(made: frozenset) -> frozenset:
        """``made`` as read through a gather of rows (``(GATHERED, source)``): an order, not a whole tensor."""
        return frozenset(x if isinstance(x, tuple) else (GATHERED, x) for x in made)

    def mark(self, tensors: Iterable[Any], made: frozenset) -> None:
        """Record that ``made`` made ``tensors``."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                key = id(t)
                self.sources[key] = (weakref.ref(t, lambda ref, key=key: _forget(self.sources, key, ref)), made)

    def produce(self, op: _Op | _Vec | None, made: frozenset, outputs: Iterable[Any]) -> None:
        """``op`` (just recorded; None: nothing was, and nothing is marked) read what ``made`` lists and wrote
        ``outputs``."""
        if op is None:
            return
        if op.reads is None:
            op.reads = made
        self.mark(outputs, frozenset({id(op)}))

    # --------------------------------------------------------------- naming
    def layers(self) -> tuple[list[Layer | VectorOp], dict[str, str], dict[str, str], dict[str, list[str]]]:
        """The named ops, their dtypes and aten ops, and the dataflow (:mod:`npukit.sim.dataflow`)."""
        used: set[str] = set()
        counts: dict[str, int] = {}
        layers: list[Layer | VectorOp] = []
        dtypes: dict[str, str] = {}
        aten_ops: dict[str, str] = {}
        for op in self.ops:
            if isinstance(op, _Vec):
                label = op.label or (op.op if op.op != "other" else op.aten.strip("_"))  # e.g. 'relu', 'mean'
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
        names: dict[Any, str] = {id(op): ly.name for op, ly in zip(self.ops, layers, strict=True)}
        flow: dict[str, list[str]] = {}
        for op, ly in zip(self.ops, layers, strict=True):
            made = set()
            for r in op.reads or ():
                mark, src = r if isinstance(r, tuple) else ("", r)
                name = names.get(src) if isinstance(src, int) else src
                if name is not None:
                    made.add(mark + name)
            if made:
                flow[ly.name] = sorted(made - {GATHERED + n for n in made})  # a whole read covers a gathered one
        return layers, dtypes, aten_ops, flow


def _forget(sources: dict, key: int, ref: weakref.ref) -> None:
    """A tensor was freed: drop its entry unless a newer tensor with the same id took it."""
    hit = sources.get(key)
    if hit is not None and hit[0] is ref:
        del sources[key]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


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
