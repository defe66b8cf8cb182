"""The shared DRAM port at the ends of a split (sim/_multicore_cost.py: write_epilogue): an output leaves only once
the last K fold that accumulates it has run, so the last output group's write is not hidden behind earlier folds."""

import math

from npukit.sim import Layer, load_arch
from npukit.sim._multicore_cost import Part, gemm_part, write_epilogue
from npukit.sim.energy import load_table


def _part(core: int, compute: float, stall: float, reads: float, writes: float, folds: int, k_folds: int) -> Part:
    return Part(core, compute, stall, 0.0, 1, dram_bytes=reads + writes, folds=folds, write_bytes=writes,
                k_folds=k_folds)


def test_last_group_write_follows_its_compute() -> None:
    # 4 cores, 8 folds each, all K folds (one output group): 1,000 B of outputs each, 800 B of reads each
    parts = [_part(i, 800.0, 10.0, 800.0, 1000.0, 8, 8) for i in range(4)]
    write_epilogue(parts, 8.0)
    first = 4 * 800 / 8 / 8  # every core's first fold's reads through the one 8 B/cycle port
    last = 4 * 1000 / 8  # all outputs, made final by the last fold
    assert all(p.stall == math.ceil(first + last - 100.0) for p in parts)  # less the last fold (100 cycles)


def test_groups_and_fused_outputs() -> None:
    # two output groups (folds = 2 x k_folds): only the last group's half waits
    two = [_part(0, 800.0, 0.0, 0.0, 1000.0, 8, 4), _part(1, 800.0, 0.0, 0.0, 1000.0, 8, 4)]
    write_epilogue(two, 10.0)
    assert two[0].stall == math.ceil(2 * 500 / 10 - 100)
    # a fused output (kept on chip) writes nothing: the stall stays; a stall already longer stays too
    kept = [_part(0, 800.0, 7.0, 800.0, 0.0, 8, 8), _part(1, 800.0, 5000.0, 0.0, 1000.0, 8, 8)]
    write_epilogue(kept, 8.0)
    assert kept[0].stall == 7.0 and kept[1].stall == 5000.0


def test_gemm_part_k_folds_and_writes() -> None:
    arch = load_arch("npu128")
    tab = load_table(arch.energy_table)
    p = gemm_part(Layer("g", 64, 32, 1024), 0, arch, tab, {})
    assert p.k_folds == math.ceil(1024 / arch.rows)
    assert p.write_bytes == 64 * 32 * arch.bits.output / 8
    fused = gemm_part(Layer("g", 64, 32, 1024), 0, arch, tab, {}, fused_out="local")
    assert fused.write_bytes == 0


def test_keys_cross_the_links_ahead_as_far_as_window_and_buffer_allow() -> None:
    from dataclasses import replace

    from npukit.sim._multicore_cost import prefetched

    p = replace(_part(0, 50.0, 0.0, 0.0, 0.0, 1, 1), link_cycles=110.0, filter_link_cycles=100.0,
                filter_buffer_cycles=1000.0)
    assert prefetched([p], 60.0)[0].link_cycles == 50.0  # 60 of the 100 crossed during the earlier steps
    assert prefetched([p], 500.0)[0].link_cycles == 10.0  # all of it: the link latency stays
    assert prefetched([replace(p, filter_buffer_cycles=30.0)], 500.0)[0].link_cycles == 80.0  # a full buffer stops it
    assert prefetched([p], 0.0)[0] is p and p.link_cycles == 110.0  # nothing ahead; the cached part is untouched


def test_fused_attention_receives_its_keys_while_v_is_projected() -> None:
    from npukit.sim import VectorOp, Workload
    from npukit.sim.interconnect import Interconnect
    from npukit.sim.multicore import homogeneous
    from npukit.sim.multicore_sim import simulate_multicore

    wl = Workload("head", [Layer("q", 128, 64, 512), Layer("k", 128, 64, 512), Layer("v", 128, 64, 512),
                           Layer("scores", 128, 128, 64, kind="attention"),
                           VectorOp("softmax", "softmax", 128 * 128, reduce=128),
                           Layer("context", 128, 64, 128, kind="attention")])
    slow = homogeneous(load_arch("npu128"), 4, Interconnect(4.0, 0.0, 0.0, "mesh"))  # 4 B/cycle links
    rows = {r["name"]: r for r in simulate_multicore(wl, slow, "chain/split").rows()}
    keys = rows["scores"]["interconnect_bytes"] / 4 / 4  # one core's three key bands over its link
    assert rows["scores"]["split"] == "M" and keys > rows["scores"]["compute_cycles"]  # the links would be exposed
    assert rows["v"]["cycles"] > keys  # but the v projection lasts longer than the key bands take to cross
    assert rows["scores"]["interconnect_cycles"] == 0
    assert rows["scores"]["cycles"] == rows["scores"]["compute_cycles"] + rows["scores"]["stall_cycles"]
