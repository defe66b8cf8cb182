"""A workload's recorded dataflow: which earlier operators each operator reads, when its source knows.

A traced model (:func:`npukit.workloads.trace_workload`) records, for every operator, the operators whose outputs
it reads (through views, copies, casts and concatenation; not through a tensor made only from another's shape),
and stores it as ``Workload.meta["dataflow"]``: ``{consumer name: [producer name, ...]}``, with ``<input N>`` for the
model's N-th input and a ``~`` before a producer whose output the consumer reads through a gather of rows (the tokens
of one expert): such a read orders the two (:meth:`Dataflow.ancestors`) but is no whole-tensor edge. Names not in
the workload are external sources (its inputs, or operators cut away from a slice of it). An ONNX file records one
too (:func:`npukit.workloads.onnx_workload`), and so do the built-in ``llama3-8b-layer`` and ``minilm-l6``. A
workload without that key (a topology CSV, the built-in ``resnet18`` and ``gemm``) has no dataflow, and the schedule
infers producer -> consumer edges from shapes alone (:mod:`npukit.sim.schedule`).

Shapes alone chain operators that only look connected: the experts of a mixture-of-experts layer run one after
another on tokens gathered from the same input, and expert ``i``'s output has the shape of expert ``i + 1``'s
input. With a dataflow an edge needs both: the shape rule and a path from producer to consumer through vector ops
only (:meth:`Dataflow.reaches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .bounded import short
from .errors import WorkloadError
from .workload import Layer, VectorOp, Workload

KEY = "dataflow"  # the Workload.meta key
GATHERED = "~"  # a producer name's prefix where the consumer reads rows gathered from its output


class Dataflow:
    """The producers of each operator of a workload, by index in ``workload.layers``."""

    def __init__(self, ops: Sequence[Layer | VectorOp], reads: dict[str, list[str]]) -> None:
        self.index: dict[str, int] = {}
        for i, op in enumerate(ops):
            if op.name in self.index:
                raise WorkloadError(f"a workload with a dataflow needs unique operator names; {short(op.name)} appears "
                                    "twice")
            self.index[op.name] = i
        self.ops = list(ops)
        self._reads: list[frozenset[int]] = [frozenset()] * len(ops)  # whole tensors read
        self._after: list[frozenset[int]] = [frozenset()] * len(ops)  # whole or gathered: what must come first
        self._sources: list[frozenset[str]] = [frozenset()] * len(ops)  # whole, by name (inputs included)
        for cons, prods in reads.items():
            c = self.index.get(cons)
            if c is None:
                continue  # an operator cut away from this workload
            whole = [n for n in prods if not n.startswith(GATHERED)]
            self._sources[c] = frozenset(whole)
            self._reads[c] = self._earlier(whole, c)
            self._after[c] = self._reads[c] | self._earlier([n[1:] for n in prods if n.startswith(GATHERED)], c)

    def _earlier(self, names: list[str], c: int) -> frozenset[int]:
        return frozenset(p for p in (self.index.get(n) for n in names) if p is not None and p < c)

    @classmethod
    def of(cls, workload: Workload) -> Dataflow | None:
        """The dataflow in ``workload.meta`` (None where there is none); a malformed one is a WorkloadError."""
        raw = workload.meta.get(KEY) if isinstance(workload.meta, dict) else None
        if raw is None:
            return None
        return cls(workload.layers, check_reads(raw, workload.name))

    def producers(self, i: int) -> frozenset[int]:
        """Indices of the operators (of this workload, before ``i``) whose whole outputs operator ``i`` reads."""
        return self._reads[i]

    def waits_for(self, i: int) -> frozenset[int]:
        """Indices of the operators operator ``i`` reads, whole or gathered (rows picked from their outputs)."""
        return self._after[i]

    def reaches(self, prod: int, cons: int) -> bool:
        """Whether operator ``prod``'s output reaches operator ``cons``'s input directly or through vector ops only
        (a softmax, an activation, a multiply: no GEMM between them)."""
        stack, seen = [cons], {cons}
        while stack:
            for p in self._reads[stack.pop()]:
                if p == prod:
                    return True
                if p > prod and p not in seen and isinstance(self.ops[p], VectorOp):
                    seen.add(p)
                    stack.append(p)
        return False

    def ancestors(self, i: int, lo: int, skip: frozenset[int] = frozenset()) -> set[int]:
        """Every operator from index ``lo`` on that operator ``i`` must wait for (its output reaches ``i`` by any path,
        whole or gathered); ``skip``: direct producers of ``i`` not to follow."""
        out: set[int] = set()
        stack = [p for p in self._after[i] if p >= lo and p not in skip]
        while stack:
            p = stack.pop()
            if p not in out:
                out.add(p)
                stack.extend(q for q in self._after[p] if q >= lo)
        return out

    def same_input(self, a: int, b: int) -> bool:
        """Whether operators ``a`` and ``b`` read the same tensors (the q, k and v projections of one input): the
        same recorded sources, at least one."""
        return bool(self._sources[a]) and self._sources[a] == self._sources[b]


def check_reads(raw: Any, what: str) -> dict[str, list[str]]:
    """``raw`` as a dataflow mapping (``{consumer: [producer, ...]}``, all names strings); a WorkloadError naming
    ``what`` if it is not one."""
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, list) and
                                            all(isinstance(n, str) for n in v) for k, v in raw.items()):
        raise WorkloadError(f"workload {short(what)}: meta['{KEY}'] must map operator names to lists of operator "
                            "names")
    return raw
