"""The analytical NPU simulator: a workload on an :class:`Arch` -> per-layer cycles and a Ledger.

Everything lands in the Ledger under the scope ``<workload>/<layer>``: MACs at operand bits
(component ``pe_array``), PE register writes (``pe_registers``), reads and writes of each SRAM
(``ifmap_sram``, ``filter_sram``, ``psum_buffer`` at psum bits, ``ofmap_sram``), the adds that
update running psums (``psum_adder``), DRAM traffic (``dram``), and compute and stall cycles.

DRAM rule: an input operand whose whole tensor fits its SRAM is fetched once; one that does not is
refetched for every fold that reuses it. Outputs are written to DRAM once. Running psums that do
not fit the psum buffer spill to DRAM and are read and written there per K-fold instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import dataflow_is, dataflow_os, dataflow_ws
from ._mapping import LayerCounts, check_buffers, stall_cycles
from .arch import Arch
from .energy import EnergyTable, load_table
from .ledger import Ledger
from .workload import Layer, VectorOp, Workload

_DATAFLOWS = {"ws": dataflow_ws.map_layer, "os": dataflow_os.map_layer, "is": dataflow_is.map_layer}
TRAFFIC_KEYS = (
    "ifmap_sram.sram_read", "ifmap_sram.sram_write", "filter_sram.sram_read", "filter_sram.sram_write",
    "psum_buffer.sram_read", "psum_buffer.sram_write", "ofmap_sram.sram_read", "ofmap_sram.sram_write",
    "dram.dram_read", "dram.dram_write",
)
COMPONENTS = ("pe_array", "pe_registers", "ifmap_sram", "filter_sram", "psum_buffer", "psum_adder", "ofmap_sram", "dram")


@dataclass
class LayerResult:
    """One layer's figures (cycles in clock cycles, traffic in bytes)."""

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
    energy_pj: dict[str, float] = field(default_factory=dict)
    traffic_bytes: dict[str, float] = field(default_factory=dict)  # '<component>.<action>' -> bytes

    @property
    def cycles(self) -> int:
        return self.compute_cycles + self.stall_cycles


@dataclass
class SimResult:
    """A simulated workload: per-layer results, the ledger, and totals."""

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
    def cycles(self) -> int:
        return self.compute_cycles + self.stall_cycles

    @property
    def macs(self) -> int:
        return sum(r.macs for r in self.layers)

    def energy_pj(self) -> float:
        return sum(sum(r.energy_pj.values()) for r in self.layers)

    def energy_by_component(self) -> dict[str, float]:
        out = dict.fromkeys(COMPONENTS, 0.0)
        for r in self.layers:
            for k, v in r.energy_pj.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def latency_s(self) -> float:
        return self.cycles / (self.arch.clock_ghz * 1e9)

    def rows(self) -> list[dict[str, Any]]:
        """Flat per-layer rows for CSV (energies in pJ per component)."""
        out = []
        for r in self.layers:
            d = asdict(r)
            e = d.pop("energy_pj")
            t = d.pop("traffic_bytes")
            d["cycles"] = r.cycles
            for key in TRAFFIC_KEYS:
                d[f"{key.replace('.', '_')}_bytes"] = t.get(key, 0.0)
            for comp in COMPONENTS:
                d[f"energy_{comp}_pj"] = e.get(comp, 0.0)
            d["energy_total_pj"] = sum(e.values())
            out.append(d)
        return out


def _traffic_bytes(ledger: Ledger) -> dict[str, float]:
    """Bytes moved per '<component>.<action>' for the memory actions of a ledger."""
    out: dict[str, float] = {}
    for (_, comp, act, bits), n in ledger.counts.items():
        if act.startswith(("sram_", "dram_")):
            key = f"{comp}.{act}"
            out[key] = out.get(key, 0.0) + n * bits[0] / 8
    return out


def map_layer(layer: Layer, arch: Arch) -> LayerCounts:
    """Per-GEMM counts of ``layer`` under the arch's dataflow."""
    return _DATAFLOWS[arch.dataflow](layer, arch)


