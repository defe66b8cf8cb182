"""The general accelerator description, ZigZag file reader, loop-nest cost and mapper (npukit.sim.nest_*).

Golden access counts come from ZigZag 3.9.1 itself, run as ``benchmarks/bench_vs_zigzag.py --all`` runs it:

    .peers/zigzag/bin/python -c "from zigzag.api import get_hardware_performance_zigzag as g; import zigzag, os;
        b = os.path.dirname(zigzag.__file__) + '/inputs'; g(workload=b + '/workload/resnet18.onnx',
        accelerator=b + '/hardware/HW.yaml', mapping=b + '/mapping/MAP.yaml', opt='energy', dump_folder='zz')"

with (HW, MAP) = (tpu_like, tpu_like), (edge_tpu_like, edge_tpu_like), (eyeriss_like, default); each case
below is one layer's ``zz/<layer>_complete.json``: its spatial mapping, the temporal mapping ZigZag chose,
and ``outputs.memory.word_accesses`` (rd_out_to_low, wr_in_by_low, rd_out_to_high, wr_in_by_high per level).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import conv_layer
from npukit.sim.errors import ConfigError
from npukit.sim.loopnest import NestLayer, evaluate
from npukit.sim.nest_mapper import map_layer, temporal_lpfs
from npukit.sim.nest_sim import nest_layer, parse_zigzag_spec
from npukit.sim.zigzag_io import load_zigzag_hardware

ZZ = Path(__file__).resolve().parent.parent / "examples" / "zigzag"
MAPS = {"eyeriss_like": "default", "meta_prototype": "meta_prototype_like"}
ARCHS = ("tpu_like", "edge_tpu_like", "eyeriss_like", "meta_prototype", "tesla_npu_like", "ascend_like",
         "gemm_l1", "gemm_l1_l3")


def _tm(d: dict[str, list[list[str]]]) -> dict:
    return {op: [[(s.split(",")[0].strip("( "), int(s.split(",")[1].strip(" )"))) for s in lv] for lv in lvs]
            for op, lvs in d.items()}


GOLDEN = [
    ("tpu_like", NestLayer("conv1", {"B": 1, "K": 64, "G": 1, "OX": 112, "OY": 112, "C": 3, "FX": 7, "FY": 7},
                           (2, 2), (224, 224)),
     {"D1": {"K": 32}, "D2": {"C": 3}},
     {"O": [["(FX, 7)", "(FY, 7)"], ["(OY, 16)", "(OY, 7)", "(OX, 112)", "(K, 2)"], []],
      "W": [["(FX, 7)", "(FY, 7)", "(OY, 16)", "(OY, 7)", "(OX, 112)", "(K, 2)"], []],
      "I": [["(FX, 7)", "(FY, 7)", "(OY, 16)", "(OY, 7)", "(OX, 112)", "(K, 2)"], []]},
     {"O": [[118013952, 118013952, 2408448, 0], [0, 3136, 3136, 0], [0, 100352, 0, 0]],
      "W": [[118013952, 0, 0, 9408], [1176, 0, 0, 0]], "I": [[38416, 0, 0, 588], [18816, 0, 0, 0]]},
     128899782.592),
    ("edge_tpu_like", NestLayer("layer3.1.conv1", {"B": 1, "K": 256, "G": 1, "OX": 14, "OY": 14, "C": 256, "FX": 3,
                                                   "FY": 3}, (1, 1), (14, 14)),
     {"D1": {"K": 8}, "D2": {"C": 8}, "D3": {"OX": 4}, "D4": {"OY": 4}},
     {"O": [["(C, 32)", "(FY, 3)", "(FX, 3)"], ["(OY, 4)", "(OX, 4)", "(K, 32)"], []],
      "W": [[], ["(C, 32)", "(FY, 3)", "(FX, 3)", "(OY, 4)", "(OX, 4)"], ["(K, 32)"]],
      "I": [["(C, 32)", "(FY, 3)", "(FX, 3)", "(OY, 4)", "(OX, 4)", "(K, 32)"], []]},
     {"O": [[14450688, 14450688, 50176, 0], [0, 208, 196, 0], [0, 6272, 0, 0]],
      "W": [[9437184, 0, 0, 9437184], [147456, 0, 0, 9216], [73728, 0, 0, 0]],
      "I": [[41472, 0, 0, 196], [6272, 0, 0, 0]]},
     87445489.92),
    ("eyeriss_like", NestLayer("layer1.0.conv1", {"B": 1, "K": 64, "G": 1, "OX": 56, "OY": 56, "C": 64, "FX": 3,
                                                  "FY": 3}, (1, 1), (56, 56)),
     {"D1": {"K": 14}, "D2": {"C": 12}},
     {"O": [["(K, 5)", "(FX, 3)", "(FY, 3)"], ["(OY, 56)", "(C, 6)"], ["(OX, 56)"], []],
      "W": [["(K, 5)", "(FX, 3)", "(FY, 3)", "(OY, 56)"], ["(C, 6)", "(OX, 56)"], []],
      "I": [["(K, 5)", "(FX, 3)", "(FY, 3)"], ["(OY, 56)", "(C, 6)", "(OX, 56)"], []]},
     {"O": [[116000640, 116000640, 10311168, 10311168], [169344, 169344, 12544, 0], [0, 4200, 4182, 0],
            [0, 25088, 0, 0]],
      "W": [[116000640, 0, 0, 2071440], [129696, 0, 0, 2304], [4608, 0, 0, 0]],
      "I": [[23200128, 0, 0, 23200128], [56448, 0, 0, 4182], [25088, 0, 0, 0]]},
     745949420.0),
]


@pytest.mark.parametrize("arch,layer,sm,tm,golden,energy", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_access_counts_equal_zigzag(arch, layer, sm, tm, golden, energy) -> None:
    hw = load_zigzag_hardware(ZZ / "hardware" / f"{arch}.yaml")
    cost = evaluate(hw, layer, sm, _tm(tm))
    for op, levels in golden.items():
        assert len(cost.accesses[op]) == len(levels)
        for m, (tl, fl, th, fh) in enumerate(levels):
            got = cost.accesses[op][m]
            assert [got["tl"], got["fl"], got["th"], got["fh"]] == pytest.approx([tl, fl, th, fh], abs=1), (op, m)
    assert cost.energy_pj == pytest.approx(energy, rel=1e-6)


def _topology(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.csv"
    p.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
                 "c1, 8, 8, 1, 1, 64, 64, 1,\nc2, 10, 10, 3, 3, 8, 8, 2,\nfc, 1, 1, 1, 1, 64, 10, 1,\n")
    return p


@pytest.mark.parametrize("arch", [a if a == "tpu_like" else pytest.param(a, marks=pytest.mark.slow) for a in ARCHS])
def test_cli_runs_each_bundled_accelerator(arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"zigzag:{ZZ}/hardware/{arch}.yaml,{ZZ}/mapping/{MAPS.get(arch, arch)}.yaml"
    rc = main(["sim", "--arch", spec, "--workload", str(_topology(tmp_path)), "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "spatial: parfor" in out and "total:" in out
    assert len(list((tmp_path / "o").glob("*.mapping.json"))) == 1


def test_variant_with_other_sizes(tmp_path: Path) -> None:
    """tpu_like with a 16 x 8 array and a smaller SRAM: unrollings clip to 16 and 8, more temporal cycles."""
    text = (ZZ / "hardware" / "tpu_like.yaml").read_text().replace("sizes: [32, 32]", "sizes: [16, 8]")
    text = text.replace("size: 16777216", "size: 1048576")
    var = tmp_path / "tpu_small.yaml"
    var.write_text(text)
    hw, sp = parse_zigzag_spec(f"zigzag:{var},{ZZ}/mapping/tpu_like.yaml")
    base, _ = parse_zigzag_spec(f"zigzag:{ZZ}/hardware/tpu_like.yaml")
    assert hw.array.dims == {"D1": 16, "D2": 8} and hw.memories[2].size_bits == 1048576
    layer = NestLayer("l", {"B": 1, "K": 64, "C": 64, "OY": 28, "OX": 28, "FY": 3, "FX": 3, "G": 1}, (1, 1), (28, 28))
    small = map_layer(hw, layer, sp["default"])
    big = map_layer(base, layer, sp["default"])
    assert small.spatial == {"D1": {"K": 16}, "D2": {"C": 8}}
    assert small.cost.temporal_cycles == 4 * 8 * 28 * 28 * 9 and big.cost.temporal_cycles == 2 * 2 * 28 * 28 * 9


def _hw(name: str = "tpu_like"):
    return load_zigzag_hardware(ZZ / "hardware" / f"{name}.yaml")


LAYER = NestLayer("l", {"B": 1, "K": 128, "C": 64, "OY": 14, "OX": 14, "FY": 3, "FX": 3, "G": 1}, (1, 1), (14, 14))


def test_mapper_beats_a_naive_nest() -> None:
    """Every temporal loop in DRAM (no reuse on chip) costs more than the searched mapping."""
    hw = _hw()
    sm = {"D1": {"K": 32}, "D2": {"C": 32}}
    naive = {op: [[] for _ in hw.levels(op)] for op in "WIO"}
    for op in "WIO":
        naive[op][-1] = [("K", 4), ("C", 2), ("OY", 14), ("OX", 14), ("FY", 3), ("FX", 3)]
    best = map_layer(hw, LAYER, sm)
    assert best.cost.energy_pj < 0.5 * evaluate(hw, LAYER, sm, naive).energy_pj
    assert best.cost.energy_pj == pytest.approx(evaluate(hw, LAYER, sm, best.temporal).energy_pj)


def test_objectives_trade_energy_and_latency() -> None:
    hw = _hw("edge_tpu_like")
    sm = {"D1": {"K": 8}, "D2": {"C": 8}, "D3": {"OX": 4}, "D4": {"OY": 4}}
    layer = NestLayer("pw", {"B": 1, "K": 128, "C": 64, "OY": 14, "OX": 14, "FY": 1, "FX": 1, "G": 1}, (1, 1), (14, 14))
    e, lat, edp = (map_layer(hw, layer, sm, obj) for obj in ("energy", "latency", "edp"))
    assert e.cost.energy_pj <= lat.cost.energy_pj and lat.cost.cycles <= e.cost.cycles
    assert edp.cost.energy_pj * edp.cost.cycles <= e.cost.energy_pj * e.cost.cycles * (1 + 1e-12)


def test_depthwise_searches_a_spatial_unrolling_of_its_own() -> None:
    """A depthwise conv (npukit: batch = groups) becomes G = groups, K = C = 1; without a mapping file the
    mapper finds an unrolling of its own that beats ZigZag's bundled one (K and C unrolled: 16 of 1,024
    PEs busy) in energy and in cycles."""
    layer = conv_layer("dw", 30, 30, 3, 3, 1, 1, 1)
    from dataclasses import replace

    nl = nest_layer(replace(layer, batch=64))
    assert nl.dims["G"] == 64 and nl.dims["K"] == 1 and nl.dims["C"] == 1 and nl.in_extent == (28, 28)
    hw = _hw("edge_tpu_like")
    m = map_layer(hw, nl)
    fixed = map_layer(hw, nl, {"D1": {"K": 8}, "D2": {"C": 8}, "D3": {"OX": 4}, "D4": {"OY": 4}})
    assert fixed.spatial == {"D1": {}, "D2": {}, "D3": {"OX": 4}, "D4": {"OY": 4}}
    assert m.cost.energy_pj < fixed.cost.energy_pj and m.cost.cycles < fixed.cost.cycles
    assert m.cost.temporal_cycles * 1024 >= nl.macs


def test_identical_shapes_are_mapped_once() -> None:
    hw = _hw()
    sm = {"D1": {"K": 32}, "D2": {"C": 32}}
    a = map_layer(hw, LAYER, sm)
    b = map_layer(hw, NestLayer("other", dict(LAYER.dims), LAYER.stride, LAYER.in_extent), sm)
    assert b.layer.name == "other" and b.temporal is a.temporal


def test_loop_prime_factors_are_limited_as_zigzag_does() -> None:
    """ZigZag 3.9.1 merges the two smallest factors of the dimension with the most, ties broken in its
    conv dimension order (B, K, G, OX, OY, C, FX, FY). Its eyeriss_like run of MobileNetV2's
    features.5.conv.1.0 (depthwise, G = 192, 28x28, 3x3, nothing unrolled) ordered these factors:
    OY 7, FX 3, FY 3, OY 4, OX 28, G 192. In npukit's own order (OY before OX, G last) the ties fall
    on other dimensions and the loop space differs (that layer cost 26% more energy)."""
    dw = NestLayer("dw", {"B": 1, "K": 1, "C": 1, "OY": 28, "OX": 28, "FY": 3, "FX": 3, "G": 192}, (1, 1), (28, 28))
    lpfs = temporal_lpfs(dw, {"D1": {}, "D2": {}})
    assert sorted(lpfs) == sorted([("OY", 7), ("OY", 4), ("OX", 28), ("FX", 3), ("FY", 3), ("G", 192)])
    # GEMM: ZigZag lists C, B (its D), K; 7 factors -> 6 merges one, and C wins the C/K tie
    gemm = NestLayer("fc", {"B": 2, "K": 8, "C": 8, "OY": 1, "OX": 1, "FY": 1, "FX": 1, "G": 1})
    lp = temporal_lpfs(gemm, {})
    assert sorted(f for d, f in lp if d == "C") == [2, 4] and sorted(f for d, f in lp if d == "K") == [2, 2, 2]


def test_bad_zigzag_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="array dimension D9"):
        map_layer(_hw(), LAYER, {"D9": {"K": 4}})
    capsys.readouterr()  # tpu_like.yaml's warning (a key written twice in ZigZag's own file)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmemories: {}\n")
    from _cli_util import refused

    refused(["sim", "--arch", f"zigzag:{bad}", "--out", str(tmp_path / "o")], capsys, "operational_array")
    assert not (tmp_path / "o").exists()


def test_number_formats_change_widths_and_mac_energy() -> None:
    from npukit.sim import load_table
    from npukit.sim.formats import mac_energy

    t = load_table("horowitz45")
    assert mac_energy(t, "fp32", "fp32") == (pytest.approx(3.7 + 0.9), False)  # Horowitz 2014, cited
    assert mac_energy(t, "bf16", "bf16")[1] and mac_energy(t, "fp8", "fp8")[1]  # estimates say so
    e = {f: mac_energy(t, f, f)[0] for f in ("int4", "int8", "int16", "fp8", "bf16", "fp16", "fp32")}
    assert e["int4"] < e["int8"] < e["int16"] < e["fp32"] and e["fp8"] < e["bf16"] < e["fp16"] < e["fp32"]
    hw = _hw()
    sm = {"D1": {"K": 32}, "D2": {"C": 32}}
    layer = NestLayer("pw", {"B": 1, "K": 64, "C": 64, "OY": 7, "OX": 7, "FY": 1, "FX": 1, "G": 1}, (1, 1), (7, 7))
    i8, f16 = (map_layer(hw.with_formats(t, f, f, psum_buffer_bits=16), layer, sm) for f in ("int8", "fp16"))
    assert i8.cost.mac_pj * 2.0 / 0.3 == pytest.approx(f16.cost.mac_pj)
    assert f16.cost.energy["W"][-1] == pytest.approx(2 * i8.cost.energy["W"][-1], rel=0.05)  # DRAM W bits x2


@pytest.mark.parametrize("name", ["npu32", "npu128"])
def test_todays_archs_are_special_cases(name: str) -> None:
    """npu32/npu128 (and any TOML or SCALE-Sim .cfg Arch) restated as Hardware: a rows x cols array whose
    dataflow fixes the unrolling (ws: C on rows, K on columns), per-PE registers, SRAMs, DRAM."""
    from npukit.sim import load_arch, load_table
    from npukit.sim.arch_hardware import hardware_from_arch

    arch = load_arch(name)
    hw, sm = hardware_from_arch(arch, load_table(arch.energy_table))
    assert hw.array.dims == {"D1": arch.rows, "D2": arch.cols}
    assert [m.name for m in hw.levels("W")] == ["pe_I2_register", "filter_sram", "dram"]
    layer = NestLayer("pw", {"B": 1, "K": 64, "C": 64, "OY": 7, "OX": 7, "FY": 1, "FX": 1, "G": 1}, (1, 1), (7, 7))
    m = map_layer(hw, layer, sm)
    assert m.spatial == {"D1": {"C": min(64, arch.rows)}, "D2": {"K": min(64, arch.cols)}}
    assert m.cost.temporal_cycles == 49 * (64 // min(64, arch.rows)) * (64 // min(64, arch.cols))


def test_unmodelled_field_is_named_in_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ZZ / "hardware" / "tpu_like.yaml").read_text().replace("    size: 1024\n", "    size: 1024\n    leakage: 3\n")
    p = tmp_path / "tpu_leak.yaml"
    p.write_text(text)
    hw = load_zigzag_hardware(p)
    err = capsys.readouterr().err.strip().splitlines()
    assert [e for e in err if "not modelled" in e] == [
        "warning: tpu_leak.yaml: memories.rf_128B.leakage is not modelled by npukit (ignored)"]
    assert len(err) == 2 and "key 'ports' is written twice" in err[1]  # ZigZag's own tpu_like.yaml does that
    assert hw.memories[0].size_bits == 1024


def test_zigzag_sim_imports_numpy_only(tmp_path: Path) -> None:
    """`npukit sim --arch zigzag:...` on a built-in workload imports numpy (the mapper's batch allocation)
    and none of the other heavy libraries (ONNX reader, kernels' stack, plotting, model libraries)."""
    import subprocess
    import sys

    heavy = ("torch", "triton", "scipy", "matplotlib", "numba", "onnx", "ml_dtypes", "transformers", "pandas")
    arch = f"zigzag:{ZZ}/hardware/tpu_like.yaml,{ZZ}/mapping/tpu_like.yaml"
    code = ("import sys; from npukit.cli import main;"
            f"rc = main(['sim', '--arch', {arch!r}, '--workload', 'resnet18', '--out', {str(tmp_path)!r}, '--quiet']);"
            f"print(rc, 'numpy' in sys.modules, [m for m in {heavy!r} if m in sys.modules])")
    env = {"NPUKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    assert out.split("\n")[-2] == "0 True []"
