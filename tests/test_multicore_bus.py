"""A multi-core arch whose MAC cores have no vector unit: vector ops run on the simd core, their operands and result
crossing the bus (``MultiCoreArch.bus``) inside a fused group and DRAM outside one, in the ledger, the rows and the
meta; the TOML form reads it."""

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
    return Workload("g-relu-g-add", [Layer("G1", 64, 32, 32), VectorOp("Relu", "other", 64 * 32),
                                     Layer("G2", 64, 32, 32), VectorOp("Add", "add", 64 * 32, inputs=2)])


def test_fused_vector_ops_cross_the_bus_to_the_simd_core() -> None:
    bus = Interconnect(16.0, 3.0, 0.5, "bus")
    res = simulate_multicore(_wl(), _arch(bus), "chain/split")
    rows = {r["name"]: r for r in res.rows()}
    # G1 -> Relu -> G2 fused, and the add on G2's output with them (its epilogue)
    assert rows["Relu"]["step"] == rows["Add"]["step"] == "fused"
    # bf16 at the simd core: inside the group the relu's input comes in and its result goes back over the bus
    assert rows["Relu"]["bus_bytes"] == 2 * 64 * 32 * 2 and rows["Relu"]["dram_bytes"] == 0
    assert rows["G1"]["bus_bytes"] == 0
    assert rows["Relu"]["core_ids"] == "2"
    # the bus is slower than the 64-lane unit here: the op lasts its transfer (bytes / 16 per cycle + latency)
    assert rows["Relu"]["cycles"] == pytest.approx(2 * 64 * 32 * 2 / 16 + 3)
    # the add, the group's last op, receives its two inputs over the bus and writes its result to DRAM; G2's output
    # stays on chip for it
    assert rows["Add"]["bus_bytes"] == 2 * 64 * 32 * 2 and rows["Add"]["dram_bytes"] == 64 * 32 * 2
    assert res.ledger.meta["multicore"]["bus_bytes"] == 4 * 64 * 32 * 2
    # priced per bit at the bus's energy, not the links'
    assert rows["Relu"]["energy_bus_pj"] == pytest.approx(2 * 64 * 32 * 16 * 0.5)
    assert "energy_interconnect_pj" not in rows["Relu"] or rows["Relu"]["energy_interconnect_pj"] == 0
    # the simd core is on the timeline
    assert any(c == 2 and name == "Relu" for c, _, _, name in res.timeline)


def test_unfused_vector_ops_go_through_dram() -> None:
    """Not fused with its producer or consumer, a vector op on the simd core reads its inputs from and writes its
    result to DRAM, as a GEMM of that schedule does, and nothing crosses the bus."""
    arch = _arch(Interconnect(16.0, 3.0, 0.5, "bus"))
    port = arch.cores[2].arch.dram_bandwidth_bytes_per_cycle
    res = simulate_multicore(_wl(), arch, "none/split")
    rows = {r["name"]: r for r in res.rows()}
    for name, tensors in (("Relu", 2), ("Add", 3)):
        assert rows[name]["bus_bytes"] == 0
        assert rows[name]["dram_bytes"] == tensors * 64 * 32 * 2
        lanes = rows[name]["compute_cycles"]
        assert lanes < tensors * 64 * 32 * 2 / port  # the port is the bound here
        assert rows[name]["cycles"] == pytest.approx(tensors * 64 * 32 * 2 / port)
    assert res.ledger.meta["multicore"]["bus_bytes"] == 0
    # fused, the relu's data never touches DRAM, and G2 writes no output there (the add reads it on chip)
    fused = {r["name"]: r for r in simulate_multicore(_wl(), arch, "chain/split").rows()}
    assert fused["Relu"]["dram_bytes"] == 0 and fused["Relu"]["energy_total_pj"] < rows["Relu"]["energy_total_pj"]
    assert fused["G2"]["dram_bytes"] < rows["G2"]["dram_bytes"]


def test_without_a_bus_the_links_carry_them() -> None:
    # bytes and time counted once, energy once per hop, as a GEMM share's transfer (before, a vector op's bytes and
    # time were multiplied by the hops and a GEMM's not: the run's interconnect bytes added two units)
    arch = _arch(None)
    arch = replace(arch, interconnect=replace(arch.interconnect, energy_pj_per_bit=0.5))
    res = simulate_multicore(_wl(), arch, "chain/split")
    rows = {r["name"]: r for r in res.rows()}
    hops = 4 / 3  # the mean hops of a 3-core mesh (side 2)
    moved = 2 * 64 * 32 * 2  # its input in, its result out, 16-bit
    assert rows["Relu"]["bus_bytes"] == 0
    assert rows["Relu"]["interconnect_bytes"] == pytest.approx(moved)
    assert rows["Relu"]["cycles"] == pytest.approx(moved / 4)  # the 4 B/cycle links
    assert rows["Relu"]["energy_interconnect_pj"] == pytest.approx(moved * 8 * 0.5 * hops)


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


def test_groups_take_their_epilogue_only_with_a_simd_core() -> None:
    from npukit.sim.schedule import make_schedule

    wl = _wl()
    plain = make_schedule(wl, "chain", "split")
    assert [(s.first, s.last, s.fused) for s in plain.steps] == [(0, 2, True), (3, 3, False)]
    epi = make_schedule(wl, "chain", "split", epilogue=True)
    assert [(s.first, s.last, s.fused) for s in epi.steps] == [(0, 3, True)]
    # a vector op on another tensor (here a quarter of G2's output) is not its epilogue
    other = Workload("x", wl.layers[:3] + [VectorOp("Add", "add", 16 * 32, inputs=2)])
    assert [(s.first, s.last) for s in make_schedule(other, "chain", "split", epilogue=True).steps] == [(0, 2), (3, 3)]