def declare_components(ledger: Ledger, arch: Arch) -> None:
    """Declare the SRAM components with their capacities (bytes) so energy lookups work."""
    for buf, comp in (("ifmap", "ifmap_sram"), ("filter", "filter_sram"), ("psum", "psum_buffer"), ("ofmap", "ofmap_sram")):
        ledger.declare(comp, kind="sram", capacity_bytes=arch.sram_bytes(buf))
    ledger.declare("dram", kind="dram")


def simulate_layer(layer: Layer, arch: Arch, ledger: Ledger, scope: str) -> LayerResult:
    """Simulate one layer, record it into ``ledger`` under ``scope``, return its figures."""
    c = map_layer(layer, arch)
    b, bits, n = layer.batch, arch.bits, layer.batch
    rec = ledger.record
    rec("pe_array", "mac", (bits.input, bits.weight, bits.accumulator), n * c.macs, scope)
    reg_bits = {"input": bits.input, "weight": bits.weight, "accumulator": bits.accumulator}
    for kind, cnt in c.reg_writes:
        rec("pe_registers", "reg_write", reg_bits[kind], n * cnt, scope)
    rec("ifmap_sram", "sram_read", bits.input, n * c.ifmap_reads, scope)
    rec("ifmap_sram", "sram_write", bits.input, n * c.ifmap_dram, scope)
    rec("filter_sram", "sram_read", bits.weight, n * c.filter_reads, scope)
    rec("filter_sram", "sram_write", bits.weight, n * c.filter_dram, scope)
    rec("psum_buffer", "sram_read", bits.psum, n * c.psum_reads, scope)
    rec("psum_buffer", "sram_write", bits.psum, n * c.psum_writes, scope)
    rec("psum_adder", "int_add", bits.accumulator, n * (c.psum_reads + c.psum_dram_reads), scope)
    rec("ofmap_sram", "sram_write", bits.output, n * c.ofmap_writes, scope)
    rec("ofmap_sram", "sram_read", bits.output, n * c.ofmap_writes, scope)
    rec("dram", "dram_read", bits.input, n * c.ifmap_dram, scope)
    rec("dram", "dram_read", bits.weight, n * c.filter_dram, scope)
    rec("dram", "dram_read", bits.psum, n * c.psum_dram_reads, scope)
    rec("dram", "dram_write", bits.psum, n * c.psum_dram_writes, scope)
    rec("dram", "dram_write", bits.output, n * c.ofmap_writes, scope)
    dram_bits = (
        c.ifmap_dram * bits.input
        + c.filter_dram * bits.weight
        + (c.psum_dram_reads + c.psum_dram_writes) * bits.psum
        + c.ofmap_writes * bits.output
    )
    stall = b * stall_cycles(dram_bits / 8, c.folds, c.compute_cycles, arch)
    compute = b * c.compute_cycles
    ledger.add_cycles(compute, "compute", scope)
    ledger.add_cycles(stall, "stall", scope)
    util = layer.macs / (compute * arch.rows * arch.cols) if compute else 0.0
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
        dram_bytes=b * dram_bits / 8,
        psum_buffer_bytes=b * (c.psum_reads + c.psum_writes) * bits.psum / 8,
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
    ledger.meta.setdefault("energy_table", tab.name)
    declare_components(ledger, arch)
    results = []
    for layer in layers if layers is not None else workload.layers:
        if isinstance(layer, VectorOp):
            continue  # the vector unit is not modelled yet: non-GEMM operators cost nothing here
        scope = f"{workload.name}/{layer.name}"
        one = Ledger()
        declare_components(one, arch)
        res = simulate_layer(layer, arch, one, scope)
        res.energy_pj = one.energy_by(tab, "component")
        res.traffic_bytes = _traffic_bytes(one)
        ledger.merge(one)
        results.append(res)
    return SimResult(workload.name, arch, results, ledger)
