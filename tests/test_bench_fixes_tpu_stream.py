"""Fixes of hunt K: npukit.sim.tpu's fit and predictor refuse what is not physical, with one typed line;
bench_vs_tpu's --measured line numbers; bench_vs_stream's --stream-json and --stream-python checks; no bench run
replaces another's results; bench_multicore_scaling makes its --out before it simulates."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from npukit.sim import ConfigError
from npukit.sim.tpu import TPU_V4, TpuChip, TpuFit, fit, matmul_terms, predict_us

TRUTH = TpuFit(t0_us=0.7, eta_mxu=0.37, eta_hbm=0.45)


# --- sim/tpu.py: fit ---

@pytest.mark.parametrize("shapes, times, needle", [
    # four ordinary shapes: t0 = -4.09 us, eta_mxu = 3.07 (8x8x8 was predicted at -3.7 us)
    ([(512, 512, 512), (1024, 1024, 1024), (1024, 512, 1024), (512, 1024, 512)], [3.0, 25.0, 14.0, 8.0],
     "not physical"),
    # twelve shapes all 5 us: eta_mxu ~ 8e14, far above the peak
    ([(m, n, k) for m in (64, 256, 1024) for n in (64, 512) for k in (128, 1024)], [5.0] * 12, "not physical"),
    # one shape three times: the minimum-norm solve gave eta_mxu = 91
    ([(128, 128, 128)] * 3, [1.0, 1.1, 1.2], "do not determine"),
    # only the first tile (1024^3) differs... not at all: t0 and eta_mxu cannot be told apart ("did not settle" before)
    ([(1024,) * 3, (2048,) * 3, (4096,) * 3], [40.0, 99.0, 617.0], "first tiles are all alike"),
])
def test_fit_refuses_parameters_that_are_not_physical(shapes, times, needle) -> None:
    with pytest.raises(ConfigError, match=needle) as exc:
        fit(shapes, times)
    assert "\n" not in str(exc.value)


def test_fit_on_a_real_subset_with_negative_t0_is_refused_and_the_shipped_fits_pass() -> None:
    from npukit.benchmarks import bench_vs_tpu as bench

    rows = bench.shipped_rows()
    sub = [r for r in rows if min(r[1]) >= 512]  # 125 shapes: t0 = -0.36 us before
    with pytest.raises(ConfigError, match="t0 = -0.36"):
        fit([r[1] for r in sub], [r[2] for r in sub])
    p = fit([r[1] for r in rows], [r[2] for r in rows])
    assert (round(p.t0_us, 3), round(p.eta_mxu, 3), round(p.eta_hbm, 3)) == (0.697, 0.368, 0.453)  # docs/tpu.md


def test_fit_is_the_least_squares_optimum_across_multi_tile_shapes() -> None:
    """Exact data on a grid with shapes of several tiles on both sides of the pipelined max are recovered, and a
    noisy version's fit has no larger relative squared error than any nearby parameters."""
    shapes = [(m, n, k) for m in (64, 1024, 3000) for n in (128, 2048) for k in (256, 4096)]
    exact = [predict_us(TRUTH, *s) for s in shapes]
    got = fit(shapes, exact)
    assert (got.t0_us, got.eta_mxu, got.eta_hbm) == pytest.approx((0.7, 0.37, 0.45), rel=1e-6)
    noisy = [t * (1 + 0.05 * math.sin(i)) for i, t in enumerate(exact)]
    best = fit(shapes, noisy)

    def loss(p: TpuFit) -> float:
        return sum(((predict_us(p, *s) - t) / t) ** 2 for s, t in zip(shapes, noisy, strict=True))

    for d in (0.99, 1.01):
        for f in ("t0_us", "eta_mxu", "eta_hbm"):
            near = dataclasses.replace(best, **{f: min(1.0, getattr(best, f) * d)})
            assert loss(best) <= loss(near) + 1e-12


@pytest.mark.parametrize("shapes, times", [
    ([(1, 1)] * 3, [1.0, 2.0, 3.0]),  # a shape of two dims: ValueError before
    ([(64, 64, 64)] * 3, ["a", "b", "c"]),  # string times: ValueError before
    ([(64, 64, 64)] * 3, None),  # TypeError before
    ([(64, 64, 64), (64, 64, 64)], [1.0, 2.0]),  # too few
])
def test_fit_refuses_malformed_input_with_a_config_error(shapes, times) -> None:
    with pytest.raises(ConfigError):
        fit(shapes, times)


def test_fit_takes_numpy_arrays_and_generators() -> None:
    shapes = [(m, n, k) for m in (64, 512, 1024) for n in (128, 640) for k in (256, 1024)]
    times = [predict_us(TRUTH, *s) for s in shapes]
    for given in (np.array(shapes), (s for s in shapes)):
        got = fit(given, np.array(times))
        assert got.eta_hbm == pytest.approx(0.45, rel=1e-6)
        assert type(got.t0_us) is float


