"""Multi-core NPUs: a one-core arch equals the single-core simulator; split, fusion and pipeline counts on small
hand-computed cases; the schedule search keeps the best candidate; the TOML format and the CLI."""

from __future__ import annotations

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import ConfigError, Layer, Workload, conv_layer, llama3_8b_layer, load_arch, resnet18, simulate
from npukit.sim.interconnect import Interconnect
from npukit.sim.multicore import homogeneous, load_multicore_arch, single_core
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.schedule import fusion_groups, objective_value


def _nonzero(d: dict) -> dict:
    return {k: v for k, v in d.items() if v}


@pytest.mark.parametrize("wl", [resnet18(), llama3_8b_layer(256)], ids=["resnet18", "llama-layer"])
@pytest.mark.parametrize("overlap", ["serial", "overlap"])
def test_one_core_equals_single_core(wl: Workload, overlap: str) -> None:
    arch = load_arch("npu128").with_(**{"vector.overlap": overlap})
    ref = simulate(wl, arch)
    got = simulate_multicore(wl, single_core(arch), "none/split")
    assert got.total_cycles == ref.total_cycles
    assert _nonzero(dict(got.ledger.counts)) == _nonzero(dict(ref.ledger.counts))
    assert _nonzero(dict(got.ledger.cycles)) == _nonzero(dict(ref.ledger.cycles))
    assert got.energy_pj == pytest.approx(ref.energy_pj, rel=1e-12)
    assert got.interconnect_bytes == 0


@pytest.mark.slow  # a second or more: the whole suite runs it
@pytest.mark.parametrize("mode", ["user", "calc"])
def test_one_core_in_scalesim_memory_mode_equals_single_core(mode: str) -> None:
    # SCALE-Sim's own stalls on a multi-core chip too: USER mode took npukit's stall formula (npu32 256^3: 127,331
    # cycles for SCALE-Sim's 27,625) and CALC mode raised AttributeError
    arch = load_arch("npu32").with_(memory="scalesim", mapping="fixed", bandwidth_mode=mode)
    wl = Workload("g", [Layer("g", 256, 256, 256), conv_layer("c", 18, 18, 3, 3, 16, 32, 1)])
    ref = simulate(wl, arch)
    got = simulate_multicore(wl, single_core(arch), "none/split")
    assert got.total_cycles == ref.total_cycles
    assert _nonzero(dict(got.ledger.cycles)) == _nonzero(dict(ref.ledger.cycles))
    assert got.energy_pj == pytest.approx(ref.energy_pj, rel=1e-12)


def _two_gemms() -> Workload:
    # A: (64 x 64) @ (64 x 128) -> B: (64 x 128) @ (128 x 64); everything fits the npu128 buffers
    return Workload("pair", [Layer("A", 64, 128, 64), Layer("B", 64, 64, 128)])


def test_fused_intermediate_never_goes_to_dram() -> None:
    arch = load_arch("npu128")
    mc = homogeneous(arch, 1, shared_kib=1024)
    wl = _two_gemms()
    assert fusion_groups(wl, "chain") == [(0, 1)]
    plain = simulate_multicore(wl, mc, "none/split")
    fused = simulate_multicore(wl, mc, "chain/split")
    inter = 64 * 128  # A's output = B's input, 8-bit
    a0, b0 = (next(r for r in plain.rows() if r["name"] == n) for n in "AB")
    a1, b1 = (next(r for r in fused.rows() if r["name"] == n) for n in "AB")
    assert a0["dram_bytes"] - a1["dram_bytes"] == inter  # A's output write is gone
    assert b0["dram_bytes"] - b1["dram_bytes"] == inter  # B's input read is gone
    # one core keeps the intermediate in its own buffers: nothing crosses the interconnect
    assert fused.interconnect_bytes == 0
    assert fused.ledger.count("dram") == plain.ledger.count("dram") - 2 * inter


