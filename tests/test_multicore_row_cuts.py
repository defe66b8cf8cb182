"""A fused group whose GEMMs' rows are cut alike over cores that differ (``fused_rows``, a pipeline stage's cut): the
vector ops on those rows, a conv's halo rows and an attention GEMM's key/value bands follow the cut, and each core runs
its own rows of the group one operator after another. Before 2026-12-07 all three were counted as if the rows were cut
evenly, and every operator waited for the slowest core (a group given to the 64 x 64 core alone still spread its
SiLU over the idle 48 x 48 cores)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_multicore_unequal import _mixed

from npukit.sim import load_table
from npukit.sim._multicore_cost import gemm_part, halo_elements, vector_shares
from npukit.sim.arch import load_arch
from npukit.sim.multicore_sim import _Run, simulate_multicore
from npukit.sim.workload import Layer, VectorOp, Workload, conv_layer

MLP = Workload("m", [Layer("a", 512, 1024, 512), VectorOp("silu", "silu", 512 * 1024, reduce=1024),
                     Layer("b", 512, 512, 1024)])


def test_vector_shares_follow_the_cut() -> None:
    op = VectorOp("sm", "softmax", 10 * 64, reduce=64, params=64)
    s = vector_shares(op, ("M", (0, 6, 10, 10)))
    assert [x.elements if x else 0 for x in s] == [6 * 64, 4 * 64, 0]
    assert [x.params if x else None for x in s] == [64, 0, None]  # the first core reads them, multicast to the rest
    assert [x.params for x in vector_shares(op, ("M", (0, 6, 10)), multicast=False)] == [64, 64]
    batched = VectorOp("n", "rmsnorm", 128, reduce=128, batch=8)
    assert [x.batch for x in vector_shares(batched, ("batch", (0, 5, 8)))] == [5, 3]  # the batch at the cut
    # a cut of a GEMM on another extent: each instance's rows in the same proportions
    assert [x.elements for x in vector_shares(VectorOp("r", "gelu", 100, batch=8), ("rows", (0, 3, 4)))] == [75, 25]


def test_a_vector_op_takes_its_share_of_the_rows_on_each_core(tmp_path: Path) -> None:
    chip = _mixed(tmp_path)
    r = _Run(MLP, chip, load_table("horowitz45"), {})
    cs = chip.mac_cores
    silu = MLP.layers[1]
    even = r.vector_parts(silu, cs)
    cut = r.vector_parts(silu, cs, cut=("M", (0, 256, 384, 512)))
    assert [p.vector_busy for p in even] == [even[0].vector_busy] * 3
    assert cut[0].vector_busy == pytest.approx(2 * cut[1].vector_busy) == pytest.approx(2 * cut[2].vector_busy)
    alone = r.vector_parts(silu, cs, cut=("M", (0, 512, 512, 512)))  # every row on the first core: the others idle
    assert [p.core for p in alone] == [cs[0]] and alone[0].vector_busy == pytest.approx(sum(p.vector_busy for p in cut))


def _no_multicast(chip):  # noqa: ANN001, ANN202
    return replace(chip, interconnect=replace(chip.interconnect, multicast=False))


def test_each_core_runs_its_rows_of_the_group_without_waiting(tmp_path: Path) -> None:
    chip = _no_multicast(_mixed(tmp_path))  # each core fetches its own weights
    res = simulate_multicore(MLP, chip, "chain/split")
    rows = res.rows()
    assert [r["core_ids"] for r in rows] == ["0 1 2"] * 3 and rows[0]["split"] == "M"
    # the group's latency is its longest core's work, less than each operator's slowest core added up
    assert res.total_cycles == pytest.approx(max(res.core_busy))
    busy = {c: sum(e - s for k, s, e, _ in res.timeline if k == c) for c in range(3)}
    assert busy == pytest.approx(dict(enumerate(res.core_busy)))  # each core's bars are its own parts
    assert all(0 <= s and e <= res.total_cycles * (1 + 1e-12) for _, s, e, _ in res.timeline)
    for c in range(3):  # no core waits for another: its bars follow one another from the start
        bars = sorted((s, e) for k, s, e, _ in res.timeline if k == c)
        assert bars[0][0] == 0 and all(b[0] == pytest.approx(a[1]) for a, b in zip(bars, bars[1:], strict=False))
    # the one-stage pipeline of the same cut agrees
    assert res.total_cycles == pytest.approx(simulate_multicore(MLP, chip, "chain/pipeline").total_cycles)
    assert sum(r["cycles"] for r in rows) == pytest.approx(res.total_cycles)


def test_a_group_whose_cut_leaves_cores_idle_keeps_its_vector_ops_on_the_working_core(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    from npukit.sim import _multicore_groups as groups

    chip = _mixed(tmp_path, "mx_one")
    cs = chip.mac_cores
    monkeypatch.setattr(groups, "fused_plan", lambda r, g, m: (m, [(0, 512, 512, 512), (0, 512, 512, 512)], "pick"))
    monkeypatch.setattr("npukit.sim.multicore_sim.fused_plan", groups.fused_plan)
    rows = simulate_multicore(MLP, chip, "chain/split").rows()
    assert [r["core_ids"] for r in rows] == [str(cs[0])] * 3  # before, the SiLU on "0 1 2"


def test_halo_rows_follow_the_cut() -> None:
    prod = conv_layer("c1", 34, 34, 3, 3, 8, 8, 1)
    cons = conv_layer("c2", 34, 34, 3, 3, 8, 8, 1)
    even = [halo_elements(prod, cons, 3, i) for i in range(3)]
    assert even == [halo_elements(prod, cons, 3, i, (0, 11, 22, 32), (0, 11, 22, 32)) for i in range(3)]
    cut = (0, 20, 26, 32)
    # core 1 computes rows 20..25 and needs input rows 19..26 (padded 20..27): one row from each neighbour
    assert [halo_elements(prod, cons, 3, i, cut, cut) for i in range(3)] == [32 * 8, 2 * 32 * 8, 32 * 8]


def test_an_own_band_sets_the_keys_a_core_receives() -> None:
    arch = load_arch("npu32")
    tab = load_table("horowitz45")
    kv = Layer("scores", 64, 256, 64)
    parts = {own: gemm_part(kv, 0, arch, tab, {}, dim="M", ways=3, fused_in="local", fused_filter="bands",
                            own_band=own) for own in (None, 1 / 3, 0.5, 0.0)}
    assert parts[None].link_bytes == pytest.approx(parts[1 / 3].link_bytes)
    assert parts[0.5].link_bytes == pytest.approx(parts[0.0].link_bytes * 0.5)
    assert parts[0.5].link_bytes < parts[None].link_bytes < parts[0.0].link_bytes


def test_a_simd_core_gathers_the_rows_so_the_cores_wait_for_it(tmp_path: Path) -> None:
    # with a simd core the SiLU runs there on every core's rows: the GEMM before it ends on its slowest core, and the
    # GEMM after it starts when the SiLU is done (no core at its own pace across it)
    from test_multicore_unequal import BIG64, SMALL48

    chip = _mixed(tmp_path, "mx_simd", BIG64 + SMALL48 + '[[core]]\narch = "npu32"\nkind = "simd"\n')
    res = simulate_multicore(MLP, chip, "chain/split")
    rows = res.rows()
    silu = rows[1]
    assert silu["core_ids"] == "3"
    first = [(s, e) for k, s, e, n in res.timeline if n == "a"]
    assert min(s for k, s, e, n in res.timeline if n == "silu") >= max(e for _, e in first) - 1e-9
    assert res.total_cycles == pytest.approx(sum(r["cycles"] for r in rows))
    assert res.total_cycles > max(res.core_busy[:3])


def test_a_fused_group_may_split_over_every_core_as_identical_cores_do(tmp_path: Path) -> None:
    # a few rows and wide weights: the free split (N, then K) over all three cores beats the rows cut alike and the
    # 64 x 64 core alone, so a 64 x 64 core in place of a 48 x 48 one no longer makes the chip slower
    from test_multicore_unequal import _mixed as mixed

    w = Workload("m", [Layer("a", 64, 2048, 512), Layer("b", 64, 512, 2048)])
    res = simulate_multicore(w, mixed(tmp_path), "chain/split")
    three48 = mixed(tmp_path, "t48", '[[core]]\narch = "npu48.toml"\ncount = 3\nkind = "mac"\n')
    assert [(r["split"], r["core_ids"]) for r in res.rows()] == [("N", "0 1 2"), ("K", "0 1 2")]
    assert res.total_cycles <= simulate_multicore(w, three48, "chain/split").total_cycles


def test_multicast_weights_hold_a_core_until_their_fetch_starts(tmp_path: Path, monkeypatch) -> None:
    # with multicast the small cores' weights of each GEMM come with the first core's DRAM fetch: no part of a GEMM
    # starts before the first core's does (the review of the change above found them started 8,426 cycles early)
    from npukit.sim import _multicore_groups as groups

    chip = _mixed(tmp_path, "mx_mc")
    monkeypatch.setattr("npukit.sim.multicore_sim.fused_plan", lambda r, g, m: (m, groups.fused_rows(r, g, m), "pick"))
    res = simulate_multicore(MLP, chip, "chain/split")
    lead = chip.mac_cores[0]
    for name in ("a", "b"):
        bars = {k: s for k, s, _, n in res.timeline if n == name}
        assert all(s >= bars[lead] for s in bars.values())
    assert res.total_cycles > max(res.core_busy)  # the small cores wait for the big one's fetch of b's weights
    assert res.total_cycles == pytest.approx(simulate_multicore(MLP, chip, "chain/pipeline").total_cycles)


def test_only_operators_that_keep_their_rows_run_without_a_barrier(tmp_path: Path) -> None:
    from npukit.sim._multicore_groups import fused_edges, own_rows

    chip = _mixed(tmp_path, "mx_own")
    r = _Run(MLP, chip, load_table("horowitz45"), {})
    assert own_rows(r, MLP.layers, *fused_edges(MLP.layers, None))
    convs = [conv_layer("c1", 34, 34, 3, 3, 8, 8, 1), conv_layer("c2", 34, 34, 3, 3, 8, 8, 1)]
    edges = fused_edges(convs, None)
    assert edges[0][1]  # the second conv reads the first's output on chip
    assert not own_rows(r, convs, *edges)  # its halo rows come from the neighbouring cores
    assert own_rows(r, convs, *edges, inside=[1])  # a stage of its own reads the stage before it
    pointwise = [conv_layer("c1", 34, 34, 3, 3, 8, 8, 1), conv_layer("p", 32, 32, 1, 1, 8, 16, 1)]
    pw_edges = fused_edges(pointwise, None)
    assert pw_edges[0][1] and own_rows(r, pointwise, *pw_edges)  # a 1 x 1 conv reads only its core's own rows
    fin, fout, sib, _ = fused_edges(MLP.layers, None)  # a right operand made in the group (attention's keys):
    assert not own_rows(r, MLP.layers, fin, fout, sib, [-1, -1, 0])  # every core needs every core's rows


def test_a_vector_op_follows_the_cut_of_the_gemm_it_reads_by_the_dataflow() -> None:
    """Where the workload records its dataflow, a vector op in a fused group follows the row cut of the GEMM whose
    output it reads, not of the GEMM listed just before it. Before, the Llama layer's rope of the queries and of the
    keys followed the value projection's cut (right only while the three projections had the same rows); here the
    queries' rope reads 64 rows and the keys' 16."""
    from npukit.sim._multicore_groups import owners, row_cut, tails
    from npukit.sim.dataflow import Dataflow

    ops: list[Layer | VectorOp] = [Layer("q", 64, 32, 32), Layer("k", 16, 32, 32), VectorOp("rope_q", "mul", 64 * 32),
                                   VectorOp("rope_k", "mul", 16 * 32)]
    wl = Workload("w", ops, meta={"dataflow": {"rope_q": ["q"], "rope_k": ["k"]}})
    flow = Dataflow.of(wl)
    own = owners(ops, flow)
    assert [[v.name for v in t] for t in tails(ops, [0, 1], own)] == [["rope_q"], ["rope_k"]]
    assert [[v.name for v in t] for t in tails(ops, [0, 1], owners(ops))] == [[], ["rope_q", "rope_k"]]  # by position
    cuts = {0: (0, 48, 64), 1: (0, 4, 16)}  # by the GEMMs' positions in the group
    assert row_cut(ops, cuts, 2, 2, own) == ("M", (0, 48, 64))
    assert row_cut(ops, cuts, 3, 2, own) == ("M", (0, 4, 16))
    # an op no GEMM of the group feeds follows the first GEMM that reads it (a norm before its projection)
    pre: list[Layer | VectorOp] = [VectorOp("norm", "rmsnorm", 64 * 32, reduce=32), *ops]
    flow2 = Dataflow.of(Workload("w2", pre, meta={"dataflow": {"q": ["norm"], "k": ["norm"], "rope_q": ["q"],
                                                               "rope_k": ["k"]}}))
    assert owners(pre, flow2) == [1, None, None, 1, 2]
