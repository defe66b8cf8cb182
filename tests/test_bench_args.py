"""The benchmarks' shared command-line pieces (benchmarks/_args.py) and the scaling benchmark's option checks: every
bad option one line, exit 2, before any simulation, nothing written."""

from __future__ import annotations

import sys

import pytest

from npukit.benchmarks._args import int_list, out_folder
from npukit.sim import ConfigError


def test_int_list_is_strict() -> None:
    assert int_list("1, 2,16", "--cores", 1, 1024) == (1, 2, 16)
    for bad in ("", "a", "1.5", "1,,2", "1,", "0", "-1", "+2", "1025", "\u0662", "2,2", "1" * 5000):
        with pytest.raises(ConfigError, match="--cores"):
            int_list(bad, "--cores", 1, 1024)


def test_out_folder_refuses_another_runs_results_and_creates_nothing(tmp_path) -> None:
    fresh = tmp_path / "new"
    assert out_folder(str(fresh), ("a.csv",)) == fresh and not fresh.exists()
    fresh.mkdir()
    (fresh / "a.csv").write_text("x")
    with pytest.raises(ConfigError, match="already holds a.csv"):
        out_folder(str(fresh), ("a.csv", "b.png"))
    with pytest.raises(ConfigError, match="empty"):
        out_folder("", ("a.csv",))
    with pytest.raises(ConfigError, match="cannot be used"):
        out_folder(str(fresh / "a.csv"), ("a.csv",))


@pytest.mark.parametrize("argv, needle", [
    (["--cores", "1,,2"], "--cores"), (["--cores", "1000000"], "from 1 to 64"), (["--cores", "65"], "from 1 to 64"),
    (["--cores", "2,2"], "twice"),
    (["--repeats", "0"], "--repeats"), (["--repeats", "1000000000000"], "--repeats"),
    (["--models", ""], "unknown model"), (["--models", "flux.1-kontext 1024x1024,flux.1-kontext 1024x1024"], "twice"),
])
def test_scaling_bench_checks_its_options_first(tmp_path, monkeypatch, capsys, argv, needle) -> None:
    from npukit.benchmarks import bench_multicore_scaling as b

    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["bench_multicore_scaling.py", *argv, "--out", str(out)])
    assert b.main() == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err
    assert not out.exists()


def test_scaling_bench_runs_core_counts_in_increasing_order(tmp_path, monkeypatch, capsys) -> None:
    """``--cores 4,1`` used to give speedups against 4 cores; the counts now run smallest first, the baseline."""
    import csv
    from types import SimpleNamespace

    from npukit import workloads
    from npukit.benchmarks import bench_multicore_scaling as b
    from npukit.sim import multicore_sim
    from npukit.sim.workload import Layer, Workload

    def fake(wl, march):  # latency halves with each doubling of the cores
        n = len(march.mac_cores)
        return SimpleNamespace(schedule=SimpleNamespace(label="none/split"), latency_s=1e-3 / n, energy_pj=1e9,
                               utilization=0.5, interconnect_share=0.1, interconnect_bytes=0.0, rows=lambda: [])

    monkeypatch.setattr(multicore_sim, "simulate_multicore", fake)
    monkeypatch.setattr(workloads, "workload_from_spec", lambda spec: Workload("w", [Layer("g", 8, 8, 8)]))
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["bench_multicore_scaling.py", "--cores", "4,1", "--repeats", "1",
                                      "--models", next(iter(b.MODELS)), "--out", str(out)])
    assert b.main() == 0
    with open(out / "multicore_scaling.csv", newline="") as f:
        assert [int(r["cores"]) for r in csv.DictReader(f)] == [1, 4]
    table = [ln.split() for ln in capsys.readouterr().out.splitlines() if " none/split " in ln]
    assert [float(ln[ln.index("none/split") + 2]) for ln in table] == [1.0, 4.0]  # speedup column, 1 core first