# --- sim/tpu.py: TpuFit, TpuChip, predict_us ---

@pytest.mark.parametrize("bad", [(0.7, 0.0, 0.45), (0.7, 0.37, 0.0), (-5.0, 0.3, 0.4), (math.nan, 0.3, 0.4),
                                 (0.7, -0.3, 0.4), (0.7, math.inf, 0.4), (0.7, 1e-320, 0.4), (0.7, 1.5, 0.4),
                                 (math.inf, 0.3, 0.4), (0.7, True, 0.4), (0.7, "0.3", 0.4)])
def test_a_fit_that_is_not_physical_is_refused(bad) -> None:
    """Each once gave ZeroDivisionError, a negative, NaN or infinite time, or a time from a negative rate."""
    with pytest.raises(ConfigError, match="TpuFit"):
        TpuFit(*bad)


@pytest.mark.parametrize("change", [{"cores": 0}, {"cores": -1}, {"mxus_per_core": 0}, {"hbm_gbps": 0},
                                    {"sublanes": 0}, {"clock_ghz": math.nan}, {"hbm_gbps": math.inf},
                                    {"cores": True}, {"cores": 2.0}, {"vmem_mib": -1.0}, {"name": ""}])
def test_a_chip_that_is_not_one_is_refused(change) -> None:
    with pytest.raises(ConfigError, match="TpuChip"):
        dataclasses.replace(TPU_V4, **change)


def test_predictions_are_finite_and_positive_or_refused() -> None:
    slow = dataclasses.replace(TPU_V4, hbm_gbps=1e-300)  # a valid chip whose terms overflow
    with pytest.raises(ConfigError, match="overflow"):
        predict_us(TRUTH, 2**31 - 1, 2**31 - 1, 2**31 - 1, chip=slow)
    crawl = TpuFit(0.0, 1e-300, 1e-300)  # a valid fit whose time overflows on the largest shape
    assert 0 < predict_us(crawl, 64, 64, 64) < math.inf
    with pytest.raises(ConfigError, match="not a finite, positive"):
        predict_us(crawl, 2**31 - 1, 2**31 - 1, 2**31 - 1)
    with pytest.raises(ConfigError, match="TpuFit"):
        predict_us((0.7, 0.37, 0.45), 64, 64, 64)  # a tuple, not a TpuFit


def test_numpy_integers_are_dims_and_bool_is_no_width() -> None:
    ref = predict_us(TRUTH, 64, 128, 256)
    assert predict_us(TRUTH, np.int64(64), np.int32(128), np.uint16(256)) == ref
    for width in (np.float32(2.0), np.int64(2), np.float64(2.0)):
        got = predict_us(TRUTH, 64, 128, 256, dtype_bytes=width)
        assert got == ref and type(got) is float
    for bad in (True, np.bool_(True)):
        with pytest.raises(ConfigError, match="dtype_bytes"):
            matmul_terms(64, 64, 64, dtype_bytes=bad)
        with pytest.raises(ConfigError, match="matmul M"):
            matmul_terms(bad, 64, 64)


def test_max_tpu_dim_is_not_the_workload_limit() -> None:
    import npukit.sim
    from npukit.sim import tpu

    assert tpu.MAX_TPU_DIM == tpu.MAX_DIM == 2**31 - 1 != npukit.sim.MAX_DIM
    assert "MAX_TPU_DIM" in tpu.__all__ and "MAX_DIM" not in tpu.__all__  # a star import never shadows sim's
    with pytest.raises(ConfigError, match=f"1 to {2**31 - 1}"):
        matmul_terms(tpu.MAX_TPU_DIM + 1, 1, 1)
    assert isinstance(TPU_V4, TpuChip)


# --- bench_vs_tpu: read_rows and the CSV's columns ---

HEAD = "kernel_name,dim_m,dim_n,dim_k,fusion_avg\n"


def test_read_rows_names_file_lines_and_reads_what_csv_reads(tmp_path) -> None:
    from npukit.benchmarks import bench_vs_tpu as bench

    blank = tmp_path / "blank.csv"
    blank.write_text(HEAD + "a,64,64,64,1.5\n\n\nb,128,128,x,2.5\n")  # the bad row is file line 5 ("line 3" before)
    with pytest.raises(ConfigError, match="line 5:"):
        bench.read_rows(blank)
    dup = tmp_path / "dup.csv"
    dup.write_text(HEAD + '"multi\nline",64,64,64,1.5\n' + "b,128,128,128,2.5\n\nc,128,128,128,3.5\n")
    with pytest.raises(ConfigError, match="line 3:"):  # the quoted line break ends its record on line 3
        bench.read_rows(dup)
    sep = tmp_path / "sep.csv"
    sep.write_text(HEAD + "a\u2028z,64,64,64,1.5\nb\u2029y,128,128,128,2.5\n", encoding="utf-8")  # one field each
    assert [r[1] for r in bench.read_rows(sep)] == [(64, 64, 64), (128, 128, 128)]


