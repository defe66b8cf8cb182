"""Golden-number tests of the energy tables (ZigZag style: pytest.approx on known values)."""

import math

import pytest

from npukit.sim import EnergyTableError, load_table
from npukit.sim.energy import EnergyTable


@pytest.fixture(scope="module")
def h45() -> EnergyTable:
    return load_table("horowitz45")


@pytest.fixture(scope="module")
def a40() -> EnergyTable:
    return load_table("aladdin40")


def test_horowitz_int8_mac_with_32bit_accumulate(h45):
    # Horowitz ISSCC 2014: 8-bit multiply 0.2 pJ + 32-bit add 0.1 pJ
    assert h45.mac(8, 8, 32) == pytest.approx(0.2 + 0.1)
    assert h45.action_energy("mac", (8, 8, 32)) == pytest.approx(0.3)


def test_horowitz_adder_points_and_linearity(h45):
    assert h45.int_add(8) == pytest.approx(0.03)
    assert h45.int_add(32) == pytest.approx(0.1)
    # linear: equal steps for equal width increments
    assert h45.int_add(24) - h45.int_add(16) == pytest.approx(h45.int_add(16) - h45.int_add(8))


def test_multiplier_is_quadratic(h45, a40):
    for t in (h45, a40):
        assert t.int_mult(16, 16) == pytest.approx(4 * t.int_mult(8, 8))
        assert t.int_mult(8, 16) == pytest.approx(2 * t.int_mult(8, 8))


def test_aladdin_16bit_mac_matches_accelergy_exercise(a40):
    # docs/references.md: 0.0857*16/32 + 8.63*(16/32)^2 = 2.20 pJ (Accelergy ERT.yaml mac_random)
    assert a40.mac(16, 16, 16) == pytest.approx(2.20, abs=0.005)
    assert a40.int_add(32) == pytest.approx(0.0857)
    assert a40.int_mult(32, 32) == pytest.approx(8.63)
    assert a40.action_energy("reg_write", (10,)) == pytest.approx(0.09)


def test_sram_passes_through_cited_points(h45):
    for cap, pj in ((8192, 10.0), (32768, 20.0), (1 << 20, 100.0)):
        assert h45.action_energy("sram_read", (64,), {"capacity_bytes": cap}) == pytest.approx(pj)
    # between the points: a power law, so monotone and geometric-mean at the log midpoint
    mid = math.sqrt(8192 * 32768)
    assert h45.sram_bit(mid) * 64 == pytest.approx(math.sqrt(10.0 * 20.0))
    assert h45.sram_bit(4096) < h45.sram_bit(8192) < h45.sram_bit(65536) < h45.sram_bit(4 << 20)


def test_dram_and_float(h45):
    assert h45.action_energy("dram_read", (64,)) == pytest.approx(1950.0)
    assert h45.action_energy("fp_add", (32,)) == pytest.approx(0.9)
    assert h45.action_energy("fp_mult", (16,)) == pytest.approx(1.1)
    assert h45.action_energy("fp_mac", (32,)) == pytest.approx(3.7 + 0.9)


def test_every_section_cites_a_source(h45, a40):
    for t in (h45, a40):
        for sec, src in t.sources().items():
            assert len(src) > 10, sec


def _table_text(**changes: str) -> str:
    from importlib import resources

    text = resources.files("npukit.sim.tables").joinpath("horowitz45.toml").read_text()
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    return text


