"""SCALE-Sim memory mode: per-layer access counts equal SCALE-Sim 3.0.0's own reports.

Every golden number below was produced by SCALE-Sim itself (``pip install scalesim==3.0.0
'numpy<2.4'`` in its own virtualenv, never an npukit dependency), CALC bandwidth mode, from its
COMPUTE_REPORT.csv ("Total Cycles", "Stall Cycles") and DETAILED_ACCESS_REPORT.csv, on the .cfg and
topology CSV each case writes. ``benchmarks/bench_vs_scalesim.py`` re-runs SCALE-Sim side by side.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.sim import load_scalesim_cfg, load_topology_csv, map_layer, simulate

CFG = """[general]
run_name = golden

[architecture_presets]
ArrayHeight:    {rows}
ArrayWidth:     {cols}
IfmapSramSzkB:    {ifmap}
FilterSramSzkB:   {filt}
OfmapSramSzkB:    {ofmap}
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Dataflow : {df}
Bandwidth : 10
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""
TOPO_HEAD = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
# (cycles, SRAM IFMAP reads, SRAM Filter reads, SRAM OFMAP writes, DRAM IFMAP reads, DRAM Filter reads,
#  DRAM OFMAP writes) per layer, as SCALE-Sim 3.0.0 reports them
FIELDS = ("compute_cycles", "ifmap_reads", "filter_reads", "ofmap_writes", "ifmap_dram", "filter_dram", "ofmap_dram")
CASES = [
    # rows, cols, dataflow, ifmap/filter/ofmap SRAM kB; layers: (topology row, golden)
    ((4, 16, "ws", 1, 1, 32), [
        (("l0", 20, 20, 3, 3, 24, 16, 1), (18683, 69984, 3456, 279936, 69984, 3456, 279951)),  # ifmap > SRAM
        (("l1", 19, 19, 5, 5, 8, 5, 2), (4299, 12800, 1000, 16000, 12800, 1000, 16000)),
    ]),
    ((4, 8, "os", 16, 16, 1), [
        (("l0", 18, 18, 5, 5, 24, 16, 1), (59779, 235200, 470400, 4312, 7776, 12950, 3143)),
        (("l1", 16, 16, 5, 5, 3, 16, 1), (6119, 21600, 43200, 3168, 768, 1200, 2311)),
    ]),
    ((4, 4, "is", 64, 64, 2), [
        (("l0", 9, 9, 1, 1, 24, 33, 2), (1805, 600, 5544, 4950, 600, 792, 4953)),
        (("l1", 17, 17, 1, 1, 24, 33, 1), (18833, 6936, 57816, 57222, 6936, 792, 57225)),
    ]),
    ((8, 4, "ws", 2, 2, 8), [
        (("l0", 5, 5, 3, 3, 24, 33, 2), (5345, 7776, 7128, 3564, 600, 7128, 3564)),
        (("l1", 9, 9, 5, 5, 16, 5, 1), (4299, 20000, 2000, 6250, 3864, 2000, 6253)),
    ]),
    ((16, 16, "os", 64, 64, 32), [
        (("l0", 14, 14, 3, 3, 16, 33, 1), (4697, 62208, 42768, 5616, 3136, 4752, 4752)),
        (("l1", 6, 6, 3, 3, 24, 5, 2), (245, 1944, 1080, 77, 864, 1080, 45)),
    ]),
    ((8, 8, "ws", 1, 1, 2), [
        (("l0", 14, 14, 3, 3, 24, 33, 1), (22409, 155520, 7128, 128304, 155520, 7128, 128311)),
        (("l1", 19, 19, 1, 1, 8, 5, 1), (382, 2888, 40, 1805, 2888, 40, 1812)),
    ]),
]
# ResNet-18 layer1.0.conv1 (58x58x64 padded input, 3x3, 64 filters) on 128x128 with 1 MiB SRAMs
RESNET_L1 = {
    "ws": (17589, 1806336, 36864, 1003520, 215296, 36864, 1003647),
    "os": (20749, 1806336, 921600, 207104, 215296, 36864, 200704),
    "is": (55749, 1806336, 921600, 1003520, 215296, 36864, 1003647),
}


def _load(tmp_path: Path, arch: tuple, layers: list[tuple]) -> tuple:
    rows, cols, df, ifmap, filt, ofmap = arch
    cfg = tmp_path / "golden.cfg"
    cfg.write_text(CFG.format(rows=rows, cols=cols, df=df, ifmap=ifmap, filt=filt, ofmap=ofmap))
    topo = tmp_path / "topo.csv"
    topo.write_text(TOPO_HEAD + "".join(", ".join(map(str, t)) + ",\n" for t in layers))
    return load_scalesim_cfg(cfg), load_topology_csv(topo)


