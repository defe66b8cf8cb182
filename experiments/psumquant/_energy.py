"""Energy of the psum buffer width on the 128x128 NPU: ResNet-18 (224x224) and one Llama-3.1-8B
decoder layer through :func:`npukit.sim.simulate` at psum buffer widths 32..4 bits.

Only ``bits.psum`` changes; the adders and PE registers stay at ``bits.accumulator`` (32 bits) and
every other assumption (energy table, buffer sizes, DRAM bandwidth) comes from the arch file and is
printed by :func:`assumptions`.
"""

from __future__ import annotations

from typing import Any

from npukit.sim import Arch, load_arch, load_table, simulate
from npukit.sim.simulator import COMPONENTS
from npukit.sim.workload import Workload, llama3_8b_layer, resnet18

BITS = (32, 16, 12, 10, 8, 6, 4)
# PsumQuant paper (restated in docs/references.md, PsumQuant): 45% lower total energy with 8-bit psums
# on a 128x128 systolic array.
PAPER_REDUCTION_8BIT = 0.45


def workloads() -> list[Workload]:
    """ResNet-18 at 224x224 and one Llama-3.1-8B decoder layer (npukit.sim built-ins)."""
    return [resnet18(), llama3_8b_layer()]


def energy_rows(arch: Arch | None = None, bits: tuple[int, ...] = BITS) -> list[dict[str, Any]]:
    """One row per (workload, psum bits): total energy and per-component energy in pJ, and the
    reduction of total energy against the 32-bit psum buffer (a fraction; 0.45 = 45% lower)."""
    base = arch or load_arch("npu128")
    table = load_table(base.energy_table)
    rows = []
    for wl in workloads():
        ref = None
        for b in bits:
            res = simulate(wl, base.with_(**{"bits.psum": b}), table=table)
            comp = res.energy_by_component()
            total = sum(comp.values())
            if b == 32:
                ref = total
            row: dict[str, Any] = {"workload": wl.name, "policy": "energy", "bits": b,
                                   "array": f"{base.rows}x{base.cols}", "energy_total_pj": total}
            row.update({f"energy_{c}_pj": comp.get(c, 0.0) for c in COMPONENTS})
            row["reduction_vs_32"] = (1.0 - total / ref) if ref else float("nan")
            row["cycles"] = res.cycles
            rows.append(row)
    return rows


def assumptions(arch: Arch | None = None) -> list[str]:
    """Every assumption behind the energy numbers, one line each (units stated)."""
    a = arch or load_arch("npu128")
    t = load_table(a.energy_table)
    lines = [
        f"arch '{a.name}': {a.rows}x{a.cols} PEs, dataflow {a.dataflow}, timing {a.timing}, clock {a.clock_ghz} GHz",
        f"bits: input {a.bits.input}, weight {a.bits.weight}, output {a.bits.output}, "
        f"accumulator (adders, PE psum registers) {a.bits.accumulator}; only the psum buffer width is swept",
        "SRAM sizes (KiB): " + ", ".join(f"{k} {getattr(a.sram_kib, k):g}" for k in ("ifmap", "filter", "psum", "ofmap")),
        f"DRAM bandwidth: {a.dram_bandwidth_bytes_per_cycle:g} bytes/cycle",
        f"energy table '{t.name}': {t.description} ({t.technology_nm:g} nm)" if t.technology_nm else f"energy table '{t.name}'",
    ]
    for sec in ("int_add", "int_mult", "register", "sram", "dram"):
        src = t.sections.get(sec, {}).get("source")
        if src:
            lines.append(f"  {sec}: {src}")
    lines.append("workloads: " + "; ".join(f"{w.name} ({len(w.layers)} GEMMs, {w.macs:,} MACs)" for w in workloads()))
    lines.append(f"paper claim: {PAPER_REDUCTION_8BIT:.0%} lower total energy at 8-bit psums on a 128x128 array "
                 "(PsumQuant, docs/references.md)")
    return lines
