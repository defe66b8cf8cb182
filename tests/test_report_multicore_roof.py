"""The report of a multi-core ledger measures against the whole chip: utilization over all MAC cores' PEs, the
roofline's peak and DRAM roof of all cores and channels (it used one core's, so layers split over four cores showed
100% utilization and sat above the roof, out of the figure)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import Ledger, load_table
from npukit.sim.multicore import load_multicore_arch
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.report_model import summarise
from npukit.sim.workload import Layer, Workload

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quad() -> dict:
    wl = Workload("w", [Layer("big", 1024, 1024, 1024), Layer("small", 64, 64, 64)])
    return json.loads(simulate_multicore(wl, load_multicore_arch("quad128"), "none/split").ledger.to_json())


def _run(data: dict):
    led = Ledger.from_json(json.dumps(data))
    return summarise(led, "x", "x.json", load_table("horowitz45"), 2)


def test_utilization_and_roofs_are_the_chips(quad: dict) -> None:
    run = _run(quad)
    assert run.pes == 4 * 128 * 128 and run.peak_ops_per_cycle == 2 * 4 * 128 * 128
    assert run.dram_bytes_per_cycle == 4 * 64.0  # quad128: four channels of 64 B/cycle
    big = next(v for v in run.layers if v.scope.endswith("big"))
    util = run.utilization(big)
    assert util == pytest.approx(big.macs / (4 * 128 * 128 * big.cycles["compute"]))
    assert 0.2 < util < 1.0  # one core's PEs gave more than 1 here, shown as 100%
    assert big.ops_per_cycle <= run.peak_ops_per_cycle  # under its roof
    assert run.arch_summary.startswith("quad128: 4 MAC cores (65,536 PEs), the first npu128 (128x128")


def test_a_ledger_from_before_the_pe_count_uses_rows_x_cols(quad: dict) -> None:
    old = copy.deepcopy(quad)
    for c in old["meta"]["multicore"]["arch"]["cores"]:
        c.pop("pes", None)
    assert _run(old).pes == _run(quad).pes
    nest = copy.deepcopy(old)
    nest["meta"]["multicore"]["arch"]["cores"][0]["nest"] = "some_core"  # a loop-nest core: rows x cols is not it
    run = _run(nest)
    assert run.pes is None and run.peak_ops_per_cycle is None
    assert all(run.utilization(v) is None for v in run.layers)


def test_a_loop_nest_chip_counts_its_arrays_pes() -> None:
    from npukit.sim.stream_io import load_stream_hardware

    march = load_stream_hardware(ROOT / "tests" / "data" / "stream_hw" / "simba.yaml", warn=False)
    res = simulate_multicore(Workload("w", [Layer("g", 64, 64, 64)]), march, "none/split")
    run = _run(json.loads(res.ledger.to_json()))
    assert run.pes == sum(march.cores[i].macs_per_cycle for i in march.mac_cores) == 36 * 4 * 4 * 8 * 8


def test_the_report_states_the_chips_roofs(tmp_path: Path, quad: dict) -> None:
    p = tmp_path / "q.ledger.json"
    p.write_text(json.dumps(quad))
    assert main(["report", str(p), "--out", str(tmp_path / "r")]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "peak 131,072 ops/cycle, DRAM 256 bytes/cycle" in md
    assert "256 DRAM bytes/cycle (all channels)" in md and "; 64 DRAM bytes/cycle" not in md


def test_a_loop_nest_chips_layers_have_their_macs_and_utilization() -> None:
    from npukit.sim.stream_io import load_stream_hardware

    march = load_stream_hardware(ROOT / "tests" / "data" / "stream_hw" / "eyeriss_like_dual_core.yaml", warn=False)
    wl = Workload("w", [Layer("g", 64, 96, 128)])
    led = json.loads(simulate_multicore(wl, march, "none/split").ledger.to_json())
    assert not any(c["component"] == "pe_array" for c in led["counts"])  # a loop-nest core records MAC energy only
    run = _run(led)
    g = next(v for v in run.layers if v.scope.endswith("/g"))
    assert g.macs == 64 * 96 * 128
    assert 0 < run.utilization(g) <= 1 and g.ops_per_cycle <= run.peak_ops_per_cycle
