"""A multi-core arch whose MAC cores have no vector unit: vector ops run on the simd core, their operands and result
crossing the bus (``MultiCoreArch.bus``), in the ledger, the rows and the meta; the TOML form reads it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from npukit.sim import ConfigError, Layer, VectorOp, Workload, load_arch
from npukit.sim.arch import VectorUnit
from npukit.sim.interconnect import Interconnect
from npukit.sim.multicore import Core, MultiCoreArch, load_multicore_arch
from npukit.sim.multicore_sim import simulate_multicore


def _arch(bus: Interconnect | None) -> MultiCoreArch:
    mac = load_arch("npu32")
    simd = replace(mac, vector=VectorUnit(lanes=64, bits=16))
    cores = tuple(Core(mac, "mac", f"core{i}", vector_unit=False) for i in range(2)) + (Core(simd, "simd", "simd2"),)
    return MultiCoreArch("two+simd", cores, Interconnect(4.0, 0.0, 0.0), bus=bus, objective="latency")


def _wl() -> Workload:
    return Workload("g-relu-add", [Layer("G", 64, 32, 32), VectorOp("Relu", "other", 64 * 32),
                                   VectorOp("Add", "add", 64 * 32, inputs=2)])


def test_vector_ops_cross_the_bus_to_the_simd_core() -> None:
    bus = Interconnect(16.0, 3.0, 0.5, "bus")
    res = simulate_multicore(_wl(), _arch(bus), "none/split")
    rows = {r["name"]: r for r in res.rows()}
    # bf16 at the simd core: the relu moves its input in and its result back, the add two inputs and its result
    assert rows["Relu"]["bus_bytes"] == 2 * 64 * 32 * 2
    assert rows["Add"]["bus_bytes"] == 3 * 64 * 32 * 2
    assert rows["G"]["bus_bytes"] == 0
    assert rows["Relu"]["core_ids"] == "2"
    # the bus is slower than the 64-lane unit here: the op lasts its transfer (bytes / 16 per cycle + latency)
    assert rows["Add"]["cycles"] == pytest.approx(3 * 64 * 32 * 2 / 16 + 3)
    assert res.ledger.meta["multicore"]["bus_bytes"] == 5 * 64 * 32 * 2
    # priced per bit at the bus's energy, not the links'
    assert rows["Relu"]["energy_bus_pj"] == pytest.approx(2 * 64 * 32 * 16 * 0.5)
    assert "energy_interconnect_pj" not in rows["Relu"] or rows["Relu"]["energy_interconnect_pj"] == 0
    # the simd core is on the timeline
    assert any(c == 2 and name == "Add" for c, _, _, name in res.timeline)


def test_without_a_bus_the_links_carry_them() -> None:
    res = simulate_multicore(_wl(), _arch(None), "none/split")
    rows = {r["name"]: r for r in res.rows()}
    hops = 4 / 3  # the mean hops of a 3-core mesh (side 2)
    assert rows["Relu"]["bus_bytes"] == 0
    assert rows["Relu"]["interconnect_bytes"] == pytest.approx(2 * 64 * 32 * 2 * hops)
    assert rows["Relu"]["cycles"] == pytest.approx(2 * 64 * 32 * 2 * hops / 4)  # the 4 B/cycle links


def test_vectorless_core_needs_a_simd_core(tmp_path) -> None:
    mac = load_arch("npu32")
    with pytest.raises(ConfigError, match="simd core"):
        MultiCoreArch("x", (Core(mac, "mac", "c0", vector_unit=False),))
    p = tmp_path / "m.toml"
    p.write_text('[[core]]\narch = "npu32"\ncount = 2\nvector_unit = false\n[[core]]\narch = "npu32"\nkind = "simd"\n'
                 '[bus]\nbandwidth_bytes_per_cycle = 16.0\nlatency_cycles = 0\nenergy_pj_per_bit = 0.0\n')
    m = load_multicore_arch(p)
    assert [c.vector_unit for c in m.cores] == [False, False, True] and m.bus.bandwidth_bytes_per_cycle == 16.0
    p.write_text('[[core]]\narch = "npu32"\nvector_unit = "no"\n')
    with pytest.raises(ConfigError, match="vector_unit"):
        load_multicore_arch(p)
