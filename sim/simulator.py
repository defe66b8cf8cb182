"""The analytical NPU simulator: a workload on an :class:`Arch` -> per-layer cycles and a Ledger.

Everything lands in the Ledger under the scope ``<workload>/<layer>``: MACs at operand bits
(component ``pe_array``), PE register writes and reads
(``input_registers``, ``weight_registers``, ``psum_registers``), reads and writes of each SRAM
(``ifmap_sram``, ``filter_sram``, ``psum_buffer`` at psum bits, ``ofmap_sram``), the adds that
update running psums (``psum_adder``), DRAM traffic (``dram``), the psum path's quantizer, feature
unit and predictor when psums are quantized (``psum_quantizer``, ``psum_features``,
``psum_predictor``; :mod:`npukit.sim.psum_path`), and compute and stall cycles. Non-GEMM operators
(:class:`VectorOp`) run on the vector unit (``vector_unit`` lane operations, their ofmap-SRAM and DRAM
traffic, ``vector`` cycles; :mod:`npukit.sim.vector_unit`).

Each layer is mapped by :mod:`npukit.sim.mapper` (``mapping = "search"``: the tiling and loop order
that minimise the arch's objective; ``"fixed"``: SCALE-Sim's order), and its traffic follows the
unique-data rules of :mod:`npukit.sim._mapping`, or SCALE-Sim v3's own accounting with
``memory = "scalesim"`` (:mod:`npukit.sim._scalesim_memory`). Energy is reported as a total and as
on-chip energy (everything but ``dram``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import mapper, vector_unit
from ._accounting import (
    COMPONENTS,
    DRAM_TRAFFIC,
    LEVEL_OF,
    OFF_CHIP,
    TRAFFIC_COLUMNS,
    declare_components,
    dram_bits,
    layer_records,
    traffic_bytes,
)
from ._mapping import LayerCounts, check_buffers, stall_cycles, utilization
from ._old_call import OldCall
from .arch import OBJECTIVES, Arch
from .energy import EnergyTable, load_table
from .ledger import Ledger
from .psum_path import held_bits
from .workload import Layer, VectorOp, Workload

__all__ = [
    "check_buffers","COMPONENTS", "LayerResult", "SimResult", "TRAFFIC_COLUMNS", "map_layer", "simulate", "simulate_layer"]


class _CycleTotals:
    """``total_cycles`` = ``compute_cycles`` + ``stall_cycles`` (clock cycles) of a layer or a workload."""

    compute_cycles: int
    stall_cycles: int

    @property
    def total_cycles(self) -> int:
        return self.compute_cycles + self.stall_cycles

    @property
    def cycles(self) -> int:
        """Alias of :attr:`total_cycles` (compute + stall)."""
        return self.total_cycles


@dataclass
class LayerResult(_CycleTotals):
    """One layer's figures (cycles in clock cycles, traffic in bytes, energy in pJ)."""

    name: str
    kind: str
    M: int
    N: int
    K: int
    batch: int
    folds: int
    compute_cycles: int
    stall_cycles: int
    mapping_efficiency: float
    utilization: float
    macs: int
    dram_bytes: float
    psum_buffer_bytes: float
    mapping: str = ""
    vector_cycles: int = 0  # vector ops: cycles the vector unit is busy (compute_cycles: the exposed part)
    energy_pj: dict[str, float] = field(default_factory=dict)
    traffic_bytes: dict[str, float] = field(default_factory=dict)  # TRAFFIC_COLUMNS -> bytes

    @property
    def energy_total_pj(self) -> float:
        """Energy of the layer (pJ), DRAM included (``energy_pj``: the same per component)."""
        return OldCall(sum(self.energy_pj.values()), "energy_total_pj")

    @property
    def energy_onchip_pj(self) -> float:
        """On-chip energy of the layer (pJ): everything but DRAM."""
        return OldCall(sum(v for k, v in self.energy_pj.items() if k not in OFF_CHIP), "energy_onchip_pj")


