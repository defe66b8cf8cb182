"""With ``layer_cores = "search"`` a GEMM in a step of its own may run on fewer than all MAC cores (the first 1, 2,
4, ...): the candidates, the search over them, what a result on a subset records, the TOML key; by default
(``all``) every split uses every MAC core."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from npukit.sim import Layer, Workload, conv_layer, load_arch
from npukit.sim.multicore import homogeneous, load_multicore_arch
from npukit.sim.multicore_sim import _Run, _table, simulate_multicore
from npukit.sim.schedule import layer_splits, split_dims, split_label, split_rank
from npukit.sim.stream_io import load_stream_hardware

HW = Path(__file__).parent / "data" / "stream_hw"


def _ws_cores(m):  # noqa: ANN001, ANN202 - the chip with 2-D ws arrays for MAC cores, as benchmarks/bench_vs_stream.py
    return replace(m, cores=tuple(replace(c, nest=None) if c.kind == "mac" else c for c in m.cores))


def test_a_core_count_also_tries_the_count_below_it() -> None:
    # 7 cores have no 2-D split, and the powers of two below skipped 6: a 256^3 GEMM took 1,790 cycles on 7 latency-
    # searched cores (M2N2 on 4) against 1,496 on 6 (M3N2); with 6 among the counts more cores are never slower here
    from npukit.sim.schedule import fewer_counts
    from npukit.sim.workload import gemm

    assert fewer_counts(7) == (6, 4, 2, 1) and fewer_counts(8) == (7, 4, 2, 1) and fewer_counts(5) == (4, 2, 1)
    assert fewer_counts(6) == (5, 4, 2, 1) and fewer_counts(3) == (2, 1) and fewer_counts(2) == (1,)
    assert fewer_counts(1) == ()
    base = load_multicore_arch("quad128").with_(**{"chip.objective": "latency", "chip.layer_cores": "search"})
    cyc = [simulate_multicore(gemm(256, 256, 256), base.with_(**{"chip.mac_cores": n, "dram.channels": n})).total_cycles
           for n in range(1, 9)]
    assert all(b <= a for a, b in zip(cyc, cyc[1:], strict=False)) and cyc[6] == cyc[5]


def test_every_core_count_first_then_one_fewer_and_powers_of_two_below() -> None:
    assert layer_splits(1) == (("-", 1),)
    assert layer_splits(2) == (("M", 2), ("N", 2), ("K", 2), ("-", 1))
    for n in (3, 4, 6, 16, 36):
        got = layer_splits(n)
        assert got[:len(split_dims(n))] == tuple((d, n) for d in split_dims(n))  # all cores first: ties keep them
        counts = list(dict.fromkeys(k for _, k in got))
        assert counts[0] == n and counts[-1] == 1 and counts == sorted(counts, reverse=True)
        assert all(k & (k - 1) == 0 or k == n - 1 for k in counts[1:])  # below n: n - 1 and the powers of two
        assert len(set(got)) == len(got)
    assert split_label("M", 4, 4) == "M" and split_label("M2N2", 4, 8) == "M2N2@4" and split_label("-", 1, 4) == "-@1"


def _ranked(run: _Run, layer: Layer, cores: list[int]) -> dict[str, tuple[float, float]]:
    n = len(cores)
    out = {}
    for d, k in layer_splits(n):
        ps = run.gemm_parts(layer, cores[:k], d, "", "")
        out[split_label(d, k, n)] = split_rank(sum(run._energy(p) for p in ps), max(p.busy for p in ps),
                                               run.m.objective)
    return out


@pytest.mark.parametrize("objective", ["latency", "energy", "edp"])
@pytest.mark.parametrize("layer", [Layer("gemv", 1, 512, 256), Layer("up", 64, 256, 128), Layer("tall", 4096, 64, 512),
                                   conv_layer("conv", 18, 18, 3, 3, 16, 16, 1)], ids=lambda x: x.name)
def test_the_search_keeps_the_first_best_of_every_core_count(objective: str, layer: Layer) -> None:
    """Against scoring every (split, core count) of :func:`layer_splits` in full: the split kept ranks first, and of
    equal ranks the first in order, so a subset is kept only when it ranks strictly better than every split on all
    cores (on a 2-D ws chip and on Stream's tpu_like chip under its off-chip port, its cores as loop-nest cores and as 2-D ws
    arrays; the pruned latency search too)."""
    chips = [homogeneous(load_arch("npu128").with_(rows=32, cols=32, objective=objective), 4),
             load_stream_hardware(HW / "tpu_like_quad_core.yaml", objective, warn=False)]
    chips = [replace(m, layer_cores="search") for m in [*chips, _ws_cores(chips[1])]]
    for m in chips:
        run = _Run(Workload("x", []), m, _table(m, None), {})
        label, parts = run.best_dim(layer, m.mac_cores, "", "")
        ranks = _ranked(run, layer, m.mac_cores)
        best = min(ranks.values())
        assert ranks[label] == best
        assert label == next(k for k, v in ranks.items() if v == best)
        used = len(m.mac_cores) if "@" not in label else int(label.split("@")[1])
        assert {p.core for p in parts} <= set(m.mac_cores[:used])


def test_a_port_bound_conv_runs_on_fewer_cores_when_they_move_fewer_bytes() -> None:
    """tpu_like_quad_core: four 32x32 cores behind one 64-bit off-chip port. A conv split on row bands reads every
    band's halo rows once per core, so on fewer cores the same split moves fewer bytes through the port that bounds
    it: the latency search takes the subset, which is at least as fast as every split on all four cores, and the
    result records it
    (Stream's 2conv_16_16 layer, int8)."""
    chip = _ws_cores(load_stream_hardware(HW / "tpu_like_quad_core.yaml", "latency", operand_bits=8, warn=False))
    wl = Workload("c", [conv_layer("Conv1", 18, 18, 3, 3, 16, 16, 1)])
    assert "@" not in simulate_multicore(wl, chip, "none/split").rows()[0]["split"]  # the default: every core
    m = replace(chip, layer_cores="search")
    res = simulate_multicore(wl, m, "none/split")
    row = res.rows()[0]
    assert "@" in row["split"]
    used = int(row["split"].split("@")[1])
    assert row["cores"] <= used < len(m.mac_cores)
    run = _Run(Workload("x", []), m, _table(m, None), {})
    layer = wl.layers[0]
    all_cores = {d: run.gemm_parts(layer, m.mac_cores, d, "", "") for d in split_dims(len(m.mac_cores))}
    assert row["cycles"] <= min(max(p.busy for p in ps) for ps in all_cores.values())
    same = all_cores[row["split"].split("@")[0]]  # the same split on all four cores: more halo rows through the port
    assert row["dram_bytes"] < sum(p.dram_bytes for p in same) and row["cycles"] < max(p.busy for p in same)
    busy = [c for c, b in enumerate(res.core_busy) if b > 0]
    assert len(busy) == row["cores"] and {c for c, *_ in res.timeline} == set(busy)


def test_the_toml_key_and_a_bad_value(tmp_path: Path) -> None:
    from npukit.sim import ConfigError
    from npukit.sim.multicore import load_multicore_arch

    base = 'name = "q"\n{}[[core]]\narch = "npu32"\ncount = 4\n'
    for line, want in (("", "all"), ('layer_cores = "search"\n', "search")):
        (tmp_path / "q.toml").write_text(base.format(line))
        m = load_multicore_arch(tmp_path / "q.toml")
        assert m.layer_cores == want and m.to_dict()["layer_cores"] == want
    (tmp_path / "q.toml").write_text(base.format('layer_cores = "some"\n'))
    with pytest.raises(ConfigError, match="layer_cores.*use one of all, search"):
        load_multicore_arch(tmp_path / "q.toml")



def test_cli_layer_cores_names_its_run_and_is_refused_on_one_core(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import csv

    from npukit.cli import main

    chip, wl = "quad128", "gemm:M=16,N=32,K=16"  # a GEMM too small to gain from four 128x128 cores
    for flag in ([], ["--layer-cores", "search"]):
        assert main(["sim", "--arch", chip, "--workload", wl, "--out", str(tmp_path / "o"), "--quiet", *flag]) == 0
    capsys.readouterr()
    runs = sorted(p.name for p in (tmp_path / "o").glob("*.csv") if not p.name.endswith("_cores.csv"))
    assert len(runs) == 2 and sum("layer_cores-search" in n for n in runs) == 1  # two runs, neither overwritten
    splits = {n: next(csv.DictReader((tmp_path / "o" / n).open()))["split"] for n in runs}
    assert {"@" in s for s in splits.values()} == {True, False}  # only the search run puts it on fewer cores
    out = tmp_path / "single"
    assert main(["sim", "--arch", "npu32", "--workload", wl, "--out", str(out), "--layer-cores", "search"]) == 2
    assert "--layer-cores is for multi-core archs" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("objective", ["energy", "latency", "edp"])
def test_a_fused_group_runs_on_the_best_core_count(objective: str) -> None:
    """A fused split group, too, may take the first 1, 2, 4, ... MAC cores with ``layer_cores = "search"``: the count
    whose whole group ranks first under the objective (ties keep more cores), each tried on its own."""
    from npukit.sim._multicore_groups import run_fused_split

    wl = Workload("pair", [Layer("up", 64, 64, 64), Layer("down", 64, 64, 64)])  # small: a split buys little
    base = replace(homogeneous(load_arch("npu128"), 4, shared_kib=256), objective=objective)
    chip = replace(base, layer_cores="search")
    res = simulate_multicore(wl, chip, "chain/split")
    used = {int(r["cores"]) for r in res.rows()}
    assert len(used) == 1 and all(r["step"] == "fused" for r in res.rows())
    ranks = {}
    for k in (4, 2, 1):
        trial = _Run(wl, chip, _table(chip, None), {}, record=False)
        run_fused_split(trial, wl.layers, chip.mac_cores[:k])
        ranks[k] = split_rank(trial.energy, trial.t, objective)
    assert used == {min(ranks, key=lambda k: (ranks[k], -k))}
    if objective == "energy":  # one core: no partial sums or shared input crossing the links (5.11 vs 5.77 uJ)
        assert used == {1}
    (n,) = used
    if n != 4:
        assert all(r["split"].endswith(f"@{n}") for r in res.rows())
    every = simulate_multicore(wl, base, "chain/split")
    assert {int(r["cores"]) for r in every.rows()} == {4}  # the default keeps every core
    got, ref = (split_rank(x.energy_pj, x.total_cycles, objective) for x in (res, every))
    assert got <= ref


def test_one_more_core_keeps_the_count_the_chip_had() -> None:
    """``layer_cores = "search"`` tries ``n - 1`` cores on every chip: six 24 x 24 cores had only 4, 2 and 1 below
    six, never the five a five-core chip used, and took this GEMM-add pair in 6,674 cycles against 6,546 on five."""
    from npukit.sim import Core, Dram, Interconnect, MultiCoreArch, SharedMemory, load_arch
    from npukit.sim.workload import Layer, VectorOp, Workload

    base = load_arch("npu32")
    c24 = base.with_(name="c24", rows=24, cols=24, dram_bandwidth_bytes_per_cycle=64.0)

    def chip(n: int) -> MultiCoreArch:
        return MultiCoreArch(f"x{n}", (*(Core(c24, "mac", f"core{i}") for i in range(n)), Core(base, "simd", "simd")),
                             Interconnect(32.0, 20, 0.1, "mesh", multicast=False), SharedMemory(0, 256.0), Dram(2, 32.0),
                             "latency", layer_cores="search")

    wl = Workload("g", [VectorOp("pre", "add", 8192, inputs=2), Layer("g0", 64, 100, 128),
                        VectorOp("v0", "add", 6400, inputs=2)])
    five, six = (simulate_multicore(wl, chip(n)) for n in (5, 6))
    assert six.total_cycles <= five.total_cycles
    assert [r["split"] for r in six.rows() if r["name"] == "g0"] == ["N@5"]
