"""A batched GEMM whose batch the core count does not divide (73 experts of one token each on four cores) may be cut
on its batch in shares one element apart (split ``B``). Before 2026-12-08 ``M`` cut such a batch in each element's
rows, so a one-row GEMM's split left all but one core idle: 73 experts ran as fast on quad128 as on two cores."""

from __future__ import annotations

from dataclasses import replace

import pytest

from npukit.sim import load_arch, load_multicore_arch, simulate, simulate_multicore
from npukit.sim._multicore_cost import split_extent, sub_layer, uneven_batch
from npukit.sim.workload import Layer, Workload

EXPERTS = Layer("experts_up", 1, 1, 256, batch=73, kind="gemm")  # 73 one-token experts, a GEMV each


def _row(layer: Layer, arch: str = "quad128", layer_cores: str = "all") -> dict:
    m = replace(load_multicore_arch(arch), layer_cores=layer_cores)
    return simulate_multicore(Workload("w", [layer]), m, "none/split").layer_rows[0]


def test_experts_are_spread_over_every_core() -> None:
    one = simulate(Workload("w", [EXPERTS]), load_arch("npu128")).cycles
    row = _row(EXPERTS)
    assert row["split"] == "B" and row["cores"] == 4
    # 19 experts on the busiest core: about a quarter of one core's time (the old M split took half)
    assert row["cycles"] < 0.3 * one
    assert row["dram_bytes"] == simulate(Workload("w", [EXPERTS]), load_arch("npu128")).dram_bytes  # each read once


def test_shares_are_one_element_apart_and_cover_the_batch() -> None:
    subs = [sub_layer(EXPERTS, "B", 4, i) for i in range(4)]
    assert [s.batch for s in subs] == [19, 18, 18, 18] and all(s.M == 1 and s.shared == 1 for s in subs)
    # 12 heads on 8 cores: every core gets one or two (shares of ceil(12 / 8) would leave two cores idle)
    assert [sub_layer(replace(EXPERTS, batch=12), "B", 8, i).batch for i in range(8)] == [2, 2, 2, 2, 1, 1, 1, 1]
    assert split_extent(EXPERTS, "B", 4) == ("batch", 73)
    assert split_extent(EXPERTS, "M", 4) == ("M", 1)  # M still cuts the rows when 4 does not divide the batch


@pytest.mark.parametrize(("layer", "cores", "offered"), [
    (EXPERTS, 4, True),
    (replace(EXPERTS, batch=72), 4, False),  # 4 divides 72: M already cuts the batch evenly
    (Layer("gqa", 64, 64, 64, batch=6, shared=2, kind="attention"), 4, True),  # 3 groups, cut whole
    (Layer("one", 64, 64, 64), 4, False),
    (EXPERTS, 1, False),
])
def test_which_layers_are_offered_the_uneven_batch_split(layer: Layer, cores: int, offered: bool) -> None:
    assert uneven_batch(layer, cores) is offered


def test_a_tie_keeps_the_earlier_split_and_divisible_batches_are_unchanged() -> None:
    # 8 heads on 4 cores: M is the batch split, as before; no B label appears
    heads = Layer("att", 128, 128, 64, batch=8, kind="attention")
    assert _row(heads)["split"] == "M"
    # with layer_cores = "search" the fewer-core counts get their own B cuts (3 cores: B@3)
    row = _row(EXPERTS, "quad128", "search")
    assert row["split"] in ("B", "B@3", "B@2") and row["cycles"] <= _row(EXPERTS)["cycles"]


