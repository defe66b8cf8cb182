"""``npukit sim --format scalesim``: SCALE-Sim v3's three report files, read back by SCALE-Sim's own column
names; in SCALE-Sim's memory mode the cycles and access counts equal SCALE-Sim 3.0.0's (the golden numbers
of tests/test_scalesim_memory.py, produced by SCALE-Sim itself)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from test_scalesim_memory import CASES, CFG, TOPO_HEAD

from npukit.cli import main
from npukit.sim import load_arch, load_scalesim_cfg, load_topology_csv, map_layer, simulate
from npukit.sim._scalesim_memory import scalesim_shape
from npukit.sim.scalesim_reports import scalesim_reports

# The column names as SCALE-Sim 3.0.0 writes them (scalesim/simulator.py, generate_reports), so a script
# written against SCALE-Sim's output reads npukit's
SCALESIM_COLUMNS = {
    "COMPUTE_REPORT.csv": ["LayerID", "Total Cycles (incl. prefetch)", "Total Cycles", "Stall Cycles", "Overall Util %",
                           "Mapping Efficiency %", "Compute Util %"],
    "BANDWIDTH_REPORT.csv": ["LayerID", "Avg IFMAP SRAM BW", "Avg FILTER SRAM BW", "Avg OFMAP SRAM BW",
                             "Avg IFMAP DRAM BW", "Avg FILTER DRAM BW", "Avg OFMAP DRAM BW"],
    "DETAILED_ACCESS_REPORT.csv": [
        "LayerID", "SRAM IFMAP Start Cycle", "SRAM IFMAP Stop Cycle", "SRAM IFMAP Reads",
        "SRAM Filter Start Cycle", "SRAM Filter Stop Cycle", "SRAM Filter Reads",
        "SRAM OFMAP Start Cycle", "SRAM OFMAP Stop Cycle", "SRAM OFMAP Writes",
        "DRAM IFMAP Start Cycle", "DRAM IFMAP Stop Cycle", "DRAM IFMAP Reads",
        "DRAM Filter Start Cycle", "DRAM Filter Stop Cycle", "DRAM Filter Reads",
        "DRAM OFMAP Start Cycle", "DRAM OFMAP Stop Cycle", "DRAM OFMAP Writes"],
}


def _read(path: Path) -> list[dict[str, str]]:
    """A SCALE-Sim report as a user's script reads it: ', '-separated, a trailing empty column dropped."""
    with path.open() as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    header = [h for h in rows[0] if h]
    return [dict(zip(header, r[: len(header)], strict=True)) for r in rows[1:]]


@pytest.mark.parametrize("case", [3, 4, 2], ids=["ws", "os", "is"])
def test_cli_reports_equal_scalesim_goldens(tmp_path: Path, case: int) -> None:
    (rows, cols, df, ifmap, filt, ofmap), layers = CASES[case]
    cfg = tmp_path / "golden.cfg"
    cfg.write_text(CFG.format(rows=rows, cols=cols, df=df, ifmap=ifmap, filt=filt, ofmap=ofmap))
    topo = tmp_path / "topo.csv"
    topo.write_text(TOPO_HEAD + "".join(", ".join(map(str, t)) + ",\n" for t, _ in layers))
    out = tmp_path / "out"
    assert main(["sim", "--arch", str(cfg), "--workload", str(topo), "--format", "scalesim", "--out", str(out),
                 "--quiet"]) == 0
    for name, columns in SCALESIM_COLUMNS.items():
        text = (out / name).read_text()
        assert text.splitlines()[0] == ", ".join(columns) + ","  # SCALE-Sim's header line, byte for byte
    comp = _read(out / "COMPUTE_REPORT.csv")
    detail = _read(out / "DETAILED_ACCESS_REPORT.csv")
    bw = _read(out / "BANDWIDTH_REPORT.csv")
    assert [r["LayerID"] for r in comp] == [str(i) for i in range(len(layers))]
    arch = load_scalesim_cfg(cfg)
    for (_, gold), c, d, b, layer in zip(layers, comp, detail, bw, load_topology_csv(topo).layers, strict=True):
        cycles, ifr, flr, ofw, ifd, fld, ofd = gold
        assert int(c["Total Cycles"]) == cycles and int(c["Stall Cycles"]) == 0
        got = tuple(int(d[k]) for k in ("SRAM IFMAP Reads", "SRAM Filter Reads", "SRAM OFMAP Writes",
                                        "DRAM IFMAP Reads", "DRAM Filter Reads", "DRAM OFMAP Writes"))
        assert got == (ifr, flr, ofw, ifd, fld, ofd)
        # SCALE-Sim's MACs are its own output extent's (ceil((H - fh + s) / s)): 15.497... on the stride-2 os layer
        # of case 4 (SCALE-Sim 3.0.0 itself), not npukit's floor lowering's 6.89
        m, n, k = scalesim_shape(layer)
        assert float(c["Overall Util %"]) == pytest.approx(m * n * k * 100 / (cycles * rows * cols))
        assert float(c["Mapping Efficiency %"]) == pytest.approx(100 * map_layer(layer, arch).mapping_efficiency)
        assert float(b["Avg IFMAP SRAM BW"]) == pytest.approx(ifr / cycles)  # SCALE-Sim: reads / Total Cycles
        assert float(b["Avg OFMAP SRAM BW"]) == pytest.approx(ofw / cycles)
        assert int(c["Total Cycles (incl. prefetch)"]) >= cycles


