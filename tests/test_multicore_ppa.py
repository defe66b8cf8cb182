"""Area, leakage and power of a multi-core chip (``npukit.sim.multicore_ppa``): one core is the single-core PPA
exactly; N cores are N times a core plus the NoC and the shared memory; a loop-nest core has no area model."""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import load_arch, load_table, resnet18, simulate
from npukit.sim.area import DEFAULT_AREA, arch_area, node_scale, sram_area
from npukit.sim.multicore import homogeneous, load_multicore_arch, single_core
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.stream_io import load_stream_hardware
from npukit.sim.workload import gemm

HW = Path(__file__).parent / "data" / "stream_hw"


def test_one_core_has_the_single_core_ppa() -> None:
    arch, wl = load_arch("npu128"), resnet18()
    ref = simulate(wl, arch).ledger.meta["ppa"]
    got = simulate_multicore(wl, single_core(arch), "none/split").ledger.meta["ppa"]
    assert got["area_um2_by_component"] == ref["area_um2_by_component"]
    for k in ("area_mm2", "leakage_mw", "energy_dynamic_pj", "energy_static_pj", "power_avg_w", "power_peak_w",
              "gops_per_mm2", "tops_per_w"):
        assert got[k] == pytest.approx(ref[k], rel=1e-12), k


def test_n_cores_are_n_times_a_core_plus_noc_and_shared_memory() -> None:
    arch = load_arch("npu128")
    tab = load_table(arch.energy_table)
    one = arch_area(arch, tab)
    res = simulate_multicore(gemm(256, 256, 256), homogeneous(arch, 4, shared_kib=2048), "none/split")
    ppa = res.ledger.meta["ppa"]
    rules = tab.area or DEFAULT_AREA  # the table's [area] rules
    s = node_scale(rules, tab.technology_nm)
    shared_um2, shared_mw = sram_area(rules, 2048 * 1024)
    assert ppa["area_mm2"] * 1e6 == pytest.approx(4 * one.um2 + 4 * rules["noc_um2_per_core"] * s + shared_um2 * s,
                                                  rel=1e-12)
    assert ppa["leakage_mw"] == pytest.approx(4 * one.leakage_mw + 4 * rules["noc_mw_per_core"] + shared_mw, rel=1e-12)
    t = res.total_cycles / (arch.clock_ghz * 1e9)
    assert ppa["energy_static_pj"] == pytest.approx(ppa["leakage_mw"] * t * 1e9, rel=1e-12)
    assert ppa["energy_dynamic_pj"] == pytest.approx(res.energy_pj, rel=1e-12)
    assert ppa["power_peak_w"] >= ppa["power_avg_w"] > 0


def test_cores_of_another_arch_get_their_own_components() -> None:
    het = load_multicore_arch("hetero4")  # 3 x npu128 MAC cores, one npu32 SIMD core
    ppa = simulate_multicore(gemm(64, 64, 64), het, "none/split").ledger.meta["ppa"]
    by = ppa["area_um2_by_component"]
    simd = het.cores[het.simd_cores[0]]
    assert by["pe_array"] == pytest.approx(3 * arch_area(load_arch("npu128")).by_component()["pe_array"][0])
    assert by[f"pe_array.{simd.name}"] == pytest.approx(arch_area(simd.arch).by_component()["pe_array"][0])
    assert "shared_memory" in by and "noc" in by


def test_mac_cores_without_a_vector_unit_have_no_lanes(tmp_path) -> None:
    arch = tmp_path / "novec.toml"
    arch.write_text('[[core]]\narch = "npu128"\ncount = 2\nvector_unit = false\n[[core]]\narch = "npu32"\n'
                    'kind = "simd"\n')
    by = simulate_multicore(gemm(64, 64, 64), load_multicore_arch(arch), "none/split").ledger.meta["ppa"][
        "area_um2_by_component"]
    assert "vector_unit" not in by and "vector_unit.core2" in by


def test_a_loop_nest_core_has_no_area_model() -> None:
    m = load_stream_hardware(HW / "eyeriss_like_dual_core.yaml", "latency", warn=False)
    assert "ppa" not in simulate_multicore(gemm(64, 32, 48), m, "none/split").ledger.meta


def test_the_cli_prints_the_chips_area(tmp_path, capsys) -> None:
    assert main(["sim", "--arch", "quad128", "--workload", "gemm:M=256,N=256,K=256", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("area "))
    assert "cores, NoC and shared memory" in line and "perf/W" in line
