"""A conv split on M across cores gives each core a band of output image rows: it reads its input rows with the
halo, not its im2col rows (sim/_multicore_cost.py: _conv_band); split on K, its input channels (_conv_channels)."""

from npukit.sim import conv_layer
from npukit.sim._multicore_cost import sub_layer
from npukit.sim._reuse import unique_total


def test_conv_band_reads_its_rows_plus_halo() -> None:
    layer = conv_layer("c", 18, 18, 3, 3, 16, 16, 1)  # 16 x 16 outputs
    bands = [sub_layer(layer, "M", 4, i) for i in range(4)]
    assert [b.M for b in bands] == [64, 64, 64, 64]  # 4 output rows of 16 each
    assert sum(b.macs for b in bands) == layer.macs
    assert all(b.conv[:2] == (6, 18) for b in bands)  # (4 - 1) * 1 + 3 input rows, full width
    # each core's unique input: its 4 rows plus 2 halo rows; the four bands re-read 3 x 2 rows
    per_core = [unique_total(b) for b in bands]
    assert per_core == [6 * 18 * 16] * 4
    assert sum(per_core) - unique_total(layer) == 3 * 2 * 18 * 16
    # far below the im2col rows a plain GEMM split would read
    assert per_core[0] < bands[0].M * bands[0].K / 5


def test_conv_band_uneven_and_strided() -> None:
    layer = conv_layer("c", 9, 9, 3, 3, 4, 8, 2)  # 4 x 4 outputs, stride 2
    bands = [sub_layer(layer, "M", 3, i) for i in range(3)]
    assert [b.M for b in bands[:2]] == [8, 8]
    assert bands[2] is None  # ceil(4 / 3) = 2 rows per core: the third core gets none
    assert bands[0].conv[0] == (2 - 1) * 2 + 3
    assert sum(b.macs for b in bands if b) == layer.macs


def test_flattened_conv_map_feeds_the_head_gemm() -> None:
    from npukit.sim import Layer, VectorOp, Workload
    from npukit.sim.multicore import load_multicore_arch
    from npukit.sim.multicore_sim import simulate_multicore
    from npukit.sim.schedule import fusion_groups

    conv = conv_layer("conv", 18, 18, 3, 3, 8, 16, 1)  # 16 x 16 x 16 out
    head = Layer("fc", 1, 10, 16 * 16 * 16)
    wl = Workload("cnn_head", [conv, VectorOp("relu", "other", 16 * 16 * 16), head])
    assert fusion_groups(wl, "chain") == [(0, 2)]
    assert fusion_groups(Workload("x", [conv, Layer("fc", 1, 10, 4095)]), "chain") == []  # not the whole map
    mc = load_multicore_arch("quad128")
    plain = {r["name"]: r["dram_bytes"] for r in simulate_multicore(wl, mc, "none/split").rows()}
    fused = {r["name"]: r["dram_bytes"] for r in simulate_multicore(wl, mc, "chain/split").rows()}
    inter = 16 * 16 * 16 * mc.cores[0].arch.bits.output / 8
    assert plain["conv"] - fused["conv"] == inter  # the map is not written out
    assert plain["fc"] - fused["fc"] == inter  # nor read back


def test_fused_conv_bands_exchange_their_halo_rows() -> None:
    from npukit.sim import Workload, load_arch
    from npukit.sim._multicore_cost import halo_elements
    from npukit.sim.multicore import homogeneous
    from npukit.sim.multicore_sim import simulate_multicore

    a = conv_layer("a", 34, 34, 3, 3, 32, 32, 1)  # 32 x 32 x 32 out
    b = conv_layer("b", 34, 34, 3, 3, 32, 32, 1)  # reads a's output, zero-padded by 1
    # 4 bands of 8 rows: core 0 reads rows 0..9 of b's padded input = padding, its 8 rows, core 1's first row
    assert [halo_elements(a, b, 4, i) for i in range(4)] == [32 * 32, 2 * 32 * 32, 2 * 32 * 32, 32 * 32]
    assert halo_elements(a, b, 1, 0) == 0
    fused = simulate_multicore(Workload("two", [a, b]), homogeneous(load_arch("npu32"), 4), "chain/split")
    ra, rb = (next(r for r in fused.rows() if r["name"] == n) for n in "ab")
    assert ra["split"] == rb["split"] == "M"  # both on row bands: the 6 halo rows cross, nothing else
    assert rb["interconnect_bytes"] == 6 * 32 * 32


def test_conv_reduction_split_gives_each_core_its_input_channels() -> None:
    layer = conv_layer("c", 18, 18, 3, 3, 16, 32, 1)
    parts = [sub_layer(layer, "K", 4, i) for i in range(4)]
    assert all(p.conv[4] == 4 and p.K == 3 * 3 * 4 and p.N == 32 and p.M == layer.M for p in parts)
    assert sum(p.macs for p in parts) == layer.macs
    # together the cores read the input once: each its channels' slice, not im2col rows
    assert sum(unique_total(p) for p in parts) == unique_total(layer) == 18 * 18 * 16
    # fewer input channels than cores: the rest stay idle
    rgb = conv_layer("rgb", 18, 18, 3, 3, 3, 8, 1)
    shares = [sub_layer(rgb, "K", 4, i) for i in range(4)]
    assert shares[3] is None and sum(s.macs for s in shares[:3]) == rgb.macs