@pytest.mark.parametrize("arch,layers", CASES, ids=[f"{a[2]}-{a[0]}x{a[1]}-{a[3]}kB" for a, _ in CASES])
def test_access_counts_equal_scalesim(tmp_path: Path, arch: tuple, layers: list) -> None:
    a, w = _load(tmp_path, arch, [t for t, _ in layers])
    assert a.memory == "scalesim" and a.mapping == "fixed" and a.bandwidth_mode == "calc"
    for layer, (_, golden) in zip(w.layers, layers, strict=True):
        c = map_layer(layer, a)
        assert tuple(getattr(c, f) for f in FIELDS) == golden, layer.name
        assert c.scalesim_stall_cycles == 0  # SCALE-Sim's "Stall Cycles" on all of these


@pytest.mark.parametrize("df", ["ws", "os", "is"])
def test_resnet18_layer1_conv1_equals_scalesim(tmp_path: Path, df: str) -> None:
    a, w = _load(tmp_path, (128, 128, df, 1024, 1024, 1024), [("layer1.0.conv1", 58, 58, 3, 3, 64, 64, 1)])
    c = map_layer(w.layers[0], a)
    assert tuple(getattr(c, f) for f in FIELDS) == RESNET_L1[df]


def test_npukit_memory_differs_only_in_traffic_not_cycles(tmp_path: Path) -> None:
    # the same layer in npukit's own memory model: identical compute cycles and ifmap DRAM reads
    # (both count the unique padded input), but outputs leave once (a psum buffer holds the
    # running sums) instead of once per K-fold
    a, w = _load(tmp_path, (128, 128, "ws", 1024, 1024, 1024), [("layer1.0.conv1", 58, 58, 3, 3, 64, 64, 1)])
    own = a.with_(memory="npukit")
    c = map_layer(w.layers[0], own)
    ref = RESNET_L1["ws"]
    assert c.compute_cycles == ref[0] and c.ifmap_dram == ref[4] and c.filter_dram == ref[5]
    assert c.ofmap_dram == 56 * 56 * 64 < ref[6]
    r_own, r_ss = simulate(w, own), simulate(w, a)
    assert r_own.compute_cycles == r_ss.compute_cycles
    assert r_own.layers[0].traffic_bytes["dram_ofmap_write_bytes"] < r_ss.layers[0].traffic_bytes["dram_ofmap_write_bytes"]


def test_closed_forms_equal_the_request_replay() -> None:
    # the numpy/numba-free CALC closed forms (ofmap drains from drain to drain, filter misses of repeated
    # passes) against the row-by-row replay kernels, on random layers with small buffers
    import random

    import numpy as np

    from npukit.sim import _scalesim_memory as sm
    from npukit.sim._scalesim_kernels import _misses_is_filter, _misses_os_filter, _ofmap_drain
    from npukit.sim.workload import Layer

    rng = random.Random(7)
    base = load_scalesim_cfg_like()
    drained = 0
    for _ in range(60):
        r, c, df = rng.choice((2, 4, 8, 32)), rng.choice((2, 4, 8, 32)), rng.choice(("ws", "os", "is"))
        fh = rng.choice((1, 3))
        h = rng.randint(fh, 20)
        conv = (h, h, fh, fh, rng.randint(1, 24), rng.randint(1, 64), rng.choice((1, 2)))
        oh = (h - fh) // conv[6] + 1
        layer = Layer("x", oh * oh, conv[5], fh * fh * conv[4], conv=conv)
        arch = base.with_(rows=r, cols=c, dataflow=df, **{"sram_kib.ofmap": rng.choice((1, 2)), "sram_kib.filter": 1})
        m, n, k = sm.scalesim_shape(layer)
        total = int(arch.sram_bytes("ofmap"))
        active = -(-total // 2)
        if df == "os":
            mf, nf = -(-m // r), -(-n // c)
            lanes = [min(c, n - fc * c) for fc in range(nf) for _ in range(mf)]
            ru = [min(r, m - fr * r) for _ in range(nf) for fr in range(mf)]
            rows, p, t = r + c + k - 2, k - 1, r
        else:
            t, sc = (m, n) if df == "ws" else (n, m)
            kf, cf = -(-k // r), -(-sc // c)
            lanes, ru = [min(c, sc - fc * c) for fc in range(cf) for _ in range(kf)], [0] * (kf * cf)
            rows, p = 2 * r + c + t - 2, 2 * r - 1
        ref = _ofmap_drain(np.asarray(lanes, np.int64), np.asarray(ru, np.int64), np.asarray([rows] * len(lanes), np.int64),
                           p, t, r, df == "os", c, active, total - active)
        assert ref[1] == 0 and sm._ofmap_stall_free(lanes, ru, rows, p, t, r, df == "os", c, active, total - active) == ref[0]
        drained += ref[0] > total
        if df != "ws":
            e = sm.epoch_length(arch.sram_bytes("filter"))
            mf = -(-m // (r if df == "os" else c))
            want = _misses_os_filter(k, n, c, mf, e) if df == "os" else _misses_is_filter(k, n, r, mf, e)
            assert sm._filter_misses(layer, arch) == want
    assert drained > 10  # most cases drain several times mid-layer


def load_scalesim_cfg_like():
    from npukit.sim import load_arch

    return load_arch("npu128").with_(memory="scalesim", mapping="fixed", bandwidth_mode="calc")
