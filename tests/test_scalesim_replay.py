"""SCALE-Sim mode, every report column in USER and CALC bandwidth modes: equal to SCALE-Sim 3.0.0's own reports.

The USER-mode goldens are SCALE-Sim's values (its COMPUTE_REPORT, BANDWIDTH_REPORT and
DETAILED_ACCESS_REPORT, columns in that order) for the six stall-heavy random layers of

    python benchmarks/bench_vs_scalesim.py --seed 5 --cases 6 --stalls --modes user

(SCALE-Sim 3.0.0 in its own virtualenv, ``.peers/scalesim``; the "... scalesim" columns of the CSV it
writes). The 128x128 os array with an 8 KiB ofmap SRAM (CALC) is SCALE-Sim's run of ``CFG`` below with
``ArrayHeight/ArrayWidth 128``, ``OfmapSramSzkB 8`` and the topology row ``l0, 18, 18, 3, 3, 16, 160, 1``
(``scalesim(config=..., topology=...).run_scale()``), which npukit refused before ("too small for one fold").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import load_scalesim_cfg, load_topology_csv, simulate
from npukit.sim.scalesim_reports import BANDWIDTH_REPORT, COMPUTE_REPORT, DETAILED_ACCESS_REPORT, scalesim_reports

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
Bandwidth : {bw}
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: {ibw}
IfmapSRAMBankNum: 1
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: {fbw}
FilterSRAMBankNum: 1
FilterSRAMBankPort: 2

[run_presets]
InterfaceBandwidth: {mode}
UseRamulatorTrace: False
"""
TOPO_HEAD = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
USER_GOLDENS = [  # (case, SCALE-Sim 3.0.0's 30 report values)
    (
        {
            "df": "is",
            "rows": 32,
            "cols": 2,
            "ifmap": 2,
            "filt": 1,
            "ofmap": 1,
            "bw": 2,
            "ibw": 1,
            "fbw": 3,
            "layer": ("L", 13, 17, 2, 2, 8, 25, 2),
        },
        [
            16380,
            15337,
            12490,
            5.134641716111365,
            98.4375,
            27.34375,
            0.13144682793245094,
            1.669166068983504,
            0.1026928343222273,
            0.9995119570522206,
            2.9827508236966214,
            0.15360623781676414,
            1,
            14907,
            2016,
            33,
            15337,
            25600,
            63,
            15336,
            1575,
            -1024,
            1024,
            2048,
            -171,
            15307,
            46170,
            5097,
            15356,
            1576,
        ],
    ),
    (
        {
            "df": "ws",
            "rows": 2,
            "cols": 4,
            "ifmap": 2,
            "filt": 2,
            "ofmap": 1,
            "bw": 4,
            "ibw": 2,
            "fbw": 1,
            "layer": ("L", 20, 6, 1, 1, 20, 40, 1),
        },
        [
            13495,
            12599,
            0,
            95.24565441701722,
            100,
            93.02325581395363,
            1.9049130883403445,
            0.06349710294467815,
            3.809826176680689,
            1.9962635041832508,
            1,
            3.8225035833731487,
            3,
            12597,
            24000,
            1,
            12476,
            800,
            3,
            12599,
            48000,
            -512,
            11798,
            24576,
            -800,
            -1,
            800,
            138,
            12695,
            48003,
        ],
    ),
    (
        {
            "df": "ws",
            "rows": 2,
            "cols": 4,
            "ifmap": 1,
            "filt": 1,
            "ofmap": 1,
            "bw": 3,
            "ibw": 3,
            "fbw": 2,
            "layer": ("L", 6, 19, 1, 1, 22, 41, 1),
        },
        [
            18023,
            17720,
            3201,
            72.53668171557563,
            93.18181818181817,
            86.3636363636363,
            1.556884875846501,
            0.05090293453724605,
            2.901467268623025,
            2.9828792936362656,
            1.996101364522417,
            2.91678956324447,
            3,
            17718,
            27588,
            1,
            17603,
            902,
            3,
            17717,
            51414,
            -171,
            9115,
            27702,
            -256,
            256,
            1024,
            138,
            17767,
            51423,
        ],
    ),
    (
        {
            "df": "os",
            "rows": 8,
            "cols": 2,
            "ifmap": 2,
            "filt": 2,
            "ofmap": 1,
            "bw": 2,
            "ibw": 3,
            "fbw": 1,
            "layer": ("L", 8, 12, 1, 1, 10, 39, 2),
        },
        [
            2369,
            1799,
            0,
            47.42217898832685,
            85.3125,
            47.395833333333414,
            3.8910505836575875,
            1.083935519733185,
            1.3146192329071706,
            3,
            1,
            1.0427480916030534,
            1,
            1776,
            7000,
            1,
            1792,
            1950,
            9,
            1798,
            2365,
            -134,
            -1,
            402,
            -400,
            -1,
            400,
            660,
            1969,
            1366,
        ],
    ),
    (
        {
            "df": "ws",
            "rows": 8,
            "cols": 8,
            "ifmap": 2,
            "filt": 2,
            "ofmap": 2,
            "bw": 2,
            "ibw": 4,
            "fbw": 4,
            "layer": ("L", 12, 7, 1, 1, 2, 17, 1),
        },
        [
            847,
            317,
            0,
            14.077287066246058,
            17.708333333333336,
            13.163716814159294,
            1.5899053627760253,
            0.10725552050473186,
            4.504731861198739,
            4,
            4,
            2.791015625,
            9,
            305,
            504,
            7,
            220,
            34,
            15,
            310,
            1428,
            -168,
            -1,
            672,
            -12,
            -1,
            48,
            168,
            679,
            1429,
        ],
    ),
    (
        {
            "df": "ws",
            "rows": 32,
            "cols": 16,
            "ifmap": 2,
            "filt": 2,
            "ofmap": 1,
            "bw": 4,
            "ibw": 1,
            "fbw": 2,
            "layer": ("L", 14, 8, 2, 2, 4, 16, 1),
        },
        [
            3138,
            2006,
            1838,
            2.2681954137587237,
            50,
            24.728260869565215,
            0.7258225324027916,
            0.12761714855433698,
            0.7258225324027916,
            0.9995119570522206,
            2,
            0.7247888723298559,
            33,
            1976,
            1456,
            17,
            32,
            256,
            63,
            2006,
            1456,
            -1024,
            1024,
            2048,
            -128,
            -1,
            256,
            102,
            2114,
            1459,
        ],
    ),
]
BIG_OS = (
    {
        "df": "os",
        "rows": 128,
        "cols": 128,
        "ifmap": 64,
        "filt": 64,
        "ofmap": 8,
        "bw": 10,
        "ibw": 10,
        "fbw": 10,
        "layer": ("l0", 18, 18, 3, 3, 16, 160, 1),
    },
    [
        3981,
        1591,
        0,
        22.62727844123193,
        62.5,
        22.613065326633162,
        46.34066624764299,
        28.96291640477687,
        26.38843494657448,
        9.893129770992367,
        9.770992366412214,
        29.537742631200576,
        1,
        1465,
        73728,
        1,
        1369,
        46080,
        143,
        1495,
        41984,
        -524,
        -1,
        5184,
        -2358,
        -1,
        23040,
        233,
        1623,
        41087,
    ],
)


