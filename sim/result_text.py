"""A simulation result as the text ``npukit sim`` and ``npukit demo`` print: a header (the arch's array, modes,
widths, number formats, SRAM sizes and DRAM bandwidth, and the keys a partial arch file inherited), the per-layer
table (cycles, mapping, utilization, energy per component group in uJ), the totals (cycles, utilization over
compute cycles and over all cycles, DRAM bytes, energy) and what the utilization and mapping columns mean."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .arch import Arch, ArchSource
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


#: What the printed figures mean, printed under the totals (one home for these definitions).
UTILIZATION_DEFINITION = ("utilization = MACs / (rows x cols x cycles); over compute cycles (the array's and the exposed "
                          "vector-unit cycles; per layer: the table's util %) leaves out the stall cycles (waiting on "
                          "DRAM), over all cycles counts them; map eff % = the PEs a fold's tile fills")


def mapping_legend(dataflow: str) -> str:
    """What the table's ``mapping`` codes (:meth:`npukit.sim._mapping.Mapping.label`) mean under ``dataflow``."""
    if dataflow == "os":
        return ("mapping: the order of the (M, N) folds, outer to inner (NM: N folds outermost, SCALE-Sim's; MN); "
                "M = rows of A and of the output, N = its columns; vector ops show their operator")
    dim, what = ("M", "rows of A") if dataflow == "ws" else ("N", "columns of B")
    return (f"mapping: loop order outer to inner over M (rows of A), N (columns of B), K (the reduction, always "
            f"innermost); '{dim}/1' = {dim} untiled, '{dim}t=448 (x28)' = 28 tiles of 448 {what}; vector ops show "
            "their operator")


def decode_tokens(meta: Mapping[str, Any]) -> int | None:
    """Tokens one run of a decode-style workload generates (its batch, one token per sequence), from its
    ``Workload.meta`` (``phase = "decode"`` directly or under ``options``); None for any other workload."""
    opts = meta.get("options", meta) if isinstance(meta.get("options"), Mapping) else meta
    if opts.get("phase") != "decode":
        return None
    batch = opts.get("batch", 1)
    return batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None


def mapping_objective(core_objective: str, chip_objective: str | None = None) -> str:
    """The objective a core's layers (or shares) are mapped under: on a multi-core chip (``chip_objective``) the
    chip's (its splits keep, of their shares' latency-, energy- and EDP-best mappings, the set that ranks first under
    it: :meth:`npukit.sim.multicore_sim._Run.gemm_parts`), else the core's own."""
    return chip_objective if chip_objective is not None else core_objective


def arch_header(a: Arch, table_name: str, source: ArchSource | None = None, dram: bool = True,
                chip_objective: str | None = None) -> list[str]:
    """The arch as printed above a result: array and modes; widths and number formats; memories and
    bandwidth (``dram=False``: without the DRAM, as for a core of a multi-core arch, whose DRAM channels the
    multi-core header gives); and, for an arch file that left keys out, the line naming them and where they
    came from. ``chip_objective``: the objective of the multi-core chip ``a`` is a core of; the mapping search's
    objective printed is then the one its shares are mapped under (:func:`mapping_objective`), not the core's own."""
    b, s = a.bits, a.sram_kib
    vec = f"{a.vector.number}{a.vector.bits}" if a.vector.number == "fp" else f"int{a.vector.bits}"
    lines = [
        f"array {a.rows}x{a.cols} PEs, dataflow {a.dataflow}, timing {a.timing}, clock {a.clock_ghz:g} GHz, "
        f"mapping {a.mapping}"
        + (f" (objective {mapping_objective(a.objective, chip_objective)})" if a.mapping == "search" else "")
        + f", memory accounting {a.memory}, energy table {table_name}",
        f"numbers: integer input {b.input} b, weight {b.weight} b, pe_psum {b.pe_psum} b (in-array accumulator), "
        f"psum_buffer {b.psum_buffer} b (running psums between K-folds), output {b.output} b; "
        f"vector unit {a.vector.lanes} lanes {vec} ({a.vector.overlap})",
        f"memories: SRAM ifmap {s.ifmap:g} KiB, filter {s.filter:g} KiB, psum {s.psum:g} KiB, ofmap {s.ofmap:g} KiB"
        + (f"; DRAM {a.dram_bandwidth_bytes_per_cycle:g} B/cycle = {a.dram_bandwidth_bytes_per_cycle * a.clock_ghz:g} GB/s"
           if dram else "")
        + (" (bandwidth_mode calc: no stalls)" if dram and a.bandwidth_mode == "calc" else ""),
    ]
    if source is not None and source.line():
        lines.append(source.line())
    return lines


