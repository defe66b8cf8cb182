"""The mapper: per layer, the tiling and loop order that minimise the arch's objective.

``mapping = "fixed"`` takes SCALE-Sim's order with no tiling (the compute-cycle parity mode).
``mapping = "search"`` evaluates a legal candidate set and keeps the best under ``objective``:
``energy`` (pJ), ``latency`` (compute + stall cycles) or ``edp`` (their product); ties keep the
earlier candidate, and the fixed mapping is always the first, so search is never worse than fixed
on its own objective.

Candidates (:func:`candidates`): both loop orders of the dataflow (:data:`npukit.sim._mapping.ORDERS`)
times, for ws/is, the temporal tile sizes {untiled; the largest tile whose running psums fit the
psum buffer, and its halves and quarters; the untiled extent over 2, 4, ..., 64}, each made legal
(a conv's pixel tiles are whole output rows or segments of one row). Each candidate's energy is the
:mod:`npukit.sim._accounting` records priced with the energy table, the same numbers the Ledger gets.
"""

from __future__ import annotations

from . import dataflow_is, dataflow_os, dataflow_ws
from ._accounting import _final_dram, component_attrs, dram_bits, layer_records
from ._mapping import ORDERS, LayerCounts, Mapping, Operand, stall_cycles
from .arch import OBJECTIVES, Arch
from .energy import EnergyTable
from .psum_path import held_bits
from .workload import Layer

_DATAFLOWS = {"ws": dataflow_ws, "os": dataflow_os, "is": dataflow_is}


def candidates(layer: Layer, arch: Arch) -> list[Mapping]:
    """The legal mappings the search evaluates for ``layer`` (the fixed one first)."""
    df = arch.dataflow
    fixed = _DATAFLOWS[df].FIXED
    if df == "os":
        return [fixed, Mapping(ORDERS["os"][1])]
    ws = df == "ws"
    A = Operand(layer, is_input=ws)
    T = A.rows
    cols_used = min(layer.N if ws else layer.M, arch.cols)
    cap = int(arch.sram_bytes("psum") * 8 // held_bits(arch))
    raw = [T] + [T >> i for i in range(1, 7)]
    fit = cap // cols_used
    if fit < T:
        raw += [fit, fit // 2, fit // 4]
    tiles: list[int] = []
    for t in raw:
        if t >= 1:
            a = A.align(t)
            if a not in tiles:
                tiles.append(a)
    out = [fixed]
    for t in tiles:
        for order in ORDERS[df]:
            m = Mapping(order, 0 if t >= T else t)
            if m != fixed and not (t >= T and order != fixed.order):  # one tile: the orders coincide
                out.append(m)
    return out


def _price(records: list, table: EnergyTable, attrs: dict, memo: dict | None = None) -> float:
    """Energy (pJ) of ``records``; ``memo`` caches the per-action energies of one arch across calls."""
    memo = {} if memo is None else memo
    total = 0.0
    for comp, act, bits, cnt in records:
        key = (comp, act, bits)
        e = memo.get(key)
        if e is None:
            e = memo[key] = table.action_energy(act, bits, attrs.get(comp), comp)
        total += cnt * e
    return total


def evaluate(layer: Layer, arch: Arch, mapping: Mapping, table: EnergyTable,
             memo: dict | None = None) -> tuple[LayerCounts, float, int]:
    """(counts, energy in pJ, latency in cycles) of ``batch`` GEMMs of ``layer`` under ``mapping``
    (``memo``: a per-arch cache of action energies, see :func:`_price`)."""
    c = _DATAFLOWS[arch.dataflow].map_layer(layer, arch, mapping)
    energy = _price(layer_records(layer, c, arch), table, component_attrs(arch), memo)
    latency = layer.batch * (c.compute_cycles + stall_cycles(dram_bits(layer, c, arch) / layer.batch / 8, c.folds,
                                                                  c.compute_cycles, arch))
    return c, energy, latency


def choose(layer: Layer, arch: Arch, table: EnergyTable | None) -> LayerCounts:
    """The counts of ``layer`` under the arch's mapping mode (see the module docstring); the fixed
    mapping when ``table`` is None."""
    if arch.mapping == "fixed" or table is None:
        return _DATAFLOWS[arch.dataflow].map_layer(layer, arch)
    return choose_each(layer, arch, table)[arch.objective]


def choose_each(layer: Layer, arch: Arch, table: EnergyTable) -> dict[str, LayerCounts]:
    """The searched counts of ``layer`` that :func:`choose` gives under each objective (latency, energy, EDP), from one
    pass over the candidates (the arch's own ``objective`` is ignored; the same first-best rule for each)."""
    best: dict[str, tuple[float, LayerCounts]] = {}
    memo: dict = {}
    for m in candidates(layer, arch):
        c, e, t = evaluate(layer, arch, m, table, memo)
        for obj, score in (("latency", t), ("energy", e), ("edp", e * t)):
            if obj not in best or score < best[obj][0] * (1 - 1e-12):
                best[obj] = (score, c)
    assert len(best) == len(OBJECTIVES)
    return {obj: c for obj, (_, c) in best.items()}


def choose_energy_without(layer: Layer, arch: Arch, table: EnergyTable, free: str) -> LayerCounts:
    """The searched counts of ``layer`` with the least energy when the DRAM traffic of the operands in ``free`` costs
    nothing: ``I`` the input's reads, ``W`` the weights' reads, ``O`` the final outputs' writes (any of them, in any
    order). That traffic is then another's: a fused operand held on chip, an operand another core's DRAM fetch
    multicasts, partial sums sent to a reducer. The same first-best rule as :func:`choose_each`."""
    b, n = arch.bits, layer.batch
    attrs, memo = component_attrs(arch), {}
    best: tuple[float, LayerCounts] | None = None
    for m in candidates(layer, arch):
        c, e, _ = evaluate(layer, arch, m, table, memo)
        gone = [("dram", "dram_read", (b.input,), n * c.ifmap_dram)] if "I" in free else []
        gone += [("dram", "dram_read", (b.weight,), n // layer.shared * c.filter_dram)] if "W" in free else []
        gone += [("dram", "dram_write", (b.output,), n * _final_dram(c))] if "O" in free else []
        score = e - _price(gone, table, attrs, memo)
        if best is None or score < best[0] * (1 - 1e-12):
            best = (score, c)
    assert best is not None
    return best[1]
