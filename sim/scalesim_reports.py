"""SCALE-Sim v3's report files from an npukit run: ``COMPUTE_REPORT.csv``, ``BANDWIDTH_REPORT.csv`` and
``DETAILED_ACCESS_REPORT.csv``, with SCALE-Sim 3.0.0's headers and line format (``scalesim/simulator.py``,
``generate_reports``: ``"LayerID, ..."`` headers, values joined by ``", "``, a trailing comma), so scripts
written for SCALE-Sim's output read them unchanged.

One row per GEMM layer (vector operators have no SCALE-Sim counterpart and are left out), LayerID 0, 1, ...
in workload order; a layer with ``batch`` > 1 GEMMs is one row with batch x the counts and cycles. Counts
are elements (SCALE-Sim's words: 1 byte each in its configs), bandwidths elements per cycle.

With SCALE-Sim's memory accounting (``memory = "scalesim"``: an arch read from a SCALE-Sim .cfg, CALC
or USER bandwidth mode, or ``npukit sim --memory scalesim``) every column is SCALE-Sim 3.0.0's own,
computed as its ``single_layer_sim.calc_report_data`` does from the request replay of
:mod:`npukit.sim._scalesim_replay` (start/stop cycles, ``Total Cycles (incl. prefetch)``, DRAM
bandwidths included; checked column by column in ``benchmarks/bench_vs_scalesim.py`` and
``tests/test_scalesim_replay.py``).

With npukit's own accounting the counts are npukit's (OFMAP writes are final outputs) and, as that
model keeps no per-cycle trace, the start/stop cycles are estimates: SRAM 0 .. Total Cycles - 1, DRAM
0 .. Total Cycles (incl. prefetch) - 1, where ``Total Cycles (incl. prefetch)`` = Total Cycles + the
first fold's DRAM reads at the arch's DRAM bytes per cycle; DRAM bandwidths = counts / that window.
"""

from __future__ import annotations

import math
from pathlib import Path

from .arch import Arch
from .energy import EnergyTable
from .output import path_inside, write_files_atomically
from .simulator import SimResult, map_layer
from .workload import Layer, VectorOp, Workload

COMPUTE_REPORT = "COMPUTE_REPORT.csv"
BANDWIDTH_REPORT = "BANDWIDTH_REPORT.csv"
DETAILED_ACCESS_REPORT = "DETAILED_ACCESS_REPORT.csv"
# SCALE-Sim 3.0.0's header lines, as its simulator.generate_reports writes them (sparsity off)
COMPUTE_HEADER = ("LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, Overall Util %, "
                  "Mapping Efficiency %, Compute Util %,\n")
BANDWIDTH_HEADER = ("LayerID, Avg IFMAP SRAM BW, Avg FILTER SRAM BW, Avg OFMAP SRAM BW, "
                    "Avg IFMAP DRAM BW, Avg FILTER DRAM BW, Avg OFMAP DRAM BW,\n")
DETAILED_HEADER = (
    "LayerID, "
    "SRAM IFMAP Start Cycle, SRAM IFMAP Stop Cycle, SRAM IFMAP Reads, "
    "SRAM Filter Start Cycle, SRAM Filter Stop Cycle, SRAM Filter Reads, "
    "SRAM OFMAP Start Cycle, SRAM OFMAP Stop Cycle, SRAM OFMAP Writes, "
    "DRAM IFMAP Start Cycle, DRAM IFMAP Stop Cycle, DRAM IFMAP Reads, "
    "DRAM Filter Start Cycle, DRAM Filter Stop Cycle, DRAM Filter Reads, "
    "DRAM OFMAP Start Cycle, DRAM OFMAP Stop Cycle, DRAM OFMAP Writes,\n"
)


def _line(lid: int, items: list[int | float]) -> str:
    return str(lid) + ", " + ", ".join(str(x) for x in items) + ",\n"