def render_result(result: SimResult, table_name: str, quiet: bool = False, source: ArchSource | None = None,
                  tokens: int | None = None) -> str:
    """The header (arch, widths, memories), per-layer table and totals as text (cycles, utilization %, bytes,
    energy in uJ); ``source``: where the arch's values came from (its inherited keys are printed);
    ``tokens``: tokens one run generates (decode: DRAM bytes per token are printed). Control characters in
    names are escaped (:func:`npukit.sim.terminal.escape_controls`)."""
    a = result.arch
    head = f"{result.workload} on {a.name}"
    lines = [head, *("  " + x for x in arch_header(a, table_name, source)), ""]
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
                + [r.energy_onchip_pj / 1e6, r.energy_total_pj / 1e6]
            )
        lines += [format_table(headers, rows), ""]
    comp = result.energy_by_component()
    total = result.energy_pj
    n_vec = sum(r.kind == "vector" for r in result.layers)
    vec_exposed = sum(r.compute_cycles for r in result.layers if r.kind == "vector")
    vec_busy = sum(r.vector_cycles for r in result.layers)
    vec = (f" ({vec_exposed:,} of them on the vector unit, {a.vector.overlap}; busy {vec_busy:,})"
           if n_vec else "")
    lines.append(
        f"total: {len(result.layers) - n_vec} GEMM layers" + (f" and {n_vec} vector ops" if n_vec else "")
        + f", {result.macs:,} MACs, {result.compute_cycles:,} compute cycles{vec} "
        f"+ {result.stall_cycles:,} stall cycles = {result.total_cycles:,} total cycles ({result.latency_s * 1e3:.3f} ms "
        f"at {a.clock_ghz:g} GHz)"
    )
    lines.append(f"utilization: {100 * result.utilization:.1f}% over compute cycles, "
                 f"{100 * result.utilization_all_cycles:.1f}% over all cycles (incl. stalls)")
    per_token = f", {result.dram_bytes / tokens:,.0f} bytes per generated token ({tokens} per run)" if tokens else ""
    lines.append(f"DRAM traffic: {result.dram_bytes:,.0f} bytes ({result.dram_bytes / 1e9:,.3f} GB){per_token}")
    lines.append(
        f"energy: total {total / 1e6:,.1f} uJ, on-chip {result.energy_onchip_pj / 1e6:,.1f} uJ (all but DRAM) = "
        + ", ".join(f"{k} {v / 1e6:,.1f}" for k, v in comp.items() if v)
    )
    ppa = result.ledger.meta.get("ppa")
    if ppa:  # area, leakage and power (npukit.sim.power), as the simulation recorded them
        lines.append(ppa_line(ppa))
    lines += ["", UTILIZATION_DEFINITION] + ([] if quiet else [mapping_legend(a.dataflow)])
    return escape_controls("\n".join(lines))  # arch and layer names come from user files


def ppa_line(ppa: dict, area_of: str = "") -> str:
    """The printed line of a run's ``meta["ppa"]`` (mm^2, mW, uJ, W, GOP/s/mm^2, TOP/s/W); ``area_of``: what the area
    covers, in parentheses after it (a multi-core chip's "cores, NoC and shared memory")."""
    what = f" ({area_of})" if area_of else ""
    return (f"area {ppa['area_mm2']:,.2f} mm^2{what}, leakage {ppa['leakage_mw']:,.1f} mW; energy dynamic "
            f"{ppa['energy_dynamic_pj'] / 1e6:,.1f} + static {ppa['energy_static_pj'] / 1e6:,.1f} uJ; power avg "
            f"{ppa['power_avg_w']:,.3f} W, peak {ppa['power_peak_w']:,.3f} W (highest layer); perf/area "
            f"{ppa['gops_per_mm2']:,.1f} GOP/s/mm^2, perf/W {ppa['tops_per_w']:,.3f} TOP/s/W")