def test_the_csv_columns_protocols_are_documented() -> None:
    from npukit.benchmarks import bench_vs_tpu as bench

    doc = (Path(__file__).resolve().parents[1] / "docs" / "tpu.md").read_text()
    for text in (bench.__doc__, doc):
        for col in ("predicted_us", "baseline_us", "simulator_us", "simulated_us", "mxu_us_at_peak"):
            assert col in text
        assert "in-sample" in text


# --- no run replaces another's results ---

def test_publish_never_replaces_a_file(tmp_path) -> None:
    from npukit.benchmarks import bench_multicore_scaling as scaling
    from npukit.benchmarks import bench_vs_stream as stream
    from npukit.benchmarks import bench_vs_tpu as bench
    from npukit.benchmarks._args import publish

    assert bench.publish is scaling.publish is stream.publish is publish  # one home, every bench's writes
    for name in ("tpu", "scaling"):
        out = tmp_path / name
        out.mkdir()

        def write(p: Path) -> Path:
            p.write_text("mine")
            return p
        assert publish(out, "a.csv", write) == out / "a.csv"
        assert (out / "a.csv").read_text() == "mine"
        (out / "b.csv").write_text("another run's")
        with pytest.raises(ConfigError, match="another run"):
            publish(out, "b.csv", write)
        assert (out / "b.csv").read_text() == "another run's"
        assert sorted(p.name for p in out.iterdir()) == ["a.csv", "b.csv"]  # no stage folder left


def _fake_scaling(monkeypatch, on_first_call=None) -> None:  # noqa: ANN001
    from types import SimpleNamespace

    import npukit.sim
    from npukit import workloads
    from npukit.benchmarks import bench_multicore_scaling as scaling
    from npukit.sim import multicore_sim
    from npukit.sim.workload import Layer, Workload

    calls = []

    def fake(wl, march):  # noqa: ANN001, ANN202
        if not calls and on_first_call:
            on_first_call()
        calls.append(1)
        return SimpleNamespace(schedule=SimpleNamespace(label="none/split"), latency_s=1e-3, energy_pj=1e9,
                               utilization=0.5, interconnect_share=0.1, interconnect_bytes=0.0, rows=lambda: [])

    monkeypatch.setattr(multicore_sim, "simulate_multicore", fake)
    monkeypatch.setattr(workloads, "workload_from_spec", lambda spec: Workload("w", [Layer("g", 8, 8, 8)]))
    monkeypatch.setattr(scaling, "figure", lambda *a: None)  # no matplotlib: the test stays fast
    monkeypatch.setattr(npukit.sim, "write_figure", lambda p, fig, **kw: (Path(p).write_bytes(b"png"), Path(p))[1])


