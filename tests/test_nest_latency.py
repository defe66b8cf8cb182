"""ZigZag 3.9.1's latency model re-implemented for a loop nest (npukit.sim.nest_latency), checked against
ZigZag's own per-layer dumps (tests/data/zigzag_latency/README.md names their runs): on ZigZag's mapping
every latency term (on-loading, computation = temporal + stall, off-loading + systolic drain) is equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npukit.sim.errors import ConfigError
from npukit.sim.loopnest import NestLayer, evaluate
from npukit.sim.nest_latency import NestLatency, nest_latency
from npukit.sim.nest_transfers import unrolling
from npukit.sim.zigzag_dump import case_inputs, read_dump
from npukit.sim.zigzag_io import load_zigzag_hardware

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "zigzag_latency"
HW_DIRS = (DATA, ROOT / "examples" / "zigzag" / "hardware")
DUMPS = sorted(DATA.glob("*_complete.json"))


def _case(path: Path):
    case = read_dump(path)
    yaml = next(d / f"{case.accelerator}.yaml" for d in HW_DIRS if (d / f"{case.accelerator}.yaml").is_file())
    hw, layer = case_inputs(case, load_zigzag_hardware(yaml))
    return case, hw, layer


@pytest.mark.parametrize("path", DUMPS, ids=[p.name.removesuffix("_complete.json") for p in DUMPS])
def test_latency_terms_equal_zigzag(path: Path) -> None:
    case, hw, layer = _case(path)
    lat = nest_latency(hw, layer, case.spatial, case.temporal)
    z = case.latency
    assert lat.onloading == z["data_onloading"]
    assert lat.computation == z["computation"]
    assert lat.offloading + lat.drain == z["data_offloading"]
    assert lat.total == sum(z.values())
    assert lat.ideal <= lat.temporal


def test_cases_cover_stall_onloading_drain() -> None:
    """The dumps exercise each term: some stall, some drain, some on/off-loading."""
    lats = {}
    for p in DUMPS:
        case, hw, layer = _case(p)
        lats[p.name] = nest_latency(hw, layer, case.spatial, case.temporal)
    assert len(lats) >= 5
    assert any(v.stall_slack > 0 for v in lats.values())
    assert any(v.drain > 0 for v in lats.values())
    assert all(v.onloading > 0 and v.offloading > 0 for v in lats.values())


@pytest.mark.parametrize("path", DUMPS, ids=[p.name.removesuffix("_complete.json") for p in DUMPS])
def test_energy_on_zigzags_mapping_is_zigzags(path: Path) -> None:
    """npukit's energy of ZigZag's mapping: within 0.1% (ZigZag truncates each word-access count to an
    integer, ``cost_model.py: _calc_memory_access``; npukit's loopnest keeps the fraction)."""
    case, hw, layer = _case(path)
    assert evaluate(hw, layer, case.spatial, case.temporal).energy_pj == pytest.approx(case.energy_pj, rel=1e-3)


def test_a_slower_port_stalls() -> None:
    """The stall comes from the ports: halving every memory's bandwidth cannot shorten the layer, and
    stalls the one that already stalls more."""
    from dataclasses import replace

    case, hw, layer = _case(DATA / "ascend_like_resnet18_conv_complete.json")
    base = nest_latency(hw, layer, case.spatial, case.temporal)
    slow = replace(hw, memories=tuple(replace(m, bw={k: (lo, max(hi // 2, 1)) for k, (lo, hi) in m.bw.items()})
                                      for m in hw.memories))
    worse = nest_latency(slow, layer, case.spatial, case.temporal)
    assert worse.stall_slack > base.stall_slack > 0
    assert worse.onloading >= base.onloading and worse.total > base.total


def test_uneven_unrolling_integer_for_latency_fractional_for_energy() -> None:
    """ZigZag's limited unrolling: K = 1000 on 32 PEs runs 32 temporal steps of 31.25 (energy) or 31
    (latency) PEs; a loop on two array dimensions is adjusted on the first with the largest factor."""
    fc = NestLayer("fc", {"B": 1, "K": 1000, "C": 512})
    sm = {"D1": {"K": 32}, "D2": {"C": 32}}
    assert unrolling(fc, sm, {"D1": 32, "D2": 32}, integer=True) == {"D1": {"K": 31}, "D2": {"C": 32}}
    assert unrolling(fc, sm, {"D1": 32, "D2": 32}, integer=False)["D1"]["K"] == pytest.approx(31.25)
    two = {"D1": {"K": 8}, "D2": {"K": 16}}
    assert unrolling(NestLayer("k", {"K": 100}), two, {"D1": 8, "D2": 16}, integer=False) == {
        "D1": {"K": 8}, "D2": {"K": 100 / 1 / 8}}
    # clipped to the array dimension and to the loop
    assert unrolling(NestLayer("k", {"K": 3}), {"D1": {"K": 64}}, {"D1": 16}, integer=True) == {"D1": {"K": 3}}


def test_total_is_the_sum_of_terms() -> None:
    lat = NestLatency(ideal=10, temporal=12, stall_slack=3.0, onloading=4.0, offloading=5.0, drain=1)
    assert lat.computation == 15 and lat.total == 25


def test_not_a_dump_is_a_config_error(tmp_path: Path) -> None:
    p = tmp_path / "x_complete.json"
    p.write_text(json.dumps({"outputs": {}}))
    with pytest.raises(ConfigError, match="not a ZigZag layer dump"):
        read_dump(p)


def test_bench_skips_without_dumps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from npukit.benchmarks.bench_nest_latency import main

    assert main(["--zigzag-dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    assert "skipped" in capsys.readouterr().out and not (tmp_path / "o").exists()


def test_bench_runs_on_the_test_dumps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from npukit.benchmarks.bench_nest_latency import main

    assert main(["--zigzag-dir", str(DATA), "--hardware-dir", str(DATA), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert f"all: {len(DUMPS)} layers in 1 pairs; latency exact on {len(DUMPS)}" in out
    assert (tmp_path / "o" / "nest_latency.csv").is_file()


def test_window_union_closed_form_equals_marking_cycles() -> None:
    """The nested-period closed form of the updating-window union equals marking every cycle (ZigZag's way)."""
    import random

    import numpy as np

    from npukit.sim.nest_latency import _window_union

    rng = random.Random(28)
    for _ in range(300):
        periods = [rng.choice((2, 3, 4, 5))]
        for _ in range(rng.randint(1, 4)):
            periods.append(periods[-1] * rng.choice((1, 2, 3, 7)))
        acts = [(0, rng.randint(0, p - 1), p, rng.randint(2, 9)) for p in rng.sample(periods, len(periods))]
        big = max(acts, key=lambda a: a[2])
        marked = np.zeros(big[2], dtype=bool)
        for _, a, p, _ in acts:
            marked.reshape(-1, p)[:, :a] = True
        assert _window_union(acts) == int(marked.sum()) * big[3], acts


ZZ = ROOT / "examples" / "zigzag"
_BOUND_LAYERS = [
    NestLayer("c3", {"B": 1, "K": 64, "C": 64, "OY": 28, "OX": 28, "FY": 3, "FX": 3, "G": 1}, (1, 1), (28, 28)),
    NestLayer("dw", {"B": 1, "K": 1, "C": 1, "OY": 14, "OX": 14, "FY": 3, "FX": 3, "G": 144}, (1, 1), (14, 14)),
    NestLayer("fc", {"B": 1, "K": 1000, "C": 512, "OY": 1, "OX": 1, "FY": 1, "FX": 1, "G": 1}),
]


@pytest.mark.parametrize("arch", ["eyeriss_like", "tpu_like", pytest.param("edge_tpu_like", marks=pytest.mark.slow),
                                  pytest.param("tesla_npu_like", marks=pytest.mark.slow)])
def test_latency_bound_never_exceeds_the_latency(arch: str) -> None:
    """nest_latency.latency_bound from any subset of the operands' parts (their transfers alone, or whole) is <=
    ZigZag's latency of the mapping, on every loop order of a 3x3, a depthwise and an FC layer; every active
    link moves ``count`` times per ``period`` over exactly the temporal cycles (the window union it
    assumes is at most those); and with all three parts it cuts: most orders' bound exceeds the best."""
    from npukit.sim import nest_mapper as nm
    from npukit.sim.loopnest import effective_spatial
    from npukit.sim.nest_latency import latency_bound, latency_of
    from npukit.sim.nest_sim import parse_zigzag_spec
    from npukit.sim.nest_transfers import operand_latency, operand_transfers

    maps = {"eyeriss_like": "default"}
    hw, sp = parse_zigzag_spec(f"zigzag:{ZZ}/hardware/{arch}.yaml,{ZZ}/mapping/{maps.get(arch, arch)}.yaml")
    cut = total = 0
    for layer in _BOUND_LAYERS:
        entry = sp.get("Conv" if layer.dims["OY"] > 1 else "Gemm") or sp.get("default")
        sm = nm.clip_spatial(hw, layer, entry)
        esm = effective_spatial(layer, sm)
        memo: dict = {}
        rows = []
        for order in nm._distinct_orders(nm.temporal_lpfs(layer, sm)):
            tm = nm.allocate(hw, layer, esm, order)
            if tm is None:
                continue
            fine = [operand_latency(hw, layer, sm, op, tm[op], memo) for op in "WIO"]
            coarse = [operand_transfers(hw, layer, sm, op, tm[op], memo) for op in "WIO"]
            exact = latency_of(memo, dict(zip("WIO", fine, strict=True)))
            assert exact == nest_latency(hw, layer, sm, tm)
            for p in fine:
                assert all(x.period * x.count == exact.temporal for lv in p.links for x in lv.values() if x.count)
            for mask in range(1, 27):  # each operand: absent, transfers, or whole
                parts = [(None, coarse[k], fine[k])[mask // 3**k % 3] for k in range(3)]
                assert latency_bound(memo, parts) <= exact.total, (layer.name, order, mask)
            rows.append((exact.total, latency_bound(memo, fine)))
        best = min(t for t, _ in rows)
        cut += sum(b > best for _, b in rows)
        total += len(rows)
    assert cut > total / 2, (cut, total)