def test_grouped_query_heads_are_cut_in_whole_groups() -> None:
    """32 query heads reading 8 key/value heads (``shared = 4``) on 3 cores: ``B`` gives the cores 3, 3 and 2 whole
    groups, each group's keys fetched once (the compulsory DRAM traffic); ``M`` cut each head's rows (86,496 cycles
    before 2026-12-08, 72,168 now)."""
    from npukit.sim import homogeneous

    gqa = Layer("scores", 512, 512, 128, batch=32, shared=4, kind="attention")
    assert [(s.batch, s.shared) for s in (sub_layer(gqa, "B", 3, i) for i in range(3))] == [(12, 4), (12, 4), (8, 4)]
    assert split_extent(gqa, "B", 3) == ("groups", 8)
    res = simulate_multicore(Workload("w", [gqa]), homogeneous(load_arch("npu128"), 3), "none/split")
    row = res.layer_rows[0]
    assert row["split"] == "B" and row["dram_bytes"] == 32 * 512 * 128 + 8 * 128 * 512 + 32 * 512 * 512
    one = simulate(Workload("w", [gqa]), load_arch("npu128")).cycles
    assert row["cycles"] < 0.4 * one  # 12 of 32 heads on the busiest core
    assert uneven_batch(Layer("mqa", 64, 64, 64, batch=6, shared=6, kind="attention"), 4) is False  # one group


def test_a_fused_pair_cut_on_its_batch_keeps_the_intermediate_on_each_core() -> None:
    """OmniMoE's up and down projections of 73 experts, fused: both cut on the batch alike, so each core keeps its
    experts' one-column intermediate (no link traffic, less DRAM than layer by layer)."""
    pair = Workload("w", [EXPERTS, Layer("experts_down", 1, 256, 1, batch=73, kind="gemm")])
    m = load_multicore_arch("quad128")
    fused = simulate_multicore(pair, m, "chain/split").layer_rows
    apart = simulate_multicore(pair, m, "none/split").layer_rows
    assert [r["split"] for r in fused] == ["B", "B"] and all(r["step"] == "fused" for r in fused)
    assert sum(r["interconnect_bytes"] for r in fused) == 0
    assert sum(r["dram_bytes"] for r in fused) < sum(r["dram_bytes"] for r in apart)


def test_a_softmax_after_a_batch_cut_runs_on_the_cores_that_hold_its_heads() -> None:
    """Two heads on six npu128 cores under ``energy``: the scores take ``B`` (a head on each of two cores), and the
    softmax over them runs on those two cores, as long as one head takes there (before 2026-12-08 it ran evenly on all
    six, 134 cycles where its two cores take 387; a review)."""
    from npukit.sim import VectorOp, homogeneous

    attn = Workload("a", [Layer("scores", 64, 64, 64, batch=2, kind="attention"),
                          VectorOp("sm", "softmax", 64 * 64, reduce=64, batch=2),
                          Layer("context", 64, 64, 64, batch=2, kind="attention")])
    m = replace(homogeneous(load_arch("npu128"), 6), objective="energy")
    rows = simulate_multicore(attn, m, "chain/split").layer_rows
    assert [r["split"] for r in rows] == ["B", "-", "B"]
    one = simulate_multicore(Workload("s", [attn.layers[1]]), homogeneous(load_arch("npu128"), 1), "none/split")
    assert rows[1]["cores"] == 2 and rows[1]["cycles"] >= one.layer_rows[0]["cycles"] / 2 - 1


def test_batch_shares_that_do_not_line_up_cross_the_links() -> None:
    """A per-head GEMM (6 heads, each its own weights) feeding grouped attention (3 groups of 2) on four cores: both
    take ``B``, but the heads fall 2/2/1/1 and 2/2/2/0, so the scores read their input through the shared memory, not
    locally (before 2026-12-08, 0 link bytes; a review)."""
    heads = Layer("qh", 64, 64, 256, batch=6, kind="gemm")
    gqa = Layer("scores", 64, 64, 64, batch=6, shared=2, kind="attention")
    rows = simulate_multicore(Workload("w", [heads, gqa]), load_multicore_arch("quad128"), "chain/split").layer_rows
    assert [r["split"] for r in rows] == ["B", "B"] and rows[1]["interconnect_bytes"] > 0
