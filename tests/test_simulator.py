"""The analytical NPU simulator against SCALE-Sim v3's numbers and npukit's documented rules."""

import math

import pytest

from npukit.sim import (
    Arch,
    ConfigError,
    Layer,
    Workload,
    WorkloadError,
    gemm,
    llama3_8b_layer,
    load_arch,
    map_layer,
    minilm_l6,
    resnet18,
    simulate,
)
from npukit.sim.arch import Bits, PsumQuantHW, SramKiB
from npukit.sim.simulator import TRAFFIC_COLUMNS

BIG = SramKiB(ifmap=1 << 20, filter=1 << 20, psum=1 << 20, ofmap=1 << 20)


def arch(df="ws", r=128, c=128, **kw) -> Arch:
    """An arch with SCALE-Sim's fixed mapping (the compute-cycle parity mode) unless told otherwise."""
    kw.setdefault("mapping", "fixed")
    return Arch(rows=r, cols=c, dataflow=df, **kw)


# SCALE-Sim v3 totals on 128x128 (docs/references.md)
@pytest.mark.parametrize("df,total", [("ws", 441_581), ("os", 274_431), ("is", 629_829)])
def test_resnet18_compute_cycles_equal_scalesim(df, total):
    res = simulate(resnet18(), arch(df))
    assert res.compute_cycles == total
    assert len(res.layers) == 21
    assert res.macs == 1_814_073_344


@pytest.mark.parametrize("n,df,total", [(512, "ws", 14_303), (512, "os", 12_255), (1024, "ws", 89_983), (1024, "os", 81_791)])
def test_gemm_cycles_equal_scalesim(n, df, total):
    assert simulate(gemm(n, n, n), arch(df)).compute_cycles == total


def test_per_layer_formulas_mapping_efficiency_and_utilization():
    # conv1 of ResNet-18: M=12544, N=64, K=147 on 128x128 ws
    a = arch("ws")
    c = map_layer(Layer("conv1", 12544, 64, 147), a)
    assert c.folds == 2
    assert c.compute_cycles == 2 * (2 * 128 + 128 + 12544 - 2) - 1
    # folds: K rows 128 + 19 used, N cols 64 of 128 -> mean((128*64, 19*64)) / 128^2
    assert c.mapping_efficiency == pytest.approx(((128 * 64 + 19 * 64) / 2) / (128 * 128))
    r = simulate(Workload("w", [Layer("conv1", 12544, 64, 147)]), a).layers[0]
    assert r.utilization == pytest.approx(12544 * 64 * 147 / (c.compute_cycles * 128 * 128))


def test_double_buffered_formulas():
    M, N, K = 300, 200, 500
    for df, per, folds in (
        ("ws", M + 128 + 128 - 2, math.ceil(K / 128) * math.ceil(N / 128)),
        ("is", N + 128 + 128 - 2, math.ceil(K / 128) * math.ceil(M / 128)),
    ):
        c = map_layer(Layer("x", M, N, K), arch(df, timing="double-buffered"))
        assert c.compute_cycles == 128 + folds * per  # a count of cycles (the last index + 1)
    c = map_layer(Layer("x", M, N, K), arch("os", timing="double-buffered"))
    assert c.compute_cycles == math.ceil(M / 128) * math.ceil(N / 128) * K + 128 + 128 - 2
    # double buffering never loses against back-to-back folds
    for df in ("ws", "os", "is"):
        s = map_layer(Layer("x", M, N, K), arch(df)).compute_cycles
        d = map_layer(Layer("x", M, N, K), arch(df, timing="double-buffered")).compute_cycles
        assert d < s


def test_psum_traffic_is_explicit_and_scales_with_psum_bits():
    layer = Layer("x", 1000, 256, 1000)  # kf = 8 on 128 rows
    for df in ("ws", "is"):
        r32 = simulate(Workload("w", [layer]), arch(df, sram_kib=BIG))
        r8 = simulate(Workload("w", [layer]), arch(df, sram_kib=BIG, bits=Bits(psum_buffer=8)))
        upd = (math.ceil(1000 / 128) - 1) * 1000 * 256  # every K-fold after the first
        assert r32.ledger.count("psum_buffer", "sram_read") == upd
        assert r32.ledger.count("psum_buffer", "sram_write") == upd
        assert r32.layers[0].psum_buffer_bytes == 2 * upd * 4
        assert r8.layers[0].psum_buffer_bytes == 2 * upd * 1
        e32 = r32.energy_by_component()["psum_buffer"]
        e8 = r8.energy_by_component()["psum_buffer"]
        assert e8 == pytest.approx(e32 / 4)
    # output stationary keeps psums in the PEs
    r_os = simulate(Workload("w", [layer]), arch("os"))
    assert r_os.ledger.count("psum_buffer") == 0
    # one K-fold: no psum traffic at all
    assert simulate(Workload("w", [Layer("y", 100, 100, 128)]), arch("ws")).ledger.count("psum_buffer") == 0


