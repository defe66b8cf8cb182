"""The vector unit beside the array: non-GEMM operators -> lane operations, cycles and Ledger records.

The array runs GEMMs; softmax, normalizations, activations, RoPE, adaLN modulation, residual adds,
embedding lookups and KV-cache appends (:class:`~npukit.sim.workload.VectorOp`) run on a vector unit
of ``vector.lanes`` lanes, each doing one add or one multiply per cycle at ``vector.bits`` bits
(``vector.number = "fp"``: floating point, 16 or 32 bits; ``"int"``: integer at any width).

**Work per op class** (adds and multiplies per element, plus per row for the row-wise ops). These are
npukit's estimates of a straightforward implementation, not a published design: exp, tanh and
sigmoid as a range reduction plus a degree-3 polynomial (about 4 multiplies and 4 adds), reciprocal
and reciprocal square root per row as a seed plus two Newton steps (about 4 multiplies and 2 adds).

==============  =================================================  ==============  ===========
op              per element                                        adds, mults     per row
==============  =================================================  ==============  ===========
``softmax``     max, subtract, exp, sum, scale                     7, 5            reciprocal
``layernorm``   sum, subtract, square, sum, scale, gamma, beta     4, 3            rsqrt
``groupnorm``   as layernorm (rows = groups)                       4, 3            rsqrt
``rmsnorm``     square, sum, scale, gamma                          1, 3            rsqrt
``gelu``        tanh form: x^3, two scales, tanh, add, halve       6, 10           -
``silu``        x * sigmoid(x): exp, add, reciprocal, multiply     7, 9            -
``add``         one add per output element                         1, 0            -
``mul``         one multiply per output element                    0, 1            -
``rope``        x * cos + rotate(x) * sin                          1, 2            -
``modulate``    x * (1 + scale) + shift                            2, 1            -
``embedding``   a gather: no arithmetic                            0, 0            -
``kv_append``   a copy to the KV cache: no arithmetic              0, 0            -
``other``       one lane operation per element (estimate)          1, 0            -
==============  =================================================  ==============  ===========

**Traffic.** Inputs are read from and outputs written to the ofmap SRAM (the activation buffer) at
``vector.bits``: ``inputs x elements`` reads and ``elements`` writes per op instance; parameters
(norm weights, the gathered embedding rows) are read from DRAM; ``kv_append`` writes its elements to
DRAM (the cache) instead of the SRAM.

**Cycles.** busy = max(ceil(lane operations / lanes), ceil(elements moved / lanes), DRAM bytes /
bandwidth) per op (DRAM only in ``bandwidth_mode = "user"``). ``vector.overlap = "serial"`` (the
default): every op adds its busy cycles after the GEMMs. ``"overlap"``: the schedule pipelines the
vector unit with the array, so an op hides behind the cycles of the GEMM layers before it that no
earlier op used, and only the rest is exposed.
"""

from __future__ import annotations

import math

from .arch import Arch
from .workload import VectorOp

Record = tuple[str, str, tuple[int, ...], int]
COMPONENT = "vector_unit"
# op class -> (adds, mults) per element, (adds, mults) per row
OP_COSTS: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "softmax": ((7, 5), (2, 4)),
    "layernorm": ((4, 3), (2, 4)),
    "groupnorm": ((4, 3), (2, 4)),
    "rmsnorm": ((1, 3), (2, 4)),
    "gelu": ((6, 10), (0, 0)),
    "silu": ((7, 9), (0, 0)),
    "add": ((1, 0), (0, 0)),
    "mul": ((0, 1), (0, 0)),
    "rope": ((1, 2), (0, 0)),
    "modulate": ((2, 1), (0, 0)),
    "embedding": ((0, 0), (0, 0)),
    "kv_append": ((0, 0), (0, 0)),
    "other": ((1, 0), (0, 0)),
}


def lane_ops(op: VectorOp) -> tuple[int, int]:
    """(adds, multiplies) of one instance of ``op`` (``batch`` not applied)."""
    (ea, em), (ra, rm) = OP_COSTS[op.op]
    return op.elements * ea + op.rows * ra, op.elements * em + op.rows * rm


def _actions(arch: Arch) -> tuple[tuple[str, tuple[int, ...]], tuple[str, tuple[int, ...]]]:
    w = arch.vector.bits
    if arch.vector.number == "fp":
        return ("fp_add", (w,)), ("fp_mult", (w,))
    return ("int_add", (w,)), ("int_mult", (w, w))


def vector_records(op: VectorOp, arch: Arch) -> list[Record]:
    """Every action of ``batch`` instances of ``op`` as ``(component, action, bits, count)`` records."""
    w, n = arch.vector.bits, op.batch
    adds, mults = lane_ops(op)
    (add_act, add_bits), (mul_act, mul_bits) = _actions(arch)
    to_dram = op.op == "kv_append"
    out: list[Record] = [
        (COMPONENT, add_act, add_bits, adds),
        (COMPONENT, mul_act, mul_bits, mults),
        ("ofmap_sram", "sram_read", (w,), op.inputs * op.elements),
        ("ofmap_sram", "sram_write", (w,), 0 if to_dram else op.elements),
        ("dram", "dram_read", (w,), op.params),
        ("dram", "dram_write", (w,), op.elements if to_dram else 0),
    ]
    return [(c, a, b, n * k) for c, a, b, k in out if k]


def traffic(op: VectorOp, arch: Arch) -> dict[str, float]:
    """The op's traffic (bytes) in the simulator's per-operand columns: parameters count as weights
    (``dram_filter_read_bytes``), KV-cache appends as outputs (``dram_ofmap_write_bytes``)."""
    w, n = arch.vector.bits, op.batch
    to_dram = op.op == "kv_append"
    return {
        "dram_filter_read_bytes": n * op.params * w / 8,
        "dram_ofmap_write_bytes": n * (op.elements if to_dram else 0) * w / 8,
        "sram_ofmap_read_bytes": n * op.inputs * op.elements * w / 8,
        "sram_ofmap_write_bytes": n * (0 if to_dram else op.elements) * w / 8,
    }


def dram_bytes(op: VectorOp, arch: Arch) -> float:
    """Bytes ``batch`` instances of ``op`` move over the DRAM interface."""
    t = traffic(op, arch)
    return t["dram_filter_read_bytes"] + t["dram_ofmap_write_bytes"]


def busy_cycles(op: VectorOp, arch: Arch) -> int:
    """Cycles the vector unit is busy with ``batch`` instances of ``op`` (see the module docstring)."""
    lanes = arch.vector.lanes
    adds, mults = lane_ops(op)
    moved = op.elements * (op.inputs + 1)
    cyc = op.batch * max(math.ceil((adds + mults) / lanes), math.ceil(moved / lanes))
    if arch.bandwidth_mode == "user":
        cyc = max(cyc, math.ceil(dram_bytes(op, arch) / arch.dram_bandwidth_bytes_per_cycle))
    return cyc
