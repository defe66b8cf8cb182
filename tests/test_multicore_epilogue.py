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