@dataclass
class SimResult(_CycleTotals):
    """A simulated workload: per-layer results, the ledger, and totals.

    Convention: every total is a property (``total_cycles``, ``compute_cycles``, ``stall_cycles``, ``macs``,
    ``utilization``, ``utilization_all_cycles``, ``dram_bytes``, ``energy_pj``, ``energy_onchip_pj``,
    ``latency_s``); a breakdown or a table is a method (``energy_by_component()``, ``energy_by_level(table)``,
    ``rows()``). The old calls ``energy_pj()``, ``energy_onchip_pj()`` and ``latency_s()`` still work and warn.
    """

    workload: str
    arch: Arch
    layers: list[LayerResult]
    ledger: Ledger

    @property
    def compute_cycles(self) -> int:
        return sum(r.compute_cycles for r in self.layers)

    @property
    def stall_cycles(self) -> int:
        return sum(r.stall_cycles for r in self.layers)

    @property
    def macs(self) -> int:
        return sum(r.macs for r in self.layers)

    @property
    def utilization(self) -> float:
        """Array utilization over compute cycles: MACs / (rows * cols * compute cycles) of the whole workload,
        at most 1; stall cycles are not counted (see :attr:`utilization_all_cycles` and
        :func:`npukit.sim._mapping.utilization`)."""
        return utilization(self.macs, self.compute_cycles, self.arch.rows, self.arch.cols)

    @property
    def utilization_all_cycles(self) -> float:
        """Array utilization over all cycles: MACs / (rows * cols * total cycles), stalls included."""
        return utilization(self.macs, self.total_cycles, self.arch.rows, self.arch.cols)

    @property
    def dram_bytes(self) -> float:
        """DRAM traffic of the whole workload (bytes, reads and writes)."""
        return sum(r.dram_bytes for r in self.layers)

    @property
    def energy_pj(self) -> float:
        """Total energy (pJ), DRAM included."""
        return OldCall(sum(r.energy_total_pj for r in self.layers), "energy_pj")

    @property
    def energy_onchip_pj(self) -> float:
        """On-chip energy (pJ): everything but DRAM."""
        return OldCall(sum(r.energy_onchip_pj for r in self.layers), "energy_onchip_pj")

    def energy_by_component(self) -> dict[str, float]:
        """Energy (pJ) per ledger component over the whole workload."""
        out = dict.fromkeys(COMPONENTS, 0.0)
        for r in self.layers:
            for k, v in r.energy_pj.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def energy_by_level(self, table: EnergyTable | str | None = None) -> dict[tuple[str, str], float]:
        """Energy (pJ) per (memory level, operand), as ZigZag reports it: levels ``mac``, ``logic``
        (psum adders and the psum path), ``registers``, ``sram``, ``dram``; operands ``W`` (weights),
        ``I`` (inputs), ``O`` (outputs and psums), ``""`` for logic. DRAM energy is split by operand
        from the per-operand traffic priced at the table's per-bit DRAM energies (default table: the
        arch's)."""
        tab = table if isinstance(table, EnergyTable) else load_table(table or self.arch.energy_table)
        out: dict[tuple[str, str], float] = {}
        for r in self.layers:
            for comp, e in r.energy_pj.items():
                if comp in LEVEL_OF:
                    key = LEVEL_OF[comp]
                    out[key] = out.get(key, 0.0) + e
            for col, (op, act) in DRAM_TRAFFIC.items():
                e = 8 * r.traffic_bytes.get(col, 0.0) * tab.action_energy(act, (1,), None, "dram")
                out[("dram", op)] = out.get(("dram", op), 0.0) + e
        return out

    @property
    def latency_s(self) -> float:
        """Total cycles (compute + stall) at the arch's clock, in seconds."""
        return OldCall(self.total_cycles / (self.arch.clock_ghz * 1e9), "latency_s")

    def rows(self) -> list[dict[str, Any]]:
        """Flat per-layer rows for CSV (cycles, bytes per operand and memory, pJ per component)."""
        out = []
        for r in self.layers:
            d = asdict(r)
            e = d.pop("energy_pj")
            t = d.pop("traffic_bytes")
            d["total_cycles"] = r.total_cycles
            for key in TRAFFIC_COLUMNS:
                d[key] = t.get(key, 0.0)
            for comp in COMPONENTS:
                d[f"energy_{comp}_pj"] = e.get(comp, 0.0)
            d["energy_onchip_pj"] = float(r.energy_onchip_pj)
            d["energy_total_pj"] = float(r.energy_total_pj)
            out.append(d)
        from .power import run_power

        for d, p in zip(out, run_power(self)[1], strict=True):
            d.update(p.columns())  # area (mm^2), dynamic/static energy (pJ), power (W), perf/area, perf/W
        return out