def scalesim_reports(workload: Workload, result: SimResult, table: EnergyTable | str | None = None) -> dict[str, str]:
    """File name -> text of the three SCALE-Sim reports of ``result`` (a :func:`simulate` run of
    ``workload`` priced with ``table``, default the arch's); the layers' element counts come from
    :func:`map_layer` on the same arch and table (the same mapping the run chose)."""
    arch = result.arch
    compute, bandwidth, detail = [COMPUTE_HEADER], [BANDWIDTH_HEADER], [DETAILED_HEADER]
    memo: dict[tuple, object] = {}
    gemms = [(layer, res) for layer, res in zip(workload.layers, result.layers, strict=True) if not isinstance(layer, VectorOp)]
    for lid, (layer, res) in enumerate(gemms):
        c = _counts(layer, arch, table, memo)
        if arch.memory == "scalesim":
            rows = scalesim_rows(layer, arch, c)
        else:
            rows = _estimated_rows(layer, arch, c, res)
        for lst, items in zip((compute, bandwidth, detail), rows, strict=True):
            lst.append(_line(lid, items))
    return {COMPUTE_REPORT: "".join(compute), BANDWIDTH_REPORT: "".join(bandwidth), DETAILED_ACCESS_REPORT: "".join(detail)}


def _estimated_rows(layer: Layer, arch: Arch, c, res) -> tuple[list, list, list]:
    """npukit's own memory model: no per-cycle trace, start/stop cycles and the prefetch window estimated."""
    pes = arch.rows * arch.cols
    b = layer.batch
    ifmap_sram, filter_sram, ofmap_sram = b * c.ifmap_reads, b * c.filter_reads, b * c.ofmap_writes
    ifmap_dram = b * c.ifmap_dram
    filter_dram = b // layer.shared * c.filter_dram
    ofmap_dram = b * c.ofmap_dram
    total = max(1, res.compute_cycles + res.stall_cycles)
    first = math.ceil((ifmap_dram + filter_dram) / max(1, res.folds) / arch.dram_bandwidth_bytes_per_cycle)
    overall = total + first
    return ([overall, total, res.stall_cycles, res.macs * 100 / (total * pes), res.mapping_efficiency * 100,
             compute_util(layer, arch, res.mapping_efficiency) * 100],
            [ifmap_sram / total, filter_sram / total, ofmap_sram / total,
             ifmap_dram / overall, filter_dram / overall, ofmap_dram / overall],
            [0, total - 1, ifmap_sram, 0, total - 1, filter_sram, 0, total - 1, ofmap_sram,
             0, overall - 1, ifmap_dram, 0, overall - 1, filter_dram, 0, overall - 1, ofmap_dram])


def scalesim_rows(layer: Layer, arch: Arch, c) -> tuple[list, list, list]:
    """The COMPUTE, BANDWIDTH and DETAILED_ACCESS items of one layer as SCALE-Sim 3.0.0's
    ``single_layer_sim.calc_report_data`` computes them, from the request replay of
    :mod:`npukit.sim._scalesim_replay` (every column; a ``batch`` > 1 layer: counts and cycles x batch,
    start/stop cycles of one GEMM)."""
    from ._scalesim_memory import scalesim_shape
    from ._scalesim_replay import replay_layer

    r = replay_layer(layer, arch)
    m, n, k = scalesim_shape(layer)
    b = layer.batch
    pes = arch.rows * arch.cols
    total, stall = b * r["total_cycles"], b * r["stall_cycles"]
    mapping, util = _fold_means(m, n, k, arch)
    ifmap_sram, filter_sram, ofmap_sram = b * c.ifmap_reads, b * c.filter_reads, b * c.ofmap_writes
    d_if, d_f, d_of = b * r["dram_ifmap_reads"], b * r["dram_filter_reads"], b * r["dram_ofmap_writes"]
    overall = r["dram_ofmap_stop"] - min(r["dram_ifmap_start"], r["dram_filter_start"])
    overall += (b - 1) * total // b
    return ([overall, total, stall, b * m * n * k * 100 / (total * pes), mapping * 100, util * 100],
            [ifmap_sram / total, filter_sram / total, ofmap_sram / total,
             d_if / (r["dram_ifmap_stop"] - r["dram_ifmap_start"] + 1),
             d_f / (r["dram_filter_stop"] - r["dram_filter_start"] + 1),
             d_of / (r["dram_ofmap_stop"] - r["dram_ofmap_start"] + 1)],
            [r["sram_ifmap_start"], r["sram_ifmap_stop"], ifmap_sram,
             r["sram_filter_start"], r["sram_filter_stop"], filter_sram,
             r["sram_ofmap_start"], r["sram_ofmap_stop"], ofmap_sram,
             r["dram_ifmap_start"], r["dram_ifmap_stop"], d_if,
             r["dram_filter_start"], r["dram_filter_stop"], d_f,
             r["dram_ofmap_start"], r["dram_ofmap_stop"], d_of])


