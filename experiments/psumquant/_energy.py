"""Energy of the psum buffer width on the 128x128 NPU: ResNet-18 (224x224) and one Llama-3.1-8B
decoder layer through :func:`npukit.sim.simulate` at psum buffer widths 32..4 bits.

Only ``bits.psum_buffer`` changes (the psum buffer and the psum adder that updates it, by the psum
charging rules of :mod:`npukit.sim.psum_path`); the MACs and PE psum registers stay at ``bits.pe_psum``
(32 bits) and every other assumption (energy table, buffer sizes, DRAM bandwidth) comes from the arch file and is
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


MAPPINGS = ("search", "fixed")  # the arch's mapping search first, then SCALE-Sim's fixed loop order


def workloads() -> list[tuple[str, Workload]]:
    """(label, workload): ResNet-18 at 224x224, one Llama-3.1-8B decoder layer in prefill (2048
    tokens) and in decode (one token over 2048 cached) (npukit.sim built-ins)."""
    return [("resnet18", resnet18()), ("llama3-8b-layer", llama3_8b_layer()),
            ("llama3-8b-layer-decode", llama3_8b_layer(phase="decode"))]


def energy_rows(arch: Arch | None = None, bits: tuple[int, ...] = BITS,
                mappings: tuple[str, ...] = MAPPINGS) -> list[dict[str, Any]]:
    """One row per (workload, mapping, psum bits): total and on-chip (all but DRAM) energy and the
    energy per component in pJ, and the reductions of total and of on-chip energy against the 32-bit
    psum buffer under the same mapping mode (fractions; 0.45 = 45% lower)."""
    base = arch or load_arch("npu128")
    table = load_table(base.energy_table)
    rows = []
    for label, wl in workloads():
        for mapping in mappings:
            ref = ref_on = None
            for b in bits:
                res = simulate(wl, base.with_(**{"bits.psum_buffer": b, "mapping": mapping}), table=table)
                comp = res.energy_by_component()
                total, onchip = sum(comp.values()), res.energy_onchip_pj
                if b == 32:
                    ref, ref_on = total, onchip
                row: dict[str, Any] = {"workload": label, "policy": "energy", "mapping": mapping, "bits": b,
                                       "array": f"{base.rows}x{base.cols}", "energy_total_pj": total,
                                       "energy_onchip_pj": onchip}
                row.update({f"energy_{c}_pj": comp.get(c, 0.0) for c in COMPONENTS})
                row["reduction_vs_32"] = (1.0 - total / ref) if ref else float("nan")
                row["reduction_onchip_vs_32"] = (1.0 - onchip / ref_on) if ref_on else float("nan")
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
        f"pe_psum (PE adders and psum registers) {a.bits.pe_psum}; only the psum buffer width (buffer and psum adder) "
        "is swept",
        "SRAM sizes (KiB): " + ", ".join(f"{k} {getattr(a.sram_kib, k):g}" for k in ("ifmap", "filter", "psum", "ofmap")),
        f"DRAM bandwidth: {a.dram_bandwidth_bytes_per_cycle:g} bytes/cycle",
        f"energy table '{t.name}': {t.description} ({t.technology_nm:g} nm)" if t.technology_nm else f"energy table '{t.name}'",
    ]
    v = a.vector
    lines.append(f"vector unit (non-GEMM operators): {v.lanes} lanes, {v.number}{v.bits}, {v.overlap} with the array; "
                 "per-op lane costs are npukit's estimates (npukit.sim.vector_unit)")
    for sec in ("int_add", "int_mult", "register", "sram", "dram", "fp16_add", "fp16_mult"):
        src = t.sections.get(sec, {}).get("source")
        if src:
            lines.append(f"  {sec}: {src}")
    lines.append(f"memory model {a.memory}; mapping search (objective {a.objective}) and fixed "
                 "(SCALE-Sim's loop order) both shown; on-chip energy = everything but DRAM")
    q = a.psum_quant
    lines.append(f"psum path charged below 32 bits: policy {q.policy}, semantics {q.semantics}, scale multiplier "
                 f"{q.multiplier_bits} bits, predictor {q.predictor_features} features, top-{q.top_k} peaks "
                 "(feature/predictor datapaths 16 bits: npukit's estimate)")
    lines.append("workloads: " + "; ".join(f"{lab} ({len(w.gemms)} GEMMs, {len(w.vector_ops)} vector ops, {w.macs:,} MACs)"
                                           for lab, w in workloads()))
    lines.append(f"paper claim: {PAPER_REDUCTION_8BIT:.0%} lower total energy at 8-bit psums on a 128x128 array "
                 "(PsumQuant, docs/references.md)")
    return lines
