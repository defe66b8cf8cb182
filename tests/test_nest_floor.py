"""The lower bounds that let the multi-core search skip splits (:mod:`npukit.sim.nest_floor`,
:func:`npukit.sim._multicore_cost.gemm_floor`, :func:`npukit.sim._multicore_prune.split_floor`) never exceed what
the mapped shares take, and the pruned search keeps exactly the split (and so the results) the full search keeps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from npukit.sim import Layer, VectorOp, Workload, conv_layer
from npukit.sim import _multicore_prune as prune
from npukit.sim._multicore_cost import gemm_floor, multicast, sub_layer
from npukit.sim._multicore_nest import map_share, mixed_spatial, nest_floor, nest_share, on_chip
from npukit.sim.multicore_sim import _Run, _table, simulate_multicore
from npukit.sim.nest_floor import temporal_floor, touched, unrolling_cycles
from npukit.sim.nest_sim import nest_layer
from npukit.sim.nest_spatial import ranked_spatial
from npukit.sim.schedule import layer_splits
from npukit.sim.stream_io import load_stream_hardware

HW = Path(__file__).parent / "data" / "stream_hw"
CHIPS = sorted(p.name for p in HW.glob("*.yaml"))  # the chip files (their cores are under cores/)
LAYERS = [Layer("tiny", 1, 32, 16), Layer("g", 64, 48, 96), Layer("wide", 7, 300, 20), Layer("deep", 128, 64, 512),
          Layer("heads", 32, 32, 16, batch=4, shared=2, kind="attention"),
          conv_layer("c3", 18, 18, 3, 3, 8, 16, 1), conv_layer("c5", 12, 12, 5, 5, 16, 8, 1),
          conv_layer("s2", 17, 17, 3, 3, 16, 32, 2), conv_layer("p1", 16, 16, 1, 1, 32, 24, 2)]


def _chip(name: str, bits: int = 8):  # -> MultiCoreArch
    return load_stream_hardware(HW / name, "latency", operand_bits=bits, warn=False)


def test_the_chip_files_are_all_here() -> None:
    assert CHIPS == ["eyeriss_like_dual_core.yaml", "simba.yaml", "tpu_like_quad_core.yaml", "tpu_v7_ironwood.yaml"]


@pytest.mark.slow
@pytest.mark.parametrize("chip", CHIPS)
def test_the_floor_of_every_split_and_share_is_at_most_its_mapped_cycles(chip: str) -> None:
    """Every layer, every split (on all the cores or fewer) and fused-operand variant: each share's compute and DRAM
    bytes floors are at most its part's, and the split's floor at most its slowest part's busy cycles (after the DRAM
    port is shared)."""
    m = _chip(chip, 16 if "tpu_v7" in chip else 8)
    run = _Run(Workload("x", []), m, _table(m, None), {})
    cores = m.mac_cores[:4] if len(m.mac_cores) > 4 else m.mac_cores  # simba: four of its 36 chiplets (fast)
    checked = 0
    for layer in LAYERS:
        for dim, k in layer_splits(len(cores)):  # every split on all the cores and on the first 2 and 1 of them
            used = cores[:k]
            for fin, fout in (("", ""), ("local", "local"), ("shared", "")):
                parts = run.gemm_parts(layer, used, dim, fin, fout)
                floor = prune.split_floor(run, layer, used, dim, fin, fout)
                assert 0 < floor <= max(p.busy for p in parts), (layer.name, dim, k, fin, fout)
                subs = [(i, s) for i in range(k) if (s := sub_layer(layer, dim, k, i)) is not None]
                for (i, sub), part in zip(subs, parts, strict=True):
                    c = m.cores[used[i]]
                    compute, byts = gemm_floor(sub, c.arch, run.memo, dim=dim, ways=k, reducer=i == 0,
                                               fused_in=fin, fused_out=fout, nest=c.nest,
                                               multicast=multicast(dim, i) if m.interconnect.multicast else "")
                    assert compute <= part.compute and byts <= part.dram_bytes * (1 + 1e-12), (layer.name, dim, i)
                    checked += 1
    assert checked > 100


def test_a_share_mapped_with_dram_on_top_is_bounded_too() -> None:
    """A share too large for a tpu_like core is mapped with DRAM on top: its DRAM traffic is the mapping's (a 3x3
    conv's input counted as ZigZag counts it, 7x7 of a 9x9 map), still at or above the floor's elements."""
    m = _chip("tpu_like_quad_core.yaml")
    hw = m.cores[0].nest
    for conv in (conv_layer("big", 9, 9, 3, 3, 512, 512, 1), conv_layer("big2", 18, 18, 3, 3, 512, 256, 1)):
        share = nest_share(conv, hw, (8, 8, 8), "edp", {}, m.table.dram_bit())
        cycles, (i, w, o) = nest_floor(conv, hw, {})
        assert cycles <= share.cycles and i <= share.ifmap and w <= share.fills and o <= share.final
    assert touched(nest_layer(conv_layer("big", 9, 9, 3, 3, 512, 512, 1)))[0] == 7 * 7 * 512


@pytest.mark.parametrize("chip", CHIPS)
def test_the_temporal_floor_is_at_most_every_unrolling_the_mapper_tries(chip: str) -> None:
    hw = on_chip(_chip(chip).cores[0].nest)
    for layer in LAYERS:
        nl = nest_layer(layer)
        mix = mixed_spatial(hw, nl)
        floor = temporal_floor(hw, nl, (mix,) if mix else ())
        cands = list(ranked_spatial(hw, nl)) + ([mix] if mix else [])
        assert cands and floor <= min(unrolling_cycles(hw, nl, sm) for sm in cands)
        m = map_share(hw, nl, "edp")
        assert floor <= m.cost.temporal_cycles + m.cost.drain_cycles <= m.cost.cycles


def test_pick_split_keeps_the_first_of_equals_and_skips_only_what_cannot_win() -> None:
    ranks = {"M": (10.0, 5.0), "N": (10.0, 5.0), "K": (30.0, 1.0), "M2N2": (10.0, 4.0)}
    floors = {"M": 9.0, "N": 1.0, "K": 11.0, "M2N2": 10.0}
    seen: list[str] = []

    def evaluate(dim: str):
        seen.append(dim)
        return ranks[dim], dim

    dim, rank, _ = prune.pick_split(("M", "N", "K"), evaluate, floors.__getitem__)
    assert (dim, rank) == ("M", (10.0, 5.0)) and seen == ["N", "M"]  # K's floor is above the best: not mapped
    seen.clear()
    dim, rank, _ = prune.pick_split(tuple(ranks), evaluate, floors.__getitem__)
    assert dim == "M2N2" and seen == ["N", "M", "M2N2"]  # a floor equal to the best is mapped (energy decides)
    seen.clear()
    assert prune.pick_split(tuple(ranks), evaluate, None)[0] == "M2N2" and seen == list(ranks)


def _workloads() -> list[Workload]:
    return [Workload("convs", [conv_layer("c1", 18, 18, 3, 3, 8, 16, 1), VectorOp("r", "other", 16 * 16 * 16),
                               conv_layer("c2", 18, 18, 3, 3, 16, 16, 1), Layer("head", 1, 10, 16 * 16 * 16)]),
            Workload("attn", [Layer("q", 64, 32, 128), Layer("k", 64, 32, 128), Layer("v", 64, 32, 128),
                              Layer("s", 64, 64, 32, kind="attention"), VectorOp("sm", "softmax", 64 * 64, reduce=64),
                              Layer("ctx", 64, 32, 64, kind="attention"), Layer("up", 64, 96, 32),
                              Layer("down", 64, 32, 96)])]


def _result(r) -> tuple:  # noqa: ANN001
    return repr(r.rows()), r.total_cycles, r.energy_pj, sorted(r.energy_components.items()), r.core_busy


# 2.5-3.5 s each: in the whole suite, not the fast core
_HEAVY = {"eyeriss_like_dual_core.yaml", "simba.yaml", "tpu_like_quad_core.yaml"}


@pytest.mark.parametrize("chip, layer_cores", [pytest.param(c, "all", marks=pytest.mark.slow) if c in _HEAVY else (c, "all")
                                               for c in CHIPS]
                         + [pytest.param("tpu_like_quad_core.yaml", "search", marks=pytest.mark.slow)])
def test_the_pruned_search_gives_the_full_searchs_results(chip: str, layer_cores: str, monkeypatch) -> None:
    """Every schedule, on fresh chips (cold caches) with and without pruning: byte-identical results; and pruning
    skipped some splits (so the test compares something). Also with ``layer_cores = "search"`` (splits on fewer
    cores too)."""
    mapped = {True: 0, False: 0}
    orig = _Run.gemm_parts

    def counting(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
        mapped[prune.PRUNE] += 1
        return orig(self, *a, **k)

    monkeypatch.setattr(_Run, "gemm_parts", counting)
    bits = 16 if "tpu_v7" in chip else 8
    for wl in _workloads():
        for sched in ("none/split", "chain/split", "blocks/pipeline"):
            out = {}
            for flag in (False, True):
                monkeypatch.setattr(prune, "PRUNE", flag)
                out[flag] = _result(simulate_multicore(wl, replace(_chip(chip, bits), layer_cores=layer_cores), sched))
            assert out[True] == out[False], (wl.name, sched)
    # ironwood's MXUs: these layers' floors cut no split there (its shares wait on more than the floors count)
    assert mapped[True] < mapped[False] if "tpu_v7" not in chip else mapped[True] <= mapped[False]