def _fold_means(m: int, n: int, k: int, arch: Arch) -> tuple[float, float]:
    """(mapping efficiency, compute utilization) as SCALE-Sim 3.0.0 averages them: per-fold values summed
    in its fold order (column folds outer) and divided by the fold count (same float rounding)."""
    r, c, df = arch.rows, arch.cols, arch.dataflow
    pes = r * c
    sr, sc, t = {"ws": (k, n, m), "os": (m, n, k), "is": (k, m, n)}[df]
    cycles = t + r + c - 2 if df == "os" else t + 2 * r + 2 * c - 3
    me = cu = 0.0
    folds = 0
    for fc in range(-(-sc // c)):
        cu_ = min(c, sc - fc * c)
        for fr in range(-(-sr // r)):
            used = min(r, sr - fr * r) * cu_
            me += (pes - (pes - used)) / pes if df == "ws" else used / pes
            cu += used * t / (pes * cycles)
            folds += 1
    return me / folds, cu / folds


def compute_util(layer: Layer, arch: Arch, mapping_efficiency: float) -> float:
    """SCALE-Sim's compute utilization (a fraction): the per-fold mean of used PEs x T / (PEs x fold cycles),
    where a fold streams T rows (ws: M, is: N, os: K, in SCALE-Sim's shape of the layer) and takes T + 2R + C + 1
    cycles (ws, is) or T + R + C - 2 (os) in npukit's own timing; with ``memory = "scalesim"`` a fold takes
    T + 2R + 2C - 3 (ws, is), as SCALE-Sim 3.0.0's systolic_compute_ws/_is count it (the rows + columns - 1
    of its filter/ifmap fold demand). Every fold's cycles are equal, so the mean is mapping efficiency x T /
    fold cycles."""
    if arch.memory == "scalesim":
        from ._scalesim_memory import scalesim_shape

        m, n, k = scalesim_shape(layer)
    else:
        m, n, k = layer.M, layer.N, layer.K
    r, c = arch.rows, arch.cols
    ws_is = 2 * r + 2 * c - 3 if arch.memory == "scalesim" else 2 * r + c + 1
    t, extra = {"ws": (m, ws_is), "is": (n, ws_is), "os": (k, r + c - 2)}[arch.dataflow]
    return mapping_efficiency * t / (t + extra)


def _counts(layer: Layer, arch: Arch, table: EnergyTable | str | None, memo: dict[tuple, object]):  # -> LayerCounts
    key = (layer.M, layer.N, layer.K, layer.batch, layer.kind, layer.conv, layer.shared)  # as the simulator's memo
    if key not in memo:
        memo[key] = map_layer(layer, arch, table)
    return memo[key]


def write_scalesim_reports(out_dir: str | Path, workload: Workload, result: SimResult,
                           table: EnergyTable | str | None = None) -> list[Path]:
    """Write the three reports into ``out_dir`` (atomically, all or none); returns their paths."""
    texts = scalesim_reports(workload, result, table)
    files = [(path_inside(Path(out_dir), name), text.encode()) for name, text in texts.items()]
    write_files_atomically(files)
    return [p for p, _ in files]
