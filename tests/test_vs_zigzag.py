"""npukit on ZigZag's tpu_like restated (examples/zigzag_tpu_like*.toml) against ZigZag's own energies.

The golden numbers are ZigZag 3.9.1's (pip zigzag-dse==3.9.1 plus six, in its own virtualenv): its
bundled resnet18.onnx on its bundled tpu_like.yaml accelerator and mapping, ``opt="energy"``, summed
over the 21 layers from the per-layer ``*_complete.json`` files it dumps (pJ; benchmarks/bench_vs_zigzag.py
produces them and prints the comparison). ZigZag's total: 1,860,446,855.088 pJ, 4,106,119 cycles.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.sim import load_arch, resnet18, simulate

ZIGZAG_PJ = {  # (level, operand) -> pJ
    ("mac", ""): 72_562_933.8,
    ("registers", "W"): 173_446_464.3,  # rf_128B
    ("registers", "O"): 77_624_779.0,  # rf_2B
    ("sram", "I"): 104_986_590.6,  # sram_2MB
    ("sram", "O"): 9_001_937.4,
    ("dram", "W"): 1_021_904_800.0,
    ("dram", "I"): 167_977_600.0,
    ("dram", "O"): 232_941_750.0,
}
ZIGZAG_TOTAL_PJ = 1_860_446_855.088
ARCH = Path(__file__).resolve().parent.parent / "examples" / "zigzag_tpu_like.toml"


@pytest.fixture(scope="module")
def result():
    return simulate(resnet18(), load_arch(ARCH))


def _levels(split: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for (lvl, _), e in split.items():
        lvl = "mac" if lvl == "logic" else lvl  # ZigZag's MAC energy includes the accumulate
        out[lvl] = out.get(lvl, 0.0) + e
    return out


def test_total_and_level_shares_match_zigzag(result) -> None:
    split = result.energy_by_level()
    total = result.energy_pj
    assert sum(split.values()) == pytest.approx(total, rel=1e-12)
    assert total == pytest.approx(ZIGZAG_TOTAL_PJ, rel=0.15)  # the cross-check's target
    ours, theirs = _levels(split), _levels(ZIGZAG_PJ)
    for lvl in ("mac", "registers", "sram", "dram"):
        share, gold = 100 * ours.get(lvl, 0.0) / total, 100 * theirs[lvl] / ZIGZAG_TOTAL_PJ
        assert share == pytest.approx(gold, abs=5.0), lvl


def test_what_both_count_alike_is_equal(result) -> None:
    split = result.energy_by_level()
    # every MAC at 0.04 pJ; each weight read from DRAM once and written into rf_128B once, read
    # there by every MAC; every output written to DRAM once at 750 pJ per 64 bits
    for key in (("mac", ""), ("registers", "W"), ("dram", "W"), ("dram", "O")):
        assert split[key] == pytest.approx(ZIGZAG_PJ[key], rel=1e-3), key
    # both read and write the psum register once per MAC; ZigZag also counts its read-outs (+1.8%)
    assert split[("registers", "O")] == pytest.approx(ZIGZAG_PJ[("registers", "O")], rel=0.03)
    # npukit fetches the zero-padded input (SCALE-Sim's convention), ZigZag the unpadded one: 5-65%
    # more per layer (most on layer4's 7x7 maps padded to 9x9), 11.8% over the network
    assert 1.0 < split[("dram", "I")] / ZIGZAG_PJ[("dram", "I")] < 1.15
    assert ("sram", "W") not in split or split[("sram", "W")] == 0.0  # tpu_like's weights skip the SRAM
