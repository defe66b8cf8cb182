"""Multi-core cores described by a loop-nest Hardware (a ZigZag/Stream core YAML): a conv split over two
eyeriss-like cores gives, per core, the loop-nest model's numbers for that core's share."""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.sim import Workload, conv_layer, load_arch
from npukit.sim._multicore_cost import sub_layer
from npukit.sim._multicore_nest import dram_elements, map_share, mixed_spatial, nest_objective, on_chip, utilization, with_bits
from npukit.sim.interconnect import Dram, Interconnect
from npukit.sim.multicore import Core, MultiCoreArch
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.nest_mapper import map_layer
from npukit.sim.nest_sim import nest_layer
from npukit.sim.zigzag_io import load_zigzag_hardware

YAML = Path(__file__).resolve().parent.parent / "examples" / "zigzag" / "hardware" / "eyeriss_like.yaml"


def _two_eyeriss():
    hw = with_bits(load_zigzag_hardware(YAML), 8, 8, 8, 16)
    arch = load_arch("npu32").with_(dram_bandwidth_bytes_per_cycle=8.0)
    cores = tuple(Core(arch, "mac", f"core{i}", nest=hw) for i in range(2))
    return MultiCoreArch("eyeriss2", cores, Interconnect(4.0, 0.0, 0.0), dram=Dram(1, 8.0), objective="latency"), hw


def test_zigzag_dram_level_is_the_arch_dram() -> None:
    _, hw = _two_eyeriss()
    assert hw.memories[-1].name == "dram" and on_chip(hw).memories[-1].name == "sram_1M"
    assert on_chip(hw) is on_chip(hw)  # one object per hardware: the mapper caches by identity


def test_conv_split_over_two_nest_cores_gives_the_nest_numbers() -> None:
    march, hw = _two_eyeriss()
    conv = conv_layer("c", 18, 18, 3, 3, 16, 16, 1)  # 16 x 16 output, 16 -> 16 channels
    res = simulate_multicore(Workload("one-conv", [conv]), march, "none/split")
    row = res.rows()[0]
    dim = row["split"]
    assert dim in ("M", "N", "K") and row["cores"] == 2
    maps = [map_share(on_chip(hw), nest_layer(sub_layer(conv, dim, 2, i)), nest_objective("latency"))
            for i in range(2)]
    # the critical core's compute is its share's loop-nest cycles; its mapping is that share's
    assert row["compute_cycles"] == pytest.approx(max(m.cost.cycles for m in maps), abs=1)  # whole cycles
    assert row["core_mapping"].startswith("nest ")
    # the ledger's nest energy (array and on-chip memories) is the two shares' loop-nest energy, nothing else
    nest_pj = sum(e for comp, e in res.energy_components.items() if comp.startswith("nest:"))
    assert nest_pj == pytest.approx(sum(m.cost.energy_pj for m in maps), rel=1e-9)
    assert "nest:dram" not in res.energy_components
    # each share's operands come from DRAM once and its outputs go back once (8-bit operands); the operand both
    # cores need whole (an M-split's weights, an N-split's input) is one DRAM fetch multicast to both
    shares = [sub_layer(conv, dim, 2, i) for i in range(2)]
    elems = [dram_elements(s) for s in shares]
    whole = {"M": elems[1][1], "N": elems[1][0]}
    if dim != "K":
        assert row["dram_bytes"] == pytest.approx(sum(sum(e) for e in elems) - whole[dim])
    # and the array's MACs are the conv's
    assert sum(s.macs for s in shares) == conv.macs
    assert res.macs == conv.macs and res.utilization > 0


def test_mixed_unrolling_fills_more_of_the_array() -> None:
    # a ResNet-subgraph conv share (8 -> 4 channels of a 16 x 16 map, 3x3) on the 14 x 12 array: one loop per
    # array dimension keeps at most OX 16 -> 2 passes of 8 on 14 and C 8 on 12 (38%); two loops per dimension
    # (K4 x FX3 = 12 of 14, FY3 x C4 = 12 of 12) keep 86% busy, and the share takes fewer cycles
    _, hw = _two_eyeriss()
    hw = on_chip(with_bits(hw, 16, 16, 16, 16))
    nl = nest_layer(sub_layer(conv_layer("c", 18, 18, 3, 3, 8, 8, 1), "N", 2, 0))
    one = map_layer(hw, nl, None, "edp")
    mix = mixed_spatial(hw, nl)
    assert utilization(hw, nl, mix) == pytest.approx(144 / 168)
    assert utilization(hw, nl, mix) > utilization(hw, nl, one.spatial)
    best = map_share(hw, nl, "edp")
    assert best.cost.cycles < one.cost.cycles and best.spatial == map_layer(hw, nl, mix, "edp").spatial


def test_mixed_unrolling_takes_three_loops_where_they_fill_a_dimension() -> None:
    # a 144-wide array dimension on a 3x3 conv of 16 input channels: C16 x FX3 x FY3 = 144 fills it, which no pair
    # does (C16 x FX3 = 48, a third of it)
    from dataclasses import replace

    from npukit.sim.hardware import MacArray

    _, hw = _two_eyeriss()
    hw = on_chip(with_bits(hw, 8, 8, 8, 16))
    hw = replace(hw, array=MacArray({"D1": 4, "D2": 144}, hw.array.unit_energy_pj, ()))
    nl = nest_layer(conv_layer("c", 10, 10, 3, 3, 16, 4, 1))
    mix = mixed_spatial(hw, nl)
    assert sorted(mix["D2"].values()) == [3, 3, 16] and utilization(hw, nl, mix) == pytest.approx(1.0)


@pytest.mark.parametrize("chip", ["simba", "tpu_like_quad_core"])
@pytest.mark.parametrize("shape", [(1, 1024, 256, 1), (1, 1024, 256, 3), (1, 10, 4096, 1), (3, 512, 512, 7)])
def test_a_loop_nest_share_reads_each_operand_at_least_once(chip: str, shape: tuple[int, int, int, int]) -> None:
    """A share mapped with DRAM on top counts the mapping's DRAM words, which ZigZag truncates to whole accesses of
    the port: a GEMV's 256-byte input was 0 of its 512-byte words on a simba chiplet (2026-12-08), below the bytes
    its operands hold. Each operand now crosses at least once, under either objective."""
    from dataclasses import replace

    from npukit.sim import Layer, Workload, load_chip, simulate_multicore

    m, n, k, b = shape
    chip_ = load_chip(f"stream:{Path(__file__).parent / 'data' / 'stream_hw' / f'{chip}.yaml'}", warnings=[])
    # one MAC core (and the simd core, if any): the share is the whole GEMM
    chip_ = replace(chip_, cores=tuple(c for i, c in enumerate(chip_.cores) if i == chip_.mac_cores[0] or c.kind == "simd"))
    for objective in ("latency", "energy"):
        res = simulate_multicore(Workload("w", [Layer("g", m, n, k, batch=b, kind="gemm")]),
                                 replace(chip_, objective=objective), "none/split")
        assert res.layer_rows[0]["dram_bytes"] >= b * (m * k + k * n + m * n)  # int8 operands and outputs