def map_layer(layer: Layer, arch: Arch, table: EnergyTable | str | None = None) -> LayerCounts:
    """Per-GEMM counts of ``layer`` under the arch's dataflow, mapping mode and memory mode."""
    if arch.memory == "scalesim":
        from ._scalesim_memory import scalesim_counts

        return scalesim_counts(layer, arch)
    if arch.mapping == "fixed":
        return mapper.choose(layer, arch, None)
    tab = table if isinstance(table, EnergyTable) else load_table(table or arch.energy_table)
    return mapper.choose(layer, arch, tab)


def map_layer_each(layer: Layer, arch: Arch, table: EnergyTable | str | None = None) -> dict[str, LayerCounts]:
    """:func:`map_layer`'s counts of ``layer`` under each objective (latency, energy, EDP): the searched mapping's
    from one pass over its candidates (:func:`npukit.sim.mapper.choose_each`), the same counts for all three where
    the mapping does not search (fixed, or SCALE-Sim's memory model)."""
    if arch.memory == "scalesim" or arch.mapping == "fixed":
        return dict.fromkeys(OBJECTIVES, map_layer(layer, arch, table))
    return mapper.choose_each(layer, arch, table if isinstance(table, EnergyTable) else
                              load_table(table or arch.energy_table))


def map_layer_energy_without(layer: Layer, arch: Arch, table: EnergyTable, free: str) -> LayerCounts:
    """:func:`map_layer`'s counts of ``layer`` with the least energy when the DRAM traffic of the operands in ``free``
    is another's (:func:`npukit.sim.mapper.choose_energy_without`); the counts under ``energy`` where the mapping
    does not search (fixed, or SCALE-Sim's memory model)."""
    if arch.memory == "scalesim" or arch.mapping == "fixed" or not free:
        return map_layer_each(layer, arch, table)["energy"]
    return mapper.choose_energy_without(layer, arch, table, free)


def simulate_layer(layer: Layer, arch: Arch, ledger: Ledger, scope: str, table: EnergyTable | None = None,
                   memo: dict | None = None) -> LayerResult:
    """Simulate one layer, record it into ``ledger`` under ``scope``, return its figures. ``memo``: counts of
    the layer shapes already mapped on this arch (a model's repeated blocks are mapped once)."""
    key = (layer.M, layer.N, layer.K, layer.batch, layer.kind, layer.conv, layer.shared)
    c = memo.get(key) if memo is not None else None
    if c is None:
        c = map_layer(layer, arch, table)
        if memo is not None:
            memo[key] = c
    b = layer.batch
    for comp, act, bits, cnt in layer_records(layer, c, arch):
        ledger.record(comp, act, bits, cnt, scope)
    dbits = dram_bits(layer, c, arch)
    if arch.memory == "scalesim":  # SCALE-Sim's own stalls (CALC: ofmap write buffer; USER: replayed)
        stall = b * c.scalesim_stall_cycles
    else:
        stall = b * stall_cycles(dbits / b / 8, c.folds, c.compute_cycles, arch)
    compute = b * c.compute_cycles
    ledger.add_cycles(compute, "compute", scope)
    ledger.add_cycles(stall, "stall", scope)
    util = utilization(layer.macs, compute, arch.rows, arch.cols)  # <= 1 (SCALE-Sim's 1x1 os is one cycle short)
    return LayerResult(
        name=layer.name,
        kind=layer.kind,
        M=layer.M,
        N=layer.N,
        K=layer.K,
        batch=b,
        folds=b * c.folds,
        compute_cycles=compute,
        stall_cycles=stall,
        mapping_efficiency=c.mapping_efficiency,
        utilization=util,
        macs=layer.macs,
        dram_bytes=dbits / 8,
        psum_buffer_bytes=b * (c.psum_reads + c.psum_writes) * held_bits(arch) / 8,
        mapping=c.mapping.label(arch.dataflow),
        traffic_bytes=traffic_bytes(layer, c, arch),
    )