def test_npukit_memory_mode_counts_and_vector_ops_left_out() -> None:
    # own accounting: the report carries npukit's counts (ofmap writes = final outputs), one row per GEMM
    arch = load_arch("npu128")
    from npukit.workloads import load_workload

    w = load_workload("llama3-8b-layer:seq=64")
    res = simulate(w, arch)
    texts = scalesim_reports(w, res)
    gemm_rows = [r for r in res.layers if r.kind != "vector"]
    assert len(texts["COMPUTE_REPORT.csv"].splitlines()) == 1 + len(gemm_rows) < 1 + len(res.layers)
    first = texts["COMPUTE_REPORT.csv"].splitlines()[1].split(", ")
    assert int(first[2]) == gemm_rows[0].total_cycles and int(first[3]) == gemm_rows[0].stall_cycles
    detail = texts["DETAILED_ACCESS_REPORT.csv"].splitlines()[1].split(", ")
    r0 = gemm_rows[0]
    assert int(detail[12]) * arch.bits.input / 8 == r0.traffic_bytes["dram_ifmap_read_bytes"]


# COMPUTE_REPORT.csv of SCALE-Sim 3.0.0 itself (own virtualenv, CALC mode) on the 8x4 array of the fourth case
# above (2/2/8 kB SRAMs) and its two layers, per dataflow: (Total Cycles, Mapping Efficiency %, Compute Util %)
SCALESIM_COMPUTE = {
    "ws": [(5345, 91.66666666666666, 14.666666666666645), (4299, 62.5, 33.967391304347814)],
    "os": [(2033, 45.83333333333333, 43.80530973451327), (3279, 48.828125, 47.63719512195122)],
    "is": [(1376, 100.0, 61.111111111111086), (8049, 89.28571428571429, 17.170329670329686)],
}


@pytest.mark.parametrize("df", ["ws", "os", "is"])
def test_compute_report_equals_scalesim_per_dataflow(tmp_path: Path, df: str) -> None:
    (rows, cols, _, ifmap, filt, ofmap), layers = CASES[3]
    cfg = tmp_path / "g.cfg"
    cfg.write_text(CFG.format(rows=rows, cols=cols, df=df, ifmap=ifmap, filt=filt, ofmap=ofmap))
    topo = tmp_path / "topo.csv"
    topo.write_text(TOPO_HEAD + "".join(", ".join(map(str, t)) + ",\n" for t, _ in layers))
    w = load_topology_csv(topo)
    text = scalesim_reports(w, simulate(w, load_scalesim_cfg(cfg)))["COMPUTE_REPORT.csv"]
    got = [dict(zip(SCALESIM_COLUMNS["COMPUTE_REPORT.csv"], ln.rstrip(",").split(", "), strict=True))
           for ln in text.splitlines()[1:]]
    for row, (cycles, meff, cutil) in zip(got, SCALESIM_COMPUTE[df], strict=True):
        assert int(row["Total Cycles"]) == cycles
        assert float(row["Mapping Efficiency %"]) == pytest.approx(meff, rel=1e-12)
        assert float(row["Compute Util %"]) == pytest.approx(cutil, rel=1e-12)  # SCALE-Sim sums per fold: last digits