def test_psum_spill_to_dram_when_buffer_too_small():
    layer = Layer("x", 4096, 128, 512)  # running psums per column fold: 4096*128*4 B = 2 MiB
    small = SramKiB(ifmap=1 << 16, filter=1 << 16, psum=1024, ofmap=1 << 16)  # 1 MiB psum buffer
    r = simulate(Workload("w", [layer]), arch("ws", sram_kib=small))
    upd = 3 * 4096 * 128
    resident = 3 * (1024 * 1024 // 4)
    assert r.ledger.count("psum_buffer", "sram_write") == resident
    dram_psum = sum(n for (_, comp, act, bits), n in r.ledger.counts.items() if comp == "dram" and bits == (32,))
    assert dram_psum == 2 * (upd - resident)


def test_dram_refetch_rule():
    layer = Layer("x", 2048, 512, 256)  # ws: 4 column folds
    fits = simulate(Workload("w", [layer]), arch("ws", sram_kib=BIG))
    assert fits.ledger.count("dram", "dram_read") == 2048 * 256 + 256 * 512  # ifmap once + weights once
    tight = SramKiB(ifmap=256, filter=1024, psum=4096, ofmap=1024)  # ifmap 512 KiB does not fit 256 KiB
    refetch = simulate(Workload("w", [layer]), arch("ws", sram_kib=tight))
    assert refetch.ledger.count("dram", "dram_read") == 2048 * 256 * 4 + 256 * 512
    assert fits.ledger.count("dram", "dram_write") == 2048 * 512  # outputs once


def test_stalls_appear_only_when_bandwidth_is_short():
    w = gemm(1024, 1024, 1024)
    fast = simulate(w, arch("ws", dram_bandwidth_bytes_per_cycle=1e6))
    slow = simulate(w, arch("ws", dram_bandwidth_bytes_per_cycle=1.0))
    assert slow.stall_cycles > 100 * fast.stall_cycles
    assert slow.compute_cycles == fast.compute_cycles
    # at 1 B/cycle the layer cannot finish before all its DRAM bytes have moved
    assert slow.cycles >= slow.layers[0].dram_bytes


def test_ledger_records_everything():
    r = simulate(resnet18(), load_arch("npu128").with_(mapping="fixed"))
    led = r.ledger
    assert led.count("pe_array", "mac") == 1_814_073_344
    assert led.total_cycles("compute") == 441_581
    assert set(led.energy_by("horowitz45", "component")) >= {
        "pe_array", "input_registers", "weight_registers", "psum_registers", "ifmap_sram",
        "filter_sram", "psum_buffer", "ofmap_sram", "dram"
    }
    assert led.energy("horowitz45") == pytest.approx(r.energy_pj)
    assert led.scopes(depth=2)[0] == "resnet18/conv1"


def test_batch_counts_as_back_to_back_gemms():
    one = simulate(Workload("w", [Layer("h", 128, 128, 32)]), arch("ws"))
    many = simulate(Workload("w", [Layer("h", 128, 128, 32, batch=12)]), arch("ws"))
    assert many.compute_cycles == 12 * one.compute_cycles
    assert many.energy_pj == pytest.approx(12 * one.energy_pj)


def test_transformer_workloads_shapes():
    m = minilm_l6()
    assert len(m) == 6 * 8
    # 6 layers x (4 * 128*384*384 + 2 * 12*128*128*32 + 2 * 128*384*1536)
    assert m.macs == 6 * (4 * 128 * 384 * 384 + 2 * 12 * 128 * 128 * 32 + 2 * 128 * 384 * 1536)
    pre = llama3_8b_layer(seq=1024)
    dec = llama3_8b_layer(seq=1024, phase="decode")
    assert pre.gemms[1].N == 1024 and pre.gemms[3].batch == 32
    assert all(layer.M == 1 for layer in dec.gemms)
    assert pre.macs > 500 * dec.macs


def test_buffer_too_small_for_one_fold():
    a = arch("ws", sram_kib=SramKiB(ifmap=64, filter=8, psum=64, ofmap=64))
    with pytest.raises(ConfigError, match=r"filter SRAM \(8 KiB\) is too small for one fold.*sram_kib.filter >= 16"):
        simulate(resnet18(), a)
    a = arch("is", timing="double-buffered", sram_kib=SramKiB(ifmap=16, filter=64, psum=64, ofmap=64))
    with pytest.raises(ConfigError, match="ifmap SRAM"):
        simulate(resnet18(), a)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"rows": 0}, "rows"),
        ({"cols": -4}, "cols"),
        ({"dataflow": "rs"}, "unknown dataflow"),
        ({"timing": "fast"}, "unknown timing"),
        ({"bits": Bits(psum_buffer=0)}, "bits.psum_buffer"),
        ({"dram_bandwidth_bytes_per_cycle": 0}, "dram_bandwidth"),
    ],
)
def test_bad_arch_values(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        Arch(**kw)


def test_arch_overrides():
    a = load_arch("npu128").with_(**{"bits.psum_buffer": 8, "rows": 64, "sram_kib.psum": 256})
    assert (a.bits.psum_buffer, a.rows, a.sram_kib.psum, a.bits.input) == (8, 64, 256, 8)
    with pytest.raises(ConfigError, match="bits.psumm"):
        a.with_(**{"bits.psumm": 8})
    with pytest.raises(ConfigError, match="unknown arch key 'depth'"):
        a.with_(depth=3)


def test_per_operand_traffic_in_rows():
    layer = Layer("x", 1000, 256, 1000)
    static = PsumQuantHW(policy="static")  # no feature pass over the input (see test_psum_path)
    r = simulate(Workload("w", [layer]), arch("ws", sram_kib=BIG, bits=Bits(psum_buffer=16), psum_quant=static))
    row = r.rows()[0]
    upd = (math.ceil(1000 / 128) - 1) * 1000 * 256
    assert row["sram_psum_read_bytes"] == row["sram_psum_write_bytes"] == upd * 2
    assert row["sram_filter_read_bytes"] == 1000 * 256  # each 8-bit weight read once
    assert row["sram_ifmap_read_bytes"] == 1000 * 1000 * 2  # streamed once per column fold
    assert row["dram_ofmap_write_bytes"] == 1000 * 256  # 8-bit outputs written once
    assert row["dram_ifmap_read_bytes"] == 1000 * 1000 and row["dram_filter_read_bytes"] == 1000 * 256
    dram = sum(row[k] for k in TRAFFIC_COLUMNS if k.startswith("dram_"))
    assert dram == pytest.approx(r.layers[0].dram_bytes)
    # SRAM fills equal DRAM reads; the ofmap SRAM drains what DRAM receives
    assert row["sram_ifmap_write_bytes"] == row["dram_ifmap_read_bytes"]
    assert row["sram_ofmap_read_bytes"] == row["dram_ofmap_write_bytes"]
    assert row["energy_total_pj"] == pytest.approx(row["energy_onchip_pj"] + row["energy_dram_pj"])


def test_grouped_query_attention_fetches_each_kv_head_once():
    # Llama-3.1-8B decode over 4,096 cached tokens: 32 query heads read 8 KV heads' keys
    one = Workload("w", [Layer("scores", 1, 4097, 128, batch=32, kind="attention")])
    gqa = Workload("w", [Layer("scores", 1, 4097, 128, batch=32, kind="attention", shared=4)])
    a = arch("ws")
    full, shared = simulate(one, a).layers[0], simulate(gqa, a).layers[0]
    assert full.traffic_bytes["dram_filter_read_bytes"] == 32 * 128 * 4097
    assert shared.traffic_bytes["dram_filter_read_bytes"] == 8 * 128 * 4097
    assert shared.dram_bytes == full.dram_bytes - 24 * 128 * 4097
    assert shared.macs == full.macs and shared.compute_cycles == full.compute_cycles
    led = simulate(gqa, a).ledger
    assert led.count("dram", "dram_read") == 8 * 128 * 4097 + 32 * 128  # keys once per KV head; queries
    with pytest.raises(WorkloadError, match="shared = 3 must divide batch = 32"):
        Layer("x", 1, 2, 3, batch=32, shared=3)


def test_repeated_layer_shapes_are_mapped_once_with_equal_results():
    from npukit.sim import Ledger
    from npukit.sim.simulator import simulate_layer

    w = minilm_l6(seq=64)  # six identical encoder layers
    a = Arch()
    res = simulate(w, a)
    fresh = [simulate_layer(layer, a, Ledger(), f"x/{layer.name}") for layer in w.gemms]
    assert [(r.compute_cycles, r.stall_cycles, r.mapping, r.traffic_bytes) for r in res.layers] == [
        (r.compute_cycles, r.stall_cycles, r.mapping, r.traffic_bytes) for r in fresh]


def test_cycles_never_below_macs_per_pe_on_a_1x1_double_buffered_array() -> None:
    """On a 1x1 os array with double-buffered accumulators every cycle is a MAC and the drain is hidden, so the
    compute cycles equal the MACs; the last-cycle index (one fewer per GEMM) was reported as the count before."""
    a = Arch(rows=1, cols=1, dataflow="os", timing="double-buffered", mapping="fixed")
    for M, N, K, batch in ((4, 4, 4, 1), (7, 3, 5, 3), (1, 1, 9, 2), (64, 32, 48, 5)):
        c = map_layer(Layer("x", M, N, K, batch), a)
        assert c.compute_cycles >= c.macs, (M, N, K, batch, c.compute_cycles, c.macs)
    for df in ("ws", "os", "is"):
        for r, cols in ((1, 1), (1, 3), (4, 1), (8, 8)):
            c = map_layer(Layer("x", 37, 21, 29), Arch(rows=r, cols=cols, dataflow=df, timing="double-buffered"))
            assert c.compute_cycles * r * cols >= c.macs, (df, r, cols)