def simulate(
    workload: Workload,
    arch: Arch,
    ledger: Ledger | None = None,
    table: EnergyTable | str | None = None,
    layers: Iterable[Layer] | None = None,
) -> SimResult:
    """Run ``workload`` on ``arch``; records into ``ledger`` (a new one if None) and prices energy
    with ``table`` (default: the arch's ``energy_table``)."""
    check_buffers(arch)
    ledger = ledger if ledger is not None else Ledger()
    ledger.meta.setdefault("arch", arch.to_dict())
    ledger.meta.setdefault("workload", workload.name)
    tab = load_table(table or arch.energy_table) if not isinstance(table, EnergyTable) else table
    ledger.meta.setdefault("energy_table", tab.path or tab.name)  # a built-in's name or the file
    declare_components(ledger, arch)
    results = []
    hide = 0  # GEMM cycles a pipelined vector unit can still hide behind (vector.overlap = "overlap")
    memo: dict = {}
    for layer in layers if layers is not None else workload.layers:
        scope = f"{workload.name}/{layer.name}"
        one = Ledger()
        declare_components(one, arch)
        if isinstance(layer, VectorOp):
            res = simulate_vector_op(layer, arch, one, scope, hide)
            hide -= res.vector_cycles - res.compute_cycles
        else:
            res = simulate_layer(layer, arch, one, scope, tab, memo)
            hide += res.total_cycles
        if arch.vector.overlap == "serial":
            hide = 0
        res.energy_pj = one.energy_by(tab, "component")
        facts = {"kind": res.kind, "mapping": res.mapping}
        if res.kind != "vector":
            facts.update(M=res.M, N=res.N, K=res.K, mapping_efficiency=res.mapping_efficiency)
        one.describe(scope, **facts)
        ledger.merge(one)
        results.append(res)
    out = SimResult(workload.name, arch, results, ledger)
    _record_ppa(out, tab)
    return out


def _record_ppa(result: SimResult, table: EnergyTable) -> None:
    """Area, static energy and power (:mod:`npukit.sim.power`) into the ledger: the run's in
    ``meta["ppa"]``, each layer's as facts of its scope (ledgers without them still load)."""
    from .area import arch_area
    from .power import run_power

    area = arch_area(result.arch, table)
    run, layers = run_power(result, area)
    result.ledger.meta["ppa"] = {"leakage_mw": area.leakage_mw, **run.columns(),
                                 "area_um2_by_component": {c: um2 for c, (um2, _) in area.by_component().items()}}
    for r, p in zip(result.layers, layers, strict=True):
        result.ledger.describe(f"{result.workload}/{r.name}", energy_static_pj=p.static_pj, power_avg_w=p.avg_w)


def simulate_vector_op(op: VectorOp, arch: Arch, ledger: Ledger, scope: str, hide: int = 0) -> LayerResult:
    """Cost one non-GEMM operator on the vector unit (:mod:`npukit.sim.vector_unit`), recording into
    ``ledger`` under ``scope``; ``hide``: GEMM cycles it may overlap with (0 in serial mode)."""
    for comp, act, bits, cnt in vector_unit.vector_records(op, arch):
        ledger.record(comp, act, bits, cnt, scope)
    busy = vector_unit.busy_cycles(op, arch)
    exposed = busy - min(busy, max(0, hide))
    ledger.add_cycles(exposed, "vector", scope)
    return LayerResult(
        name=op.name, kind="vector", M=0, N=0, K=0, batch=op.batch, folds=0, compute_cycles=exposed,
        stall_cycles=0, mapping_efficiency=0.0, utilization=0.0, macs=0,
        dram_bytes=vector_unit.dram_bytes(op, arch), psum_buffer_bytes=0.0, mapping=op.op,
        vector_cycles=busy, traffic_bytes=vector_unit.traffic(op, arch),
    )