def test_user_table_from_path(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(_table_text(**{"pj_per_bit2 = 0.003125": "pj_per_bit2 = 0.00625"}))
    t = load_table(str(p))
    assert t.int_mult(8, 8) == pytest.approx(0.4)


@pytest.mark.parametrize(
    "old,new,needle",
    [
        ("pj_per_bit2 = 0.003125", "pj_per_bit2 = -0.003125", "int_mult.pj_per_bit2"),
        ("pj_per_bit2 = 0.003125", "pj_per_bit2x = 0.003125", "int_mult.pj_per_bit2x"),
        ("[fp32_mult]\npj = 3.7", "[fp32_mult]\n", "fp32_mult.pj"),
        ('name = "horowitz45"', 'name = "horowitz45"\nvoltage = 0.9', "voltage"),
    ],
)
def test_bad_tables_name_the_key(tmp_path, old, new, needle):
    p = tmp_path / "bad.toml"
    p.write_text(_table_text(**{old: new}))
    with pytest.raises(EnergyTableError, match=needle.replace(".", r"\.")):
        load_table(str(p))


def test_unknown_table_and_action(h45):
    with pytest.raises(EnergyTableError, match="unknown energy table"):
        load_table("nosuchtable")
    with pytest.raises(EnergyTableError, match="unknown action"):
        h45.action_energy("teleport", (8,))
    with pytest.raises(EnergyTableError, match="capacity_bytes"):
        h45.action_energy("sram_read", (8,))


_OWN = """
[components.filter_sram]
sram_read = 0.5
sram_write = 0.25
source = "a test: per-bit energies of one SRAM instance"
"""


def test_component_section_prices_only_its_component(tmp_path, h45):
    p = tmp_path / "own.toml"
    p.write_text(_table_text() + _OWN)
    t = load_table(str(p))
    attrs = {"capacity_bytes": 1048576}
    assert t.action_energy("sram_read", (8,), attrs, "filter_sram") == pytest.approx(4.0)
    assert t.action_energy("sram_write", (16,), attrs, "filter_sram") == pytest.approx(4.0)
    # other components and actions keep the table's rules
    assert t.action_energy("sram_read", (64,), attrs, "ifmap_sram") == pytest.approx(100.0)
    assert t.action_energy("dram_read", (64,), None, "filter_sram") == pytest.approx(1950.0)
    assert "components.filter_sram" in t.sources()


def test_register_reads_and_dram_writes(tmp_path, h45):
    # built-in tables: a flip-flop read is free, a DRAM write costs what a read does
    assert h45.action_energy("reg_read", (32,)) == 0.0
    assert h45.action_energy("dram_write", (64,)) == h45.action_energy("dram_read", (64,))
    p = tmp_path / "rw.toml"
    p.write_text(_table_text(**{"pj_per_bit = 0.009": "pj_per_bit = 0.009\nread_pj_per_bit = 0.004",
                                "pj_per_access = 1950.0": "pj_per_access = 1950.0\nwrite_pj_per_access = 2100.0"}))
    t = load_table(str(p))
    assert t.action_energy("reg_read", (10,)) == pytest.approx(0.04)
    assert t.action_energy("dram_write", (64,)) == pytest.approx(2100.0)
    assert t.action_energy("dram_read", (64,)) == pytest.approx(1950.0)


@pytest.mark.parametrize(
    "section,needle",
    [
        ("[components.x]\nteleport = 1.0\nsource = 's'", r"components\.x\.teleport"),
        ("[components.x]\nsram_read = -1.0\nsource = 's'", r"components\.x\.sram_read"),
        ("[components.x]\nsram_read = 'a'\nsource = 's'", r"components\.x\.sram_read"),
        ("[components.x]\nsram_read = 1.0", r"components\.x\.source"),
        ("components = 3", "components"),
    ],
)
def test_bad_component_sections_name_the_key(tmp_path, section, needle):
    p = tmp_path / "bad.toml"
    p.write_text(_table_text() + "\n" + section + "\n")
    with pytest.raises(EnergyTableError, match=needle):
        load_table(str(p))


def test_zigzag_tpu_like_table_restates_its_per_access_energies():
    # ZigZag 3.9.1 tpu_like.yaml: MAC 0.04 pJ; rf_128B 0.095 pJ per 8 bits; rf_2B 0.021 pJ per 16 bits;
    # sram_2MB 416.16 / 378.4 pJ per 2048 bits; dram 700 / 750 pJ per 64 bits; weights skip the SRAM
    from pathlib import Path

    t = load_table(str(Path(__file__).resolve().parent.parent / "examples" / "zigzag_tpu_like_energy.toml"))
    cap = {"capacity_bytes": 2 * 1024 * 1024}
    assert t.action_energy("mac", (8, 8, 16)) == pytest.approx(0.04)
    assert t.action_energy("int_add", (16,)) == 0.0
    for act in ("reg_read", "reg_write"):
        assert t.action_energy(act, (8,), None, "weight_registers") == pytest.approx(0.095)
        assert t.action_energy(act, (16,), None, "psum_registers") == pytest.approx(0.021)
        assert t.action_energy(act, (8,), None, "input_registers") == 0.0
    assert t.action_energy("sram_read", (2048,), cap, "ifmap_sram") == pytest.approx(416.16)
    assert t.action_energy("sram_write", (2048,), cap, "ofmap_sram") == pytest.approx(378.4)
    assert t.action_energy("sram_read", (8,), cap, "filter_sram") == 0.0
    assert t.action_energy("dram_read", (64,), None, "dram") == pytest.approx(700.0)
    assert t.action_energy("dram_write", (64,), None, "dram") == pytest.approx(750.0)