def test_scaling_bench_makes_its_out_before_simulating_and_keeps_another_runs_file(tmp_path, monkeypatch,
                                                                                  capsys) -> None:
    from npukit.benchmarks import bench_multicore_scaling as b

    out = tmp_path / "out"
    seen = []
    _fake_scaling(monkeypatch, lambda: seen.append(out.is_dir()))
    argv = ["bench_multicore_scaling.py", "--cores", "1", "--repeats", "1", "--models", next(iter(b.MODELS)),
            "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    assert b.main() == 0 and seen == [True]
    capsys.readouterr()
    # another run's CSV appears while this one simulates: refused with one line, that file kept
    out2 = tmp_path / "out2"
    _fake_scaling(monkeypatch, lambda: (out2 / "multicore_scaling.csv").write_text("theirs"))
    monkeypatch.setattr(sys, "argv", argv[:-1] + [str(out2)])
    assert b.main() == 2
    err = capsys.readouterr().err.strip()
    assert "another run" in err and "\n" not in err
    assert (out2 / "multicore_scaling.csv").read_text() == "theirs"


# --- bench_vs_stream: --stream-json and --stream-python ---

HW = Path(__file__).parent / "data" / "stream_hw"


def _runs(tmp_path: Path, link: dict | None = None, slots: list | None = None) -> Path:
    import json

    hw = {"name": "tpu_like_quad_core", "cores": {"0": {"path": str(HW / "cores" / "tpu_like.yaml")}},
          "links": [link if link is not None else {"type": "link", "bandwidth_bits": 32, "unit_energy_cost": 0}]}
    run = {"case": "swiglu", "hardware": hw["name"], "fused": False, "cycles": 548.0, "energy_pj": 472000.0,
           "wall_s": 0.6}
    if slots is not None:
        run["slots"] = slots
    p = tmp_path / "runs.json"
    p.write_text(json.dumps({"hardware": [hw], "runs": [run]}))
    return p


def _group(**latency: float) -> list:
    lat = {"total": 100, "per_iteration": 100, "overlap": 0, "fill": 0, **latency}
    return [{"latency": lat, "slots": [{"cycles": 60, "nodes": {"n": 1}}, {"cycles": 40, "nodes": {}}]}]


@pytest.mark.parametrize("link, slots, needle", [
    ({"type": "link", "bandwidth_bits": 32}, None, "lacks unit_energy_cost"),  # KeyError traceback before
    ({"type": "link", "bandwidth_bits": 32, "unit_energy_cost": "x"}, None, "unit_energy_cost must be"),  # TypeError
    ({"type": "link", "bandwidth_bits": 32, "unit_energy_cost": math.inf}, None, "unit_energy_cost must be"),
    ({"type": "link", "bandwidth_bits": 32, "unit_energy_cost": True}, None, "unit_energy_cost must be"),
    (None, _group(total=math.inf), "latency total must be"),  # OverflowError traceback before
    (None, _group(overlap=-math.inf), "latency overlap must be"),  # printed -inf, rc 0 before
    (None, [{**_group()[0], "slots": [{"cycles": 1e308, "nodes": {}}] * 2}], "slot cycles must be"),  # printed inf
])
def test_stream_json_refuses_what_it_cannot_print(tmp_path, link, slots, needle) -> None:
    from npukit.benchmarks.bench_vs_stream import load_runs

    with pytest.raises(ValueError, match=needle) as exc:
        load_runs(str(_runs(tmp_path, link, slots)), None, None)
    assert "\n" not in str(exc.value)
    assert load_runs(str(_runs(tmp_path, {"type": "link", "bandwidth_bits": 32, "unit_energy_cost": None},
                               _group())), None, None)["runs"]  # null energy (none given) and readable slots


def test_stream_json_error_lines_escape_control_characters(tmp_path) -> None:
    import json

    from npukit.benchmarks.bench_vs_stream import load_runs

    p = _runs(tmp_path)
    data = json.loads(p.read_text())
    data["hardware"][0]["cores"]["0"]["path"] = "a\x00b\x1b[2J"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="is not here") as exc:
        load_runs(str(p), None, None)
    assert "\x00" not in str(exc.value) and "\x1b" not in str(exc.value) and "\\x00" in str(exc.value)


@pytest.mark.parametrize("kind, needle", [("dir", "is a folder"), ("noexec", "not an executable"),
                                          ("empty", "is empty")])
def test_stream_python_that_cannot_run_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys, kind,
                                                                   needle) -> None:
    from npukit.benchmarks import bench_vs_stream as bvs

    path = {"dir": str(tmp_path), "noexec": str(tmp_path / "python"), "empty": ""}[kind]
    (tmp_path / "python").write_text("not a python")
    # never Stream itself, should the check regress (an empty value used to fall back to .peers/stream)
    monkeypatch.setenv("NPUKIT_STREAM_PYTHON", str(tmp_path / "missing" / "python"))
    monkeypatch.setattr(bvs, "VENV", tmp_path / "missing")
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["bench_vs_stream.py", "--stream-python", path, "--out", str(out)])
    assert bvs.main() == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err
    assert not out.exists()


def test_peer_python_that_cannot_run_is_absent(tmp_path, capsys) -> None:
    from npukit.benchmarks._peers import peer_python

    # a folder given through the environment variable: PermissionError traceback before
    assert peer_python(str(tmp_path), "NPUKIT_NO_SUCH_VAR", tmp_path / "venv", ("x",), "import x", False) is None
    assert "cannot run" in capsys.readouterr().out


@pytest.mark.parametrize("bench, flag", [("bench_vs_zigzag", "--zigzag-python"), ("bench_vs_scalesim", "--scalesim-python")])
def test_an_empty_peer_python_is_refused_not_the_default(bench: str, flag: str, tmp_path) -> None:
    """An empty ``--zigzag-python`` / ``--scalesim-python`` exits 2 with its flag named, before any work; before, it
    silently ran the default virtualenv (as ``--stream-python ""`` did)."""
    import subprocess

    script = Path(__file__).resolve().parents[1] / "benchmarks" / f"{bench}.py"
    run = subprocess.run([sys.executable, str(script), flag, " ", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and f"{flag} is empty" in run.stderr
    assert not (tmp_path / "o").exists()
