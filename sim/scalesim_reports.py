"""SCALE-Sim v3's report files from an npukit run: ``COMPUTE_REPORT.csv``, ``BANDWIDTH_REPORT.csv`` and
``DETAILED_ACCESS_REPORT.csv``, with SCALE-Sim 3.0.0's headers and line format (``scalesim/simulator.py``,
``generate_reports``: ``"LayerID, ..."`` headers, values joined by ``", "``, a trailing comma), so scripts
written for SCALE-Sim's output read them unchanged.

One row per GEMM layer (vector operators have no SCALE-Sim counterpart and are left out), LayerID 0, 1, ...
in workload order; a layer with ``batch`` > 1 GEMMs is one row with batch x the counts and cycles. Counts
are elements (SCALE-Sim's words: 1 byte each in its configs), bandwidths elements per cycle.

Column meaning, and which values equal SCALE-Sim's (with ``memory = "scalesim"``, ``mapping = "fixed"``,
CALC bandwidth mode, i.e. an arch read from a SCALE-Sim .cfg or ``npukit sim --memory scalesim``):

* ``Total Cycles``: compute + stall cycles (SCALE-Sim: its trace length; equal), ``Stall Cycles``
  (equal: 0 in CALC mode unless the ofmap write buffer fills), ``Mapping Efficiency %`` (the share of the
  PEs a fold covers, averaged over folds: equal), ``Overall Util %`` = MACs x 100 / (PEs x Total Cycles)
  (SCALE-Sim's formula; equal).
* ``SRAM IFMAP Reads``, ``SRAM Filter Reads``, ``SRAM OFMAP Writes``, ``DRAM IFMAP Reads``, ``DRAM Filter
  Reads``, ``DRAM OFMAP Writes`` (equal in SCALE-Sim's memory mode; npukit's own accounting otherwise,
  where OFMAP writes are final outputs, not every fold's partial sums), and the SRAM bandwidths = those
  counts / Total Cycles (SCALE-Sim's formula; equal).
* ``Compute Util %``: SCALE-Sim's per-fold definition (:func:`compute_util`; equal).
* Estimates (npukit keeps no per-cycle trace): start and stop cycles: SRAM from 0 to Total Cycles - 1,
  DRAM from 0 to Total Cycles (incl. prefetch) - 1; ``Total Cycles (incl. prefetch)`` = Total Cycles +
  the first fold's DRAM reads at the arch's DRAM bytes per cycle (SCALE-Sim also counts its prefetch
  and the last ofmap drain: on an 8x4 array, 5,349 here vs SCALE-Sim's 6,335 for ws); the DRAM
  bandwidths = DRAM counts / that window (SCALE-Sim's formula on the estimated window).
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
    pes = arch.rows * arch.cols
    memo: dict[tuple, object] = {}
    gemms = [(layer, res) for layer, res in zip(workload.layers, result.layers, strict=True) if not isinstance(layer, VectorOp)]
    for lid, (layer, res) in enumerate(gemms):
        c = _counts(layer, arch, table, memo)
        b = layer.batch
        ifmap_sram, filter_sram, ofmap_sram = b * c.ifmap_reads, b * c.filter_reads, b * c.ofmap_writes
        ifmap_dram = b * c.ifmap_dram
        filter_dram = b // layer.shared * c.filter_dram
        ofmap_dram = b * c.ofmap_dram
        total = max(1, res.compute_cycles + res.stall_cycles)
        first = math.ceil((ifmap_dram + filter_dram) / max(1, res.folds) / arch.dram_bandwidth_bytes_per_cycle)
        overall = total + first
        compute.append(_line(lid, [
            overall, total, res.stall_cycles, res.macs * 100 / (total * pes), res.mapping_efficiency * 100,
            compute_util(layer, arch, res.mapping_efficiency) * 100,
        ]))
        bandwidth.append(_line(lid, [
            ifmap_sram / total, filter_sram / total, ofmap_sram / total,
            ifmap_dram / overall, filter_dram / overall, ofmap_dram / overall,
        ]))
        detail.append(_line(lid, [
            0, total - 1, ifmap_sram, 0, total - 1, filter_sram, 0, total - 1, ofmap_sram,
            0, overall - 1, ifmap_dram, 0, overall - 1, filter_dram, 0, overall - 1, ofmap_dram,
        ]))
    return {COMPUTE_REPORT: "".join(compute), BANDWIDTH_REPORT: "".join(bandwidth), DETAILED_ACCESS_REPORT: "".join(detail)}


def compute_util(layer: Layer, arch: Arch, mapping_efficiency: float) -> float:
    """SCALE-Sim's compute utilization (a fraction): the per-fold mean of used PEs x T / (PEs x fold cycles),
    where a fold streams T rows (ws: M, is: N, os: K, in SCALE-Sim's shape of the layer) and takes T + 2R + C + 1
    cycles (ws, is) or T + R + C - 2 (os), as SCALE-Sim 3.0.0's systolic_compute_* count them; every fold's
    cycles are equal, so the mean is mapping efficiency x T / fold cycles."""
    if arch.memory == "scalesim":
        from ._scalesim_memory import scalesim_shape

        m, n, k = scalesim_shape(layer)
    else:
        m, n, k = layer.M, layer.N, layer.K
    r, c = arch.rows, arch.cols
    t, extra = {"ws": (m, 2 * r + c + 1), "is": (n, 2 * r + c + 1), "os": (k, r + c - 2)}[arch.dataflow]
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
