"""The Ledger: scopes, merging, energy = ledger x table, breakdowns, lossless JSON."""

import pytest

from npukit.sim import Ledger, LedgerError, load_table


def _ledger() -> Ledger:
    led = Ledger(meta={"producer": "test"})
    led.declare("psum_buffer", kind="sram", capacity_bytes=32768)
    with led.scope("resnet18"):
        with led.scope("layer3.0.conv2"):
            led.record("pe_array", "mac", (8, 8, 32), 1000)
            led.record("psum_buffer", "sram_read", 32, 10)
            led.add_cycles(123)
        with led.scope("fc"):
            led.record("pe_array", "mac", (8, 8, 32), 500)
            led.add_cycles(7, kind="stall")
    return led


def test_scopes_and_counts():
    led = _ledger()
    assert led.scopes() == ["resnet18/layer3.0.conv2", "resnet18/fc"]
    assert led.count("pe_array", "mac") == 1500
    assert led.count(scope_prefix="resnet18/fc") == 500
    assert led.total_cycles() == 130
    assert led.total_cycles("stall") == 7
    assert led.cycles_by_scope(depth=1) == {"resnet18": 130}


def test_energy_and_breakdowns():
    led = _ledger()
    t = load_table("horowitz45")
    psum = 10 * 32 * (20.0 / 64)  # 32 KB SRAM: 20 pJ per 64-bit access (Horowitz 2014)
    macs = 1500 * 0.3
    assert led.energy(t) == pytest.approx(psum + macs)
    assert led.energy_by(t, "component") == pytest.approx({"pe_array": macs, "psum_buffer": psum})
    by_scope = led.energy_by(t, "scope")
    assert by_scope["resnet18/fc"] == pytest.approx(150.0)
    assert led.energy_by(t, "scope", depth=1) == pytest.approx({"resnet18": psum + macs})
    m = led.energy_matrix(t, depth=2)
    assert m["resnet18/layer3.0.conv2"]["psum_buffer"] == pytest.approx(psum)


def test_merge_adds_counts_and_prefixes():
    a, b = _ledger(), _ledger()
    a.merge(b)
    assert a.count("pe_array") == 3000
    assert a.total_cycles() == 260
    c = Ledger().merge(_ledger(), prefix="run2")
    assert c.scopes()[0] == "run2/resnet18/layer3.0.conv2"
    with pytest.raises(LedgerError, match="declared twice"):
        bad = Ledger()
        bad.declare("psum_buffer", kind="sram", capacity_bytes=1)
        bad.merge(_ledger())


def test_json_round_trip_is_lossless(tmp_path):
    led = _ledger()
    led.record("x", "int_add", 17, 2**62 + 1)  # beyond float precision
    led.record("x", "int_add", 5, 0.1 + 0.2)
    path = led.save(tmp_path / "l.json")
    back = Ledger.load(path)
    assert back == led
    assert back.count("x") == led.count("x")
    assert back.to_json() == led.to_json()


def test_bad_input():
    led = Ledger()
    with pytest.raises(LedgerError, match="count"):
        led.record("a", "mac", (8, 8, 32), -1)
    with pytest.raises(LedgerError, match="bits"):
        led.record("a", "mac", (8, 0, 32), 1)
    with pytest.raises(LedgerError, match="not an npukit ledger"):
        Ledger.from_json('{"a": 1}')
    with pytest.raises(LedgerError, match="not valid JSON"):
        Ledger.from_json("{")
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger.load("/nonexistent/ledger.json")
    with pytest.raises(LedgerError, match="is a folder"):
        Ledger.load("/")
    with pytest.raises(LedgerError, match="not a regular file"):  # it said "does not exist"
        Ledger.load("/dev/null")
