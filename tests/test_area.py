"""Area, leakage and power: the cited rules by hand, the tables' [area], the ledger, CSV and sweep rows."""

from __future__ import annotations

import csv
import json

import pytest

from npukit.cli import main
from npukit.sim import Ledger, load_arch, load_table, simulate
from npukit.sim.area import DEFAULT_AREA, arch_area, component_areas, zigzag_area_overrides
from npukit.sim.energy import EnergyTable
from npukit.sim.errors import EnergyTableError
from npukit.sim.power import run_power
from npukit.workloads import load_workload


def by_name(arch, **kw):
    return {c.component: c for c in component_areas(arch, **kw)}


def test_aladdin_mac_and_cacti_sram_by_hand():
    arch = load_arch("npu32").with_(**{"bits.input": 8, "bits.weight": 8, "bits.pe_psum": 32})
    c = by_name(arch, rules=DEFAULT_AREA, technology_nm=40)
    # Aladdin 40 nm: 32x32 multiplier 6,350 um^2 scaled by (8*8)/(32*32), plus a 32-bit adder 278 um^2
    assert c["pe_array"].area_um2 == pytest.approx(6350 * 64 / 1024 + 278)
    assert c["pe_array"].leakage_mw == pytest.approx(0.08 * 64 / 1024 + 2.4e-3)
    assert c["pe_array"].count == arch.rows * arch.cols
    # CACTI via Accelergy: 0.94 um^2 per bit, linear in capacity
    kib = arch.sram_kib.ifmap
    assert c["ifmap_sram"].area_um2 == pytest.approx(0.94 * kib * 1024 * 8)
    assert c["ifmap_sram"].leakage_mw == pytest.approx(7.4e-6 * kib * 1024 * 8)
    # ideal area scaling to 45 nm; leakage unscaled
    c45 = by_name(arch, rules=DEFAULT_AREA, technology_nm=45)
    assert c45["ifmap_sram"].area_um2 == pytest.approx(c["ifmap_sram"].area_um2 * (45 / 40) ** 2)
    assert c45["ifmap_sram"].leakage_mw == c["ifmap_sram"].leakage_mw


def test_shipped_tables_carry_area_rules_and_sources():
    h = load_table("horowitz45")
    assert h.area["mult_um2_per_bit2"] * 64 == pytest.approx(282.0)  # Horowitz: 8-bit multiply 282 um^2
    assert h.area["adder_um2_per_bit"] * 32 == pytest.approx(137.0)  # 32-bit add 137 um^2
    assert "Horowitz" in h.sources()["area"]
    a = arch_area(load_arch("npu128"), h)
    parts = a.by_component()
    assert a.mm2 == pytest.approx(sum(um2 for um2, _ in parts.values()) / 1e6)
    assert parts["psum_buffer"][0] == pytest.approx(4 * parts["ofmap_sram"][0])  # 4096 vs 1024 KiB: 4x the area
    bigger = arch_area(load_arch("npu128").with_(rows=256), h)
    assert bigger.mm2 > a.mm2 and bigger.leakage_mw > a.leakage_mw


def test_component_area_overrides_and_bad_area_keys():
    data = json.loads(json.dumps({k: v for k, v in load_table("horowitz45").sections.items()}))
    data["components"] = {"ofmap_sram": {"sram_read": 0.1, "area_um2": 5.0, "leakage_mw": 0.5, "source": "test"}}
    tab = EnergyTable.from_dict(data)
    parts = arch_area(load_arch("npu32"), tab).by_component()
    assert parts["ofmap_sram"] == (5.0, 0.5)
    data["area"] = {"sram_um2_per_bit": -1, "source": "x"}
    with pytest.raises(EnergyTableError, match="area.sram_um2_per_bit"):
        EnergyTable.from_dict(data)
    data["area"] = {"sram_um2_per_bit": 1}
    with pytest.raises(EnergyTableError, match="area.source"):
        EnergyTable.from_dict(data)
    assert zigzag_area_overrides({"sram_2MB": {"area": 3.5}, "rf": {"size": 8}}, {"sram_2MB": "ifmap_sram"}) == {
        "ifmap_sram": {"area_um2": 3.5}}


def test_static_energy_is_leakage_times_time_and_power_adds_up():
    arch = load_arch("npu32")
    res = simulate(load_workload("resnet18"), arch)
    area = arch_area(arch)
    run, layers = run_power(res, area)
    assert run.static_pj == pytest.approx(area.leakage_mw * 1e9 * res.latency_s)
    assert run.dynamic_pj == pytest.approx(res.energy_pj)
    assert sum(p.static_pj for p in layers) == pytest.approx(run.static_pj)
    assert run.avg_w == pytest.approx((res.energy_pj + run.static_pj) / 1e12 / res.latency_s)
    assert run.peak_w == max(p.avg_w for p in layers) >= run.avg_w
    assert run.tops_per_w == pytest.approx(2 * res.macs / (res.energy_pj + run.static_pj) * 1e12 / 1e12)


def test_ledger_and_csv_carry_area_and_power_and_old_ledgers_load(tmp_path, capsys):
    assert main(["sim", "--arch", "npu32", "--workload", "gemm:M=64,N=64,K=64", "--out", str(tmp_path), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "mm^2" in printed and "leakage" in printed and "TOP/s/W" in printed
    led_path = next(tmp_path.glob("*.ledger.json"))
    led = Ledger.load(led_path)
    ppa = led.meta["ppa"]
    assert ppa["area_mm2"] > 0 and ppa["energy_static_pj"] > 0 and ppa["power_peak_w"] >= ppa["power_avg_w"] > 0
    assert any("energy_static_pj" in facts for facts in led.layers.values())
    rows = list(csv.DictReader(next(tmp_path.glob("*.csv")).open()))
    for col in ("area_mm2", "energy_static_pj", "energy_dynamic_pj", "power_avg_w", "power_peak_w", "gops_per_mm2",
                "tops_per_w"):
        assert float(rows[0][col]) > 0, col
    assert main(["report", str(led_path), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Power and area" in md and f"{ppa['area_mm2']:,.3f}" in md
    old = json.loads(led_path.read_text())
    old["meta"].pop("ppa")
    for facts in old.get("layers", {}).values():
        facts.pop("energy_static_pj", None)
        facts.pop("power_avg_w", None)
    assert Ledger.from_dict(old).total_cycles() == led.total_cycles()
