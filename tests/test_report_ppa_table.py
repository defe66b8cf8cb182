"""``npukit report --table T`` prices the "Power and area" section with T, as it does the totals: before, the totals
used T and the section the simulation's own table (a ledger of 126,392.851 uJ on horowitz45 was 135,508.635 uJ in
the totals on aladdin40 and still 126,392.851 uJ of dynamic energy below them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import Ledger


def _table(md: str, heading: str) -> list[str]:
    rows = md.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return [line for line in rows.splitlines() if line.startswith("| ") and not line.startswith("| ledger")]


@pytest.mark.parametrize("arch", ["npu32", pytest.param("quad128", marks=pytest.mark.slow)])
def test_the_power_section_uses_the_reports_table(tmp_path: Path, arch: str) -> None:
    assert main(["sim", "--arch", arch, "--workload", "gemm:M=128,N=128,K=256", "--out", str(tmp_path / "s"),
                 "--quiet"]) == 0
    led_path = next((tmp_path / "s").glob("*.ledger.json"))
    ppa = Ledger.load(led_path).meta["ppa"]
    for table in ("", "aladdin40"):
        out = tmp_path / f"r{table}"
        assert main(["report", str(led_path), "--out", str(out), *(["--table", table] if table else [])]) == 0
        md = (out / "report.md").read_text()
        total = _table(md, "Totals")[0].split(" | ")[1]
        power = _table(md, "Power and area")[0].split(" | ")
        assert power[3] == total  # dynamic energy = the totals' energy, whichever table
        assert power[1] == f"{ppa['area_mm2']:,.3f}"
        assert float(power[4].replace(",", "")) == pytest.approx(ppa["energy_static_pj"] / 1e6, rel=1e-3)
        if not table:  # the simulation's table: the stored figures as they are
            assert power[5] == f"{ppa['power_avg_w']:,.3f}"
        else:
            dyn = float(total.replace(",", "")) * 1e6
            assert abs(dyn - ppa["energy_dynamic_pj"]) > 0.01 * ppa["energy_dynamic_pj"]  # the tables do differ
            assert float(power[5].replace(",", "")) > 0 and float(power[8].rstrip(" |").replace(",", "")) > 0


@pytest.mark.slow
def test_the_repriced_peak_does_not_depend_on_depth(tmp_path: Path) -> None:
    assert main(["sim", "--arch", "quad128", "--workload", "llama3-8b-layer:seq=32", "--out", str(tmp_path / "s"),
                 "--quiet"]) == 0
    led_path = next((tmp_path / "s").glob("*.ledger.json"))
    peaks = set()
    for depth in ("1", "2", "3"):
        out = tmp_path / f"r{depth}"
        assert main(["report", str(led_path), "--out", str(out), "--table", "aladdin40", "--depth", depth]) == 0
        peaks.add(_table((out / "report.md").read_text(), "Power and area")[0].split(" | ")[6])
    assert len(peaks) == 1
