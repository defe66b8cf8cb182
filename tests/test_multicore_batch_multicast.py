"""A batched GEMM split over cores on its batch (attention heads): a core receives the right operand by multicast only
where an earlier core reads the same one. Before 2026-12-07 every core but the first took "the" weights from the
first core's fetch, so four heads on quad128 moved 589,824 DRAM bytes where their operands hold 786,432."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from npukit.sim import load_arch, load_multicore_arch, simulate, simulate_multicore
from npukit.sim._multicore_cost import received, senders
from npukit.sim.workload import Layer, Workload


def _dram(layer: Layer, multicast: bool) -> float:
    m = load_multicore_arch("quad128")
    m = replace(m, interconnect=replace(m.interconnect, multicast=multicast))
    res = simulate_multicore(Workload("w", [layer]), m, "none/split")
    assert res.layer_rows[0]["split"] == "M" and res.layer_rows[0]["cores"] == 4
    return res.layer_rows[0]["dram_bytes"]


@pytest.mark.parametrize("kind", ["attention", "gemm"])
def test_heads_on_their_own_cores_read_their_own_operands(kind: str) -> None:
    heads = Layer("att", 256, 256, 256, batch=4, kind=kind)  # each head its own right operand (int8: 1 B)
    compulsory = 4 * 3 * 256 * 256
    assert _dram(heads, True) == _dram(heads, False) == compulsory
    assert simulate(Workload("w", [heads]), load_arch("npu128")).dram_bytes == compulsory


def test_grouped_heads_share_one_fetch_per_group() -> None:
    # two query heads per key/value head (shared = 2): cores 0 and 1 need group 0, cores 2 and 3 group 1; the second
    # of each pair receives it, so each group crosses DRAM once
    gqa = Layer("att", 256, 256, 256, batch=4, shared=2, kind="attention")
    assert _dram(gqa, True) == 4 * 2 * 256 * 256 + 2 * 256 * 256
    assert _dram(gqa, False) == 4 * 3 * 256 * 256
    assert received(gqa, "M", 4, [0, 1, 2, 3]) == {0: "", 1: "filter", 2: "", 3: "filter"}
    # a split on the rows of one weight matrix (no batch cut) still multicasts it to every core
    assert received(Layer("g", 256, 256, 256), "M", 4, [0, 1, 2, 3]) == {0: "", 1: "filter", 2: "filter", 3: "filter"}
    # a grid: each row band its own heads, so only the cores of a band share its input; none receives weights
    assert received(Layer("att", 64, 256, 64, batch=2), "M2N2", 4, [0, 1, 2, 3]) == {0: "", 1: "ifmap", 2: "", 3: "ifmap"}
    # the fetch each receives is its group's first reader's (the multicast cover charges that core), not the first
    # core's: before, core 3's passes over group 1 were charged to core 0, which never reads group 1
    got = received(gqa, "M", 4, [0, 1, 2, 3])
    assert senders(gqa, "M", 4, [0, 1, 2, 3], got) == {("filter", 1): 0, ("filter", 3): 2}
    assert senders(Layer("g", 256, 256, 256), "N", 3, [0, 1, 2], {0: "", 1: "ifmap", 2: "ifmap"}) == \
        {("ifmap", 1): 0, ("ifmap", 2): 0}
    assert senders(Layer("g", 256, 256, 256), "M2N2", 4, [0, 1, 2, 3], {0: "", 1: "ifmap", 2: "filter", 3: "ifmap+filter"}) \
        == {("ifmap", 1): 0, ("filter", 2): 0, ("ifmap", 3): 2, ("filter", 3): 1}


@pytest.mark.parametrize("shape", [(8192, 1024, 4096), (2048, 8192, 28672)])
def test_a_multicast_fetch_is_made_as_often_as_its_neediest_receiver_reads(shape: tuple[int, int, int]) -> None:
    """On an N split each core streams the whole input once per pass of its own tiling; a receiver given more columns
    than the sender may need more passes. The sender's fetch, multicast to all, must then be made that often: before
    2026-12-07 a receiver read none of it from DRAM, whatever its passes (big_little's 8192 x 1024 x 4096 GEMM under
    ``edp`` took the ``N`` split on 101 MB of DRAM)."""
    from npukit.sim import load_table
    from npukit.sim.multicore_sim import _Run

    chip = load_multicore_arch(str(Path(__file__).parents[1] / "examples" / "big_little.toml"))
    assert chip.interconnect.multicast
    layer = Layer("g0", *shape)
    cores = list(chip.mac_cores)
    n = shape[1]
    cut = (0, n // 2, 3 * n // 4, n)  # the 128 x 128 core half the columns, each 32 x 32 core a quarter
    r = _Run(Workload("w", [layer]), chip, load_table("horowitz45"), {})
    parts = r.gemm_parts(layer, cores, "N", "", "", bounds=cut)
    alone = replace(chip, interconnect=replace(chip.interconnect, multicast=False))
    own = _Run(Workload("w", [layer]), alone, load_table("horowitz45"), {}).gemm_parts(layer, cores, "N", "", "",
                                                                                       bounds=cut)
    read = [p.traffic["dram_ifmap_read_bytes"] for p in parts]
    need = [p.traffic["dram_ifmap_read_bytes"] for p in own]
    assert read[1:] == [0.0, 0.0]  # the receivers get the input by multicast
    assert read[0] == max(need) > 0  # and the one fetch covers the core that needs the most of it
    assert sum(read) <= sum(need)
