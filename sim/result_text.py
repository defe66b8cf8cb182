"""A simulation result as the text ``npukit sim`` and ``npukit demo`` print: the per-layer table (cycles,
mapping, utilization, energy per component group in uJ) and the totals."""

from __future__ import annotations

from .output import format_table
from .simulator import SimResult
from .terminal import escape_controls

COMPONENT_COLUMNS = (
    ("mac", ("pe_array",)),
    ("regs", ("input_registers", "weight_registers", "psum_registers")),
    ("sram", ("ifmap_sram", "filter_sram", "ofmap_sram")),
    ("psum", ("psum_buffer", "psum_adder")),
    ("psum path", ("psum_quantizer", "psum_features", "psum_predictor")),
    ("vector", ("vector_unit",)),
    ("dram", ("dram",)),
)


def render_result(result: SimResult, table_name: str, quiet: bool = False) -> str:
    """The per-layer table and totals as text (cycles, utilization %, energy in uJ); control characters in
    names are escaped (:func:`npukit.sim.terminal.escape_controls`)."""
    a = result.arch
    head = (
        f"{result.workload} on {a.name}: {a.rows}x{a.cols} {a.dataflow}, timing {a.timing}, "
        f"bits in/w/pe_psum/psum_buffer/out {a.bits.input}/{a.bits.weight}/{a.bits.pe_psum}/{a.bits.psum_buffer}/"
        f"{a.bits.output}, table {table_name}, "
        f"memory {a.memory}, mapping {a.mapping}" + (f" ({a.objective})" if a.mapping == "search" else "")
    )
    lines = [head, ""]
    if not quiet:
        headers = ["layer", "M", "N", "K", "mapping", "compute_cycles", "stall_cycles", "map eff %", "util %"]
        headers += [f"{c} uJ" for c, _ in COMPONENT_COLUMNS] + ["on-chip uJ", "total uJ"]
        rows = []
        for r in result.layers:
            e = r.energy_pj
            vec = r.kind == "vector"
            rows.append(
                [r.name if r.batch == 1 else f"{r.name} (x{r.batch})"]
                + (["", "", "", f"vector {r.mapping}"] if vec else [r.M, r.N, r.K, r.mapping])
                + [r.compute_cycles, r.stall_cycles, "" if vec else 100 * r.mapping_efficiency,
                   "" if vec else 100 * r.utilization]
                + [sum(e.get(k, 0.0) for k in keys) / 1e6 for _, keys in COMPONENT_COLUMNS]
                + [r.energy_onchip_pj() / 1e6, r.energy_total_pj() / 1e6]
            )
        lines += [format_table(headers, rows), ""]
    comp = result.energy_by_component()
    total = result.energy_pj()
    util = result.utilization
    n_vec = sum(r.kind == "vector" for r in result.layers)
    vec_exposed = sum(r.compute_cycles for r in result.layers if r.kind == "vector")
    vec_busy = sum(r.vector_cycles for r in result.layers)
    vec = (f" ({vec_exposed:,} of them on the vector unit, {a.vector.overlap}; busy {vec_busy:,})"
           if n_vec else "")
    lines.append(
        f"total: {len(result.layers) - n_vec} GEMM layers" + (f" and {n_vec} vector ops" if n_vec else "")
        + f", {result.macs:,} MACs, {result.compute_cycles:,} compute cycles{vec} "
        f"+ {result.stall_cycles:,} stall cycles = {result.total_cycles:,} total cycles ({result.latency_s() * 1e3:.3f} ms "
        f"at {a.clock_ghz:g} GHz), utilization {100 * util:.1f}%"
    )
    lines.append(
        f"energy: total {total / 1e6:,.1f} uJ, on-chip {result.energy_onchip_pj() / 1e6:,.1f} uJ (all but DRAM) = "
        + ", ".join(f"{k} {v / 1e6:,.1f}" for k, v in comp.items() if v)
    )
    ppa = result.ledger.meta.get("ppa")
    if ppa:  # area, leakage and power (npukit.sim.power), as the simulation recorded them
        lines.append(
            f"area {ppa['area_mm2']:,.2f} mm^2, leakage {ppa['leakage_mw']:,.1f} mW; energy dynamic "
            f"{ppa['energy_dynamic_pj'] / 1e6:,.1f} + static {ppa['energy_static_pj'] / 1e6:,.1f} uJ; power avg "
            f"{ppa['power_avg_w']:,.3f} W, peak {ppa['power_peak_w']:,.3f} W (highest layer); perf/area "
            f"{ppa['gops_per_mm2']:,.1f} GOP/s/mm^2, perf/W {ppa['tops_per_w']:,.3f} TOP/s/W"
        )
    return escape_controls("\n".join(lines))  # arch and layer names come from user files