def _write(tmp: Path, case: dict, mode: str) -> tuple[Path, Path]:
    cfg, topo = tmp / "g.cfg", tmp / "t.csv"
    cfg.write_text(CFG.format(mode=mode, **{k: v for k, v in case.items() if k != "layer"}))
    topo.write_text(TOPO_HEAD + ", ".join(map(str, case["layer"])) + ",\n")
    return cfg, topo


def _values(texts: dict[str, str]) -> list[float]:
    out: list[float] = []
    for name in (COMPUTE_REPORT, BANDWIDTH_REPORT, DETAILED_ACCESS_REPORT):
        line = texts[name].splitlines()[1]
        out += [float(v) for v in line.split(",")[1:] if v.strip()]
    return out


@pytest.mark.parametrize(
    "case,gold", USER_GOLDENS, ids=[f"{c['df']}-{c['rows']}x{c['cols']}-{i}" for i, (c, _) in enumerate(USER_GOLDENS)]
)
def test_user_mode_every_column_equals_scalesim(tmp_path: Path, case: dict, gold: list) -> None:
    cfg, topo = _write(tmp_path, case, "USER")
    arch, w = load_scalesim_cfg(cfg), load_topology_csv(topo)
    assert (arch.scalesim_ifmap_bank_bw, arch.scalesim_filter_bank_bw, arch.scalesim_bandwidth) == (
        case["ibw"],
        case["fbw"],
        case["bw"],
    )
    res = simulate(w, arch)
    got = _values(scalesim_reports(w, res))
    assert got == [float(g) for g in gold]  # exact: the same integers and the same float operations
    assert res.layers[0].stall_cycles == gold[2] and res.total_cycles == gold[1]


def test_user_mode_reads_bank_bandwidth_not_bandwidth(tmp_path: Path) -> None:
    # SCALE-Sim reads DRAM at the [layout] bank bandwidths: changing them changes the reads (whole request
    # lines) and the stalls; Bandwidth only sets the ofmap drain
    case, gold = USER_GOLDENS[0]
    cfg, topo = _write(tmp_path, {**case, "fbw": 4, "bw": 7}, "USER")
    w = load_topology_csv(topo)
    got = _values(scalesim_reports(w, simulate(w, load_scalesim_cfg(cfg))))
    assert got[26] != gold[26] and got[26] % 4 == 0 and got[2] != gold[2]  # filter reads, stalls
    assert got[23] == gold[23]  # the ifmap (bank bandwidth unchanged) fits its buffer: its reads stay


def test_big_os_array_small_ofmap_sram_runs_as_scalesim(tmp_path: Path) -> None:
    cfg, topo = _write(tmp_path, *BIG_OS[:1], "CALC")
    out = tmp_path / "out"
    assert main(["sim", "--arch", str(cfg), "--workload", str(topo), "--format", "scalesim", "--out", str(out), "--quiet"]) == 0
    texts = {n: (out / n).read_text() for n in (COMPUTE_REPORT, BANDWIDTH_REPORT, DETAILED_ACCESS_REPORT)}
    assert _values(texts) == [float(g) for g in BIG_OS[1]]


def test_replay_shared_by_layers_of_one_shape_and_never_aliased() -> None:
    from dataclasses import replace

    from npukit.sim import Arch, conv_layer
    from npukit.sim._scalesim_replay import _MEMO, replay_layer

    arch = Arch(rows=8, cols=8, dataflow="ws", memory="scalesim", mapping="fixed")
    a = conv_layer("a", 14, 14, 3, 3, 8, 16, 1)
    b = replace(a, name="b")
    _MEMO.clear()
    ra = replay_layer(a, arch)
    ra["total_cycles"] = -1  # the caller's copy: the shared result is untouched
    rb = replay_layer(b, arch)
    assert len(_MEMO) == 1 and rb["total_cycles"] > 0
    _MEMO.clear()
    assert rb == replay_layer(b, arch)  # equal to a replay from scratch
    # another array is another entry
    replay_layer(a, replace(arch, rows=4))
    assert len(_MEMO) == 2
