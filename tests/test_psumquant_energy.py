"""``npukit experiment psumquant --energy-only``: the NPU energy table alone, checked against simulate()."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from npukit.cli import main
from npukit.sim import llama3_8b_layer, load_arch, resnet18, simulate


def test_energy_only_writes_the_table_and_matches_simulate(tmp_path: Path, capsys) -> None:
    out = tmp_path / "e"
    assert main(["experiment", "psumquant", "--energy-only", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "paper: 45%" in text and "lower on-chip" in text and "mapping fixed" in text
    assert sorted(p.name for p in out.iterdir()) == ["energy.csv", "energy_assumptions.txt", "energy_breakdown.png",
                                                      "energy_summary.md"]
    rows = list(csv.DictReader((out / "energy.csv").open()))
    assert {(r["workload"], r["mapping"]) for r in rows} == {
        (w, m) for w in ("resnet18", "llama3-8b-layer", "llama3-8b-layer-decode") for m in ("search", "fixed")}
    arch = load_arch("npu128")
    for label, wl in (("resnet18", resnet18()), ("llama3-8b-layer-decode", llama3_8b_layer(phase="decode"))):
        for mapping in ("search", "fixed"):
            a = arch.with_(mapping=mapping)
            r32, r8 = simulate(wl, a), simulate(wl, a.with_(**{"bits.psum_buffer": 8}))
            row = next(r for r in rows if (r["workload"], r["mapping"], r["bits"]) == (label, mapping, "8"))
            assert math.isclose(float(row["reduction_vs_32"]), 1 - r8.energy_pj / r32.energy_pj, rel_tol=1e-9)
            assert math.isclose(float(row["reduction_onchip_vs_32"]),
                                1 - r8.energy_onchip_pj / r32.energy_onchip_pj, rel_tol=1e-9)
            assert float(row["energy_psum_quantizer_pj"]) > 0  # the psum path is charged below 32 bits
    full = next(r for r in rows if (r["workload"], r["mapping"], r["bits"]) == ("resnet18", "fixed", "32"))
    assert float(full["energy_psum_quantizer_pj"]) == 0.0
    assert int(full["cycles"]) == 441_581 + simulate(resnet18(), arch.with_(mapping="fixed")).stall_cycles
    assumptions = (out / "energy_assumptions.txt").read_text()
    assert "psum path charged" in assumptions and "on-chip energy = everything but DRAM" in assumptions
