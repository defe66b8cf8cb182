"""Sweeps over multi-core chips: ``[grid]`` keys of the chip (``chip.mac_cores``, ``interconnect.*``, ...) and of its
MAC cores, one row per point equal to ``simulate_multicore`` on the same chip, a one-core chip's row equal to the
single-core sweep's, and one kind of point per database."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import ConfigError, load_arch
from npukit.sim.multicore import load_multicore_arch
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sweeps import expand_points, load_sweep_spec, read_rows, run_sweep
from npukit.workloads import load_workload

CHIP = """
[sweep]
name = "chip"
arch = "hetero4"
workloads = ["llama3-8b-layer:seq=64"]
[grid]
"chip.mac_cores" = [1, 2, 4]
interconnect.bandwidth_bytes_per_cycle = [16.0, 64.0]
rows = [64, 128]
[derived]
"dram.channels" = "chip.mac_cores"
"""


def spec(folder: Path, text: str, name: str = "spec.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.slow
def test_each_row_is_simulate_multicore_on_its_chip(tmp_path) -> None:
    s = load_sweep_spec(spec(tmp_path, CHIP))
    assert s.multicore
    summary = run_sweep(s, tmp_path / "s.sqlite", workers=1)
    rows = read_rows(tmp_path / "s.sqlite", summary.keys)
    assert len(rows) == 12
    wl = load_workload("llama3-8b-layer:seq=64")
    base = load_multicore_arch("hetero4")
    for r in rows:
        chip = base.with_(**{"chip.mac_cores": r["chip_mac_cores"], "dram.channels": r["chip_mac_cores"],
                             "interconnect.bandwidth_bytes_per_cycle": r["interconnect_bandwidth_bytes_per_cycle"],
                             "rows": r["rows"]})
        ref = simulate_multicore(wl, chip)
        assert r["dram_channels"] == r["chip_mac_cores"] == len(chip.mac_cores)
        assert r["total_cycles"] == round(ref.total_cycles)
        assert r["energy_total_pj"] == pytest.approx(ref.energy_pj, rel=1e-12)
        assert r["schedule"] == ref.schedule.label
        assert r["area_mm2"] == pytest.approx(ref.ledger.meta["ppa"]["area_mm2"], rel=1e-12)
        assert r["interconnect_bytes"] == pytest.approx(ref.interconnect_bytes)
        assert r["compute_cycles"] + r["stall_cycles"] == r["total_cycles"]
    # more cores: faster, and a larger chip
    by = {(r["chip_mac_cores"], r["rows"], r["interconnect_bandwidth_bytes_per_cycle"]): r for r in rows}
    assert by[4, 128, 64.0]["total_cycles"] < by[1, 128, 64.0]["total_cycles"]
    assert by[4, 128, 64.0]["area_mm2"] > by[1, 128, 64.0]["area_mm2"]


def test_a_one_core_chip_row_equals_the_single_core_row(tmp_path) -> None:
    """One npu32 core, nothing shared, its own DRAM port: the single-core simulator's numbers (one GEMM, so no
    fusion candidate: the search can only keep ``none/split``)."""
    (tmp_path / "one.toml").write_text('name = "one"\n[[core]]\narch = "npu32"\n')
    body = '[sweep]\nname = "{n}"\narch = "{a}"\nworkloads = ["gemm:M=96,N=80,K=160"]\n[grid]\nrows = [16, 32]\n'
    mc = run_sweep(load_sweep_spec(spec(tmp_path, body.format(n="mc", a="one.toml"), "mc.toml")), tmp_path / "mc.sqlite",
                   workers=1)
    sc = run_sweep(load_sweep_spec(spec(tmp_path, body.format(n="sc", a="npu32"), "sc.toml")), tmp_path / "sc.sqlite",
                   workers=1)
    for a, b in zip(read_rows(tmp_path / "mc.sqlite", mc.keys), read_rows(tmp_path / "sc.sqlite", sc.keys), strict=True):
        assert a["rows"] == b["rows"] and a["chip_mac_cores"] == 1 and a["schedule"] == "none/split"
        for col in ("compute_cycles", "stall_cycles", "total_cycles", "macs", "utilization", "energy_total_pj",
                    "energy_dram_pj", "area_mm2", "leakage_mw", "energy_static_pj", "latency_s"):
            assert a[col] == pytest.approx(b[col], rel=1e-12), col


def test_one_kind_of_point_per_database(tmp_path, capsys) -> None:
    db = tmp_path / "o" / "sweep.sqlite"
    single = spec(tmp_path, '[sweep]\narch = "npu32"\nworkloads = ["gemm:M=64,N=64,K=64"]\n[grid]\nrows = [16]\n',
                  "single.toml")
    assert main(["sweep", str(single), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    capsys.readouterr()
    chip = spec(tmp_path, CHIP, "chip.toml")
    refused(["sweep", str(chip), "--db", str(db), "--out", str(tmp_path / "o2"), "--workers", "1"], capsys,
            "holds single-core points")
    assert not (tmp_path / "o2").exists()
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM points").fetchone()[0] == 1


@pytest.mark.parametrize("grid, needle", [
    ('"chip.mac_cores" = [0]', "chip.mac_cores"),
    ('"chip.mac_cores" = [2000]', "chip.mac_cores"),
    ('interconnect.bandwidth_bytes_per_cycle = [-1.0]', "interconnect.bandwidth_bytes_per_cycle"),
    ('"bus.latency_cycles" = [1]', "no [bus]"),
    ('"chip.objective" = ["fast"]', "objective"),
    ('"interconnect.width" = [3]', "unknown grid key 'interconnect.width'"),
])
def test_bad_chip_keys_are_refused_before_anything_runs(tmp_path, capsys, grid, needle) -> None:
    text = f'[sweep]\narch = "hetero4"\nworkloads = ["gemm:M=64,N=64,K=64"]\n[grid]\n{grid}\n'
    path = spec(tmp_path, text)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        expand_points(load_sweep_spec(path))
    refused(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1"], capsys, needle)
    assert not (tmp_path / "o").exists()


def test_chip_keys_are_unknown_on_a_single_core_arch(tmp_path) -> None:
    text = '[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\n"chip.mac_cores" = [1, 2]\n'
    with pytest.raises(ConfigError, match="unknown grid key 'chip.mac_cores'"):
        load_sweep_spec(spec(tmp_path, text))


def test_mac_cores_needs_identical_mac_cores(tmp_path) -> None:
    (tmp_path / "mixed.toml").write_text('[[core]]\narch = "npu128"\n[[core]]\narch = "npu32"\n')
    text = '[sweep]\narch = "mixed.toml"\nworkloads = ["gemm:M=64,N=64,K=64"]\n[grid]\n"chip.mac_cores" = [4]\n'
    with pytest.raises(ConfigError, match="identical MAC cores"):
        expand_points(load_sweep_spec(spec(tmp_path, text)))


def test_with_renumbers_cores_and_clocks_every_core() -> None:
    het = load_multicore_arch("hetero4")
    x = het.with_(**{"chip.mac_cores": 5, "rows": 64, "clock_ghz": 2.0, "chip.layer_cores": "search"})
    assert [(c.name, c.kind) for c in x.cores] == [(f"core{i}", "mac") for i in range(5)] + [("core5", "simd")]
    assert {c.arch.rows for c in x.cores if c.kind == "mac"} == {64}
    assert x.cores[5].arch.rows == het.cores[3].arch.rows  # the simd core keeps its array
    assert {c.arch.clock_ghz for c in x.cores} == {2.0} and x.layer_cores == "search"
    assert {c.arch.energy_table for c in het.with_(energy_table="aladdin40").cores} == {"aladdin40"}
    assert het.with_(**{"shared_memory.kib": 0}).shared_memory.kib == 0
    assert load_arch("npu128").rows == 128  # nothing shared was changed


def test_a_search_explores_a_chip(tmp_path) -> None:
    from npukit.sweeps.search import run_search

    s = load_sweep_spec(spec(tmp_path, CHIP))
    summary = run_search(s, tmp_path / "s.sqlite", method="tpe", budget=3, seed=0, workers=1)
    rows = read_rows(tmp_path / "s.sqlite")
    assert summary.trials == 3 and 1 <= len(rows) <= 3
    assert all(r["chip_mac_cores"] in (1, 2, 4) and r["schedule"] and r["area_mm2"] > 0 for r in rows)


def test_an_empty_chip_database_exports_its_own_columns(tmp_path) -> None:
    from npukit.sweeps import SweepStore, export_csv

    with SweepStore(tmp_path / "mc.sqlite", multicore=True):
        pass
    header = export_csv(tmp_path / "mc.sqlite", tmp_path / "mc.csv").read_text().strip().split(",")
    assert "chip_mac_cores" in header and "schedule" in header and "dram_ifmap_read_bytes" not in header
    with SweepStore(tmp_path / "sc.sqlite"):
        pass
    header = export_csv(tmp_path / "sc.sqlite", tmp_path / "sc.csv").read_text().strip().split(",")
    assert "chip_mac_cores" not in header and "dram_ifmap_read_bytes" in header


def test_stream_and_zigzag_files_are_refused_with_a_reason(tmp_path) -> None:
    for arch in ("stream:chip.yaml", "zigzag:hw.yaml"):
        text = f'[sweep]\narch = "{arch}"\nworkloads = ["gemm:M=64,N=64,K=64"]\n[grid]\nrows = [8]\n'
        with pytest.raises(ConfigError, match="not Stream or ZigZag files"):
            load_sweep_spec(spec(tmp_path, text))


def test_a_chip_without_an_area_model_gives_no_row() -> None:
    from npukit.sim.stream_io import load_stream_hardware
    from npukit.sim.workload import gemm
    from npukit.sweeps import multicore_point_metrics

    chip = load_stream_hardware(Path(__file__).parent / "data" / "stream_hw" / "eyeriss_like_dual_core.yaml",
                                "latency", warn=False)
    with pytest.raises(ConfigError, match="no area model"):
        multicore_point_metrics(simulate_multicore(gemm(64, 32, 48), chip, "none/split"))