def test_k_split_counts_the_reduction_traffic() -> None:
    arch = load_arch("npu128")
    wl = Workload("k", [Layer("g", 64, 32, 1024)])
    for cores in (2, 4):
        mc = homogeneous(arch, cores, Interconnect(32.0, 0.0, 0.5, "bus"))
        r = simulate_multicore(wl, mc)  # search picks the split dim
        from npukit.sim.multicore_sim import _Run, _table

        run = _Run(wl, mc, _table(mc, None), {})
        parts = run.gemm_parts(wl.layers[0], mc.mac_cores, "K", "", "")
        partial_bytes = 64 * 32 * arch.bits.psum_buffer / 8
        assert sum(p.link_bytes for p in parts) == (cores - 1) * partial_bytes
        # only the reducer writes the output to DRAM
        writes = [sum(c for comp, act, _, c in p.records if comp == "dram" and act == "dram_write") for p in parts]
        assert writes[0] == 64 * 32 and all(w == 0 for w in writes[1:])
        adds = sum(c for comp, act, _, c in parts[0].records if comp == "psum_adder")
        one = run.gemm_parts(Layer("g", 64, 32, 1024 // cores), [0], "-", "", "")[0]
        assert adds - sum(c for comp, act, _, c in one.records if comp == "psum_adder") == (cores - 1) * 64 * 32
        # interconnect energy: bits x pJ/bit x hops (1 on a bus)
        e_link = sum(p.link_bytes for p in parts) * 8 * 0.5
        assert r.searched and e_link > 0


def test_m_split_divides_rows_and_n_split_divides_columns() -> None:
    arch = load_arch("npu128")
    mc = homogeneous(arch, 4)
    from npukit.sim.multicore_sim import _Run, _table

    run = _Run(Workload("x", []), mc, _table(mc, None), {})
    layer = Layer("g", 1000, 256, 512)
    m_parts = run.gemm_parts(layer, mc.mac_cores, "M", "", "")
    n_parts = run.gemm_parts(layer, mc.mac_cores, "N", "", "")
    assert sum(p.macs for p in m_parts) == layer.macs == sum(p.macs for p in n_parts)
    assert [p.macs for p in m_parts] == [250 * 256 * 512] * 4
    assert all(p.link_bytes == 0 for p in m_parts + n_parts)


def test_grid_split_divides_rows_and_columns_and_reads_each_operand_once() -> None:
    """A 2-D split of 4 cores (``M2N2``): core i gets row band i // 2 and column part i % 2; with multicast the input
    bands and the weight parts are each fetched from DRAM once, so the four cores together read what one core
    reads, and each of their partial outputs is written once."""
    from npukit.sim._multicore_cost import multicast
    from npukit.sim.multicore_sim import _Run, _table
    from npukit.sim.schedule import grid_dims, split_dims

    assert grid_dims(4) == ("M2N2",) and grid_dims(8) == ("M2N4", "M4N2") and grid_dims(36) == ("M6N6",)
    assert grid_dims(2) == grid_dims(7) == () and split_dims(16) == ("M", "N", "K", "M4N4")
    assert [multicast("M2N2", i) for i in range(4)] == ["", "ifmap", "filter", "ifmap+filter"]
    arch = load_arch("npu128")
    mc = homogeneous(arch, 4)
    run = _Run(Workload("x", []), mc, _table(mc, None), {})
    layer = Layer("g", 1000, 256, 512)
    parts = run.gemm_parts(layer, mc.mac_cores, "M2N2", "", "")
    one = run.gemm_parts(layer, [0], "-", "", "")[0]
    assert [p.macs for p in parts] == [500 * 128 * 512] * 4
    for key in ("dram_ifmap_read_bytes", "dram_filter_read_bytes", "dram_ofmap_write_bytes"):
        assert sum(p.traffic[key] for p in parts) == pytest.approx(one.traffic[key])
    # without multicast every core fetches its own band and part: the input twice, the weights twice
    solo = homogeneous(arch, 4, Interconnect(32.0, 0.0, 0.1, "mesh", multicast=False))
    ps = _Run(Workload("x", []), solo, _table(solo, None), {}).gemm_parts(layer, solo.mac_cores, "M2N2", "", "")
    assert sum(p.traffic["dram_ifmap_read_bytes"] for p in ps) == pytest.approx(2 * one.traffic["dram_ifmap_read_bytes"])


def test_pipeline_moves_the_intermediate_over_the_interconnect() -> None:
    arch = load_arch("npu128")
    mc = homogeneous(arch, 2, Interconnect(32.0, 0.0, 0.1, "bus"), shared_kib=1024)
    res = simulate_multicore(_two_gemms(), mc, "chain/pipeline")
    inter = 64 * 128
    assert res.interconnect_bytes == 2 * inter  # A -> shared memory -> B's core
    a, b = res.rows()
    assert a["core_ids"] == "0" and b["core_ids"] == "1"
    tiles = a["tiles"]
    assert tiles >= 4
    # fill and drain over the tiles: one tile through both stages, then T - 1 tiles of the slower stage
    t_a, t_b = res.core_busy
    assert res.total_cycles == pytest.approx((t_a + t_b) / tiles + (tiles - 1) * max(t_a, t_b) / tiles)
    assert a["cycles"] + b["cycles"] == pytest.approx(res.total_cycles)


def test_search_keeps_the_best_candidate() -> None:
    arch = load_arch("npu128")
    wl = llama3_8b_layer(128)
    for objective in ("energy", "latency", "edp"):
        mc = homogeneous(arch.with_(objective=objective), 4, shared_kib=4096)
        res = simulate_multicore(wl, mc)
        vals = [objective_value(s["energy_pj"], s["cycles"], objective) for s in res.searched]
        assert len(vals) >= 3
        best = res.searched[vals.index(min(vals))]
        assert best["schedule"] == res.schedule.label
        assert objective_value(res.energy_pj, res.total_cycles, objective) == pytest.approx(min(vals))


def test_toml_presets_and_errors(tmp_path) -> None:
    quad = load_multicore_arch("quad128")
    assert len(quad.mac_cores) == 4 and quad.shared_memory.kib == 8192
    het = load_multicore_arch("hetero4")
    assert len(het.simd_cores) == 1 and len(het.mac_cores) == 3
    res = simulate_multicore(llama3_8b_layer(64), het, "none/split")
    assert res.core_busy[het.simd_cores[0]] > 0 and res.interconnect_bytes > 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[[core]]\narch = "npu128"\n[interconnect]\nwidth = 3\n')
    with pytest.raises(ConfigError, match="interconnect.width"):
        load_multicore_arch(bad)
    bad.write_text('[[core]]\narch = "npu32"\nkind = "simd"\n')
    with pytest.raises(ConfigError, match="no mac core"):
        load_multicore_arch(bad)


def test_cli_multicore(tmp_path, capsys) -> None:
    arch = tmp_path / "two.toml"
    arch.write_text('name = "two"\n[[core]]\narch = "npu32"\ncount = 2\n[shared_memory]\nkib = 512\n')
    out = tmp_path / "out"
    assert main(["sim", "--arch", str(arch), "--workload", "gemm:M=256,N=256,K=256", "--out", str(out), "--quiet"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (out / "gemm256x256x256_two_timeline.png").stat().st_size > 0
    assert (out / "gemm256x256x256_two_cores.csv").read_text().count("\n") == 3
    refused(["sim", "--arch", str(arch), "--schedule", "fused/x", "--out", str(tmp_path / "o2")], capsys, "--schedule")
    assert not (tmp_path / "o2").exists()


@pytest.mark.slow
def test_report_of_a_multicore_ledger_has_the_timeline(tmp_path) -> None:
    from npukit.sim import Ledger, write_report

    res = simulate_multicore(llama3_8b_layer(64), load_multicore_arch("hetero4"), "none/split")
    path = res.ledger.save(tmp_path / "mc.ledger.json")
    out = write_report([Ledger.load(path)], tmp_path / "rep")
    assert "timeline_1.png" in out
    text = out["md"].read_text()
    assert "Multi-core schedule" in text and "core3" in text
    # the ledger's cycles add up to the schedule's latency
    assert Ledger.load(path).total_cycles() == pytest.approx(res.total_cycles)


def test_fused_attention_keeps_q_k_v_and_scores_on_chip() -> None:
    from npukit.sim import VectorOp

    wl = Workload("head", [Layer("q", 128, 64, 512), Layer("k", 128, 64, 512), Layer("v", 128, 64, 512),
                           Layer("scores", 128, 128, 64, kind="attention"),
                           VectorOp("softmax", "softmax", 128 * 128, reduce=128),
                           Layer("context", 128, 64, 128, kind="attention")])
    assert fusion_groups(wl, "chain") == [(0, 5)]
    mc = homogeneous(load_arch("npu128"), 1, shared_kib=1024)
    plain = {r["name"]: r["dram_bytes"] for r in simulate_multicore(wl, mc, "none/split").rows()}
    fused = {r["name"]: r["dram_bytes"] for r in simulate_multicore(wl, mc, "chain/split").rows()}
    out = 128 * 64  # each projection's 8-bit output
    assert plain["q"] - fused["q"] == out  # q's output stays for the scores
    assert plain["k"] - fused["k"] == out + 128 * 512  # k's output stays, and its input is q's (on chip)
    assert fused["scores"] == 0  # reads q (input) and k (keys) on chip, its output stays for context
    assert plain["context"] - fused["context"] == 128 * 128 + out  # probabilities and values on chip


def test_fused_keys_in_row_bands_cross_only_from_the_other_cores() -> None:
    from npukit.sim import VectorOp

    wl = Workload("head", [Layer("q", 128, 64, 512), Layer("k", 128, 64, 512), Layer("v", 128, 64, 512),
                           Layer("scores", 128, 128, 64, kind="attention"),
                           VectorOp("softmax", "softmax", 128 * 128, reduce=128),
                           Layer("context", 128, 64, 128, kind="attention")])
    rows = {r["name"]: r for r in simulate_multicore(wl, homogeneous(load_arch("npu128"), 4), "chain/split").rows()}
    assert rows["k"]["split"] == rows["scores"]["split"] == "M"
    # every core reads all 128 keys (64 wide, 8-bit); a quarter of them it made itself
    assert rows["scores"]["interconnect_bytes"] == 4 * 128 * 64 * 3 / 4


def test_a_vector_ops_parameters_are_read_once_and_multicast() -> None:
    # an RMSNorm split over four cores' elements: each needs all 4,096 weights (8,192 bytes at 16 bits); one DRAM
    # read multicast to all (before, each core read them: 32,768 bytes), or each its own without multicast
    from dataclasses import replace

    wl = llama3_8b_layer(256)
    quad = load_multicore_arch("quad128")
    norm = lambda m: next(r for r in simulate_multicore(wl, m, "none/split").rows()  # noqa: E731
                          if r["name"] == "input_layernorm")
    one = next(r for r in simulate(wl, load_arch("npu128")).layers if r.name == "input_layernorm")
    assert norm(quad)["cores"] == 4 and norm(quad)["dram_bytes"] == 8192 == one.dram_bytes
    unicast = replace(quad, interconnect=replace(quad.interconnect, multicast=False))
    assert norm(unicast)["dram_bytes"] == 4 * 8192
