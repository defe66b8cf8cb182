"""npukit.sim.tpu: the TPU v4 description, the by-mechanism matmul predictor and its 3-parameter fit, and
benchmarks/bench_vs_tpu.py on the shipped measurements."""

from __future__ import annotations

import dataclasses
import math

import pytest

from npukit.benchmarks import bench_vs_tpu as bench
from npukit.sim import ConfigError, tpu
from npukit.sim.tpu import N_PARAMS, STEADY_ETA_MXU, TILE, TPU_V4, TpuFit, fit, matmul_terms, predict_us


def test_chip_matches_its_public_peak():
    # 2 TensorCores x 4 MXUs x 128 x 128 MACs x 2 FLOP x 1.05 GHz = the published 275 TFLOP/s (bf16)
    assert TPU_V4.mxus == 8
    assert TPU_V4.peak_tflops == pytest.approx(275, rel=0.01)


def test_terms_by_mechanism():
    t = matmul_terms(1024, 1024, 1024)
    # the chip streams 1024^3 MACs over 8 MXUs of 128 x 128 at 1050 cycles per us
    assert t.mxu_us == pytest.approx(1024**3 / (8 * 128 * 128) / 1050)
    assert t.fill_us == pytest.approx((128 + 128 + 128 - 2) / 1050)  # one fill and drain (double-buffered ws)
    assert t.hbm_us == pytest.approx(3 * 1024 * 1024 * 2 / 1.2e6)  # float16 A, B and C once over 1200 GB/s
    assert t.folds == 64
    assert t.tiles == 1 and t.first_mxu_us == t.mxu_us and t.first_hbm_us == t.hbm_us  # one tile of the loop
    # N and K pad to the 128-wide MXU, M to the 8-row sublane tile
    assert matmul_terms(1024, 129, 1024).mxu_us == pytest.approx(matmul_terms(1024, 256, 1024).mxu_us)
    assert matmul_terms(1024, 1024, 129).mxu_us == pytest.approx(matmul_terms(1024, 1024, 256).mxu_us)
    assert matmul_terms(9, 128, 128).mxu_us == pytest.approx(matmul_terms(16, 128, 128).mxu_us)
    assert matmul_terms(9, 128, 128).mxu_us < matmul_terms(17, 128, 128).mxu_us


def test_predictor_runs_and_grows_with_work():
    p = TpuFit(t0_us=0.7, eta_mxu=0.37, eta_hbm=0.45)
    times = [predict_us(p, 256, 256, k) for k in (128, 256, 512, 1024)]
    assert all(math.isfinite(t) and t > 0.7 for t in times)
    assert times == sorted(times) and times[-1] > times[0]
    with pytest.raises(ConfigError):
        matmul_terms(0, 128, 128)
    with pytest.raises(ConfigError):
        matmul_terms(128, 128, 128, dtype_bytes=0)
    for bad in ((10**400, 2, 3), (2**31, 1, 1), (1, 1, 1.5)):
        with pytest.raises(ConfigError):
            matmul_terms(*bad)
    big = predict_us(p, 2**31 - 1, 2**31 - 1, 2**31 - 1)  # the largest shape taken: finite
    assert math.isfinite(big) and big > 0
    with pytest.raises(ConfigError):
        predict_us(p, 128, 128, 128, dtype_bytes=float("nan"))


def test_one_tile_is_the_sum_of_its_terms():
    p = TpuFit(t0_us=0.7, eta_mxu=0.37, eta_hbm=0.45)
    for s in ((32, 48, 64), (1024, 1024, 1024), (1000, 1000, 1000), (512, 1024, 768)):
        t = matmul_terms(*s)
        assert t.tiles == 1
        assert predict_us(p, *s) == pytest.approx(0.7 + t.fill_us + t.mxu_us / 0.37 + t.hbm_us / 0.45)


def test_tiles_beyond_one_pipeline_and_reread():
    t, one = matmul_terms(2048, 2048, 2048), matmul_terms(1024, 1024, 1024)
    assert t.tiles == 2 * 2 * 2  # 1024 rows (512 per core) x 1024 x 1024 per tile
    assert t.mxu_us == pytest.approx(8 * one.mxu_us)
    # A read once per column of tiles, B once per row of tiles, C written once
    assert t.hbm_us == pytest.approx((2 * 2048**2 + 2 * 2048**2 + 2048**2) * 2 / 1.2e6)
    assert (t.first_mxu_us, t.first_hbm_us) == pytest.approx((one.mxu_us, one.hbm_us))
    p = TpuFit(t0_us=0.7, eta_mxu=0.37, eta_hbm=0.45)
    got = predict_us(p, 2048, 2048, 2048)
    head = 0.7 + one.fill_us + one.mxu_us / 0.37 + one.hbm_us / 0.45
    # the other tiles overlap loads and MXU work: bounded by either alone and by their sum
    assert got == pytest.approx(head + max(t.rest_mxu_us / STEADY_ETA_MXU, t.rest_hbm_us / 0.45))
    assert head + t.rest_mxu_us / STEADY_ETA_MXU <= got < head + t.rest_mxu_us / STEADY_ETA_MXU + t.rest_hbm_us / 0.45
    # time never falls as any dimension grows past a tile's edge
    for d in range(3):
        times = []
        for v in (1016, 1024, 1032, 1536, 2048, 2056):
            s = [1024, 1024, 1024]
            s[d] = v
            times.append(predict_us(p, *s))
        assert times == sorted(times)


def test_the_tile_fits_the_vector_memory():
    # double-buffered float16 A and B tiles, a float32 accumulator and a double-buffered float16 output tile
    rows, n, k = TILE
    need = 2 * (rows * k + k * n) * 2 + rows * n * 4 + 2 * rows * n * 2
    assert need <= TPU_V4.vmem_mib * 2**20
    assert 2 * need > TPU_V4.vmem_mib * 2**20  # twice the tile would not fit


def test_fit_has_three_parameters_and_recovers_them():
    assert N_PARAMS == 3 == len(dataclasses.fields(TpuFit))
    truth = TpuFit(t0_us=1.1, eta_mxu=0.4, eta_hbm=0.5)
    shapes = [(m, n, k) for m in (64, 512, 1024, 3000) for n in (128, 640, 2048) for k in (256, 1024, 4096)]
    assert any(matmul_terms(*s).tiles > 1 for s in shapes)
    got = fit(shapes, [predict_us(truth, *s) for s in shapes])
    assert got.t0_us == pytest.approx(truth.t0_us, rel=1e-6)
    assert got.eta_mxu == pytest.approx(truth.eta_mxu, rel=1e-6)
    assert got.eta_hbm == pytest.approx(truth.eta_hbm, rel=1e-6)
    with pytest.raises(ConfigError):
        fit(shapes[:2], [1.0, 2.0])


def test_beats_the_scalesim_line_on_the_shipped_shapes():
    rows = bench.shipped_rows()
    assert len(rows) == 854  # 343 + 512 rows, 128^3 in both files
    meas = [r[2] for r in rows]
    r2, mape = bench.scores(meas, bench.leave_one_class_out(rows, lambda rs: bench.fit_mechanism(rs)[0]))
    br2, bmape = bench.scores(meas, bench.leave_one_class_out(rows, bench.fit_baseline))
    assert r2 > br2 and mape < bmape
    assert r2 > 0.95 and mape < 8.0
    # the extrapolation check: fit on M, N, K <= 512, predict the larger shapes
    small = [r for r in rows if max(r[1]) <= 512]
    large = [r for r in rows if max(r[1]) > 512]
    f, _ = bench.fit_mechanism(small)
    xr2, xmape = bench.scores([r[2] for r in large], [f(r[1]) for r in large])
    b = bench.fit_baseline(small)
    bxr2, bxmape = bench.scores([r[2] for r in large], [b(r[1]) for r in large])
    assert xr2 > bxr2 and xmape < bxmape


def test_beyond_one_tile_the_model_parts_from_the_scalesim_line(monkeypatch):
    """Past one tile the pipelined MXU rate sets the time: with it the baseline line cannot follow the model on
    larger shapes; with the one-tile rate carried over, it would (the model's first version)."""
    rows = bench.shipped_rows()
    base = bench.fit_baseline(rows)
    model, params = bench.fit_mechanism(rows)
    r2, _ = bench.line_against_model(model, base)
    assert r2 < 0
    monkeypatch.setattr(tpu, "STEADY_ETA_MXU", params.eta_mxu)
    assert bench.line_against_model(bench.fit_mechanism(rows)[0], base)[0] > 0.5


def test_bench_bad_csv_exits_2_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("kernel_name,dim_m,dim_n\nx,1,2\n")
    out = tmp_path / "out"
    assert bench.main(["--measured", str(bad), "--out", str(out)]) == 2
    assert "lacks columns" in capsys.readouterr().err
    assert not out.exists()
    huge = tmp_path / "huge.csv"
    huge.write_text("kernel_name,dim_m,dim_n,dim_k,fusion_avg\nx,1" + "0" * 400 + ",2,3,5.0\n")
    assert bench.main(["--measured", str(huge), "--out", str(out)]) == 2
    assert "sizes must be from 1 to" in capsys.readouterr().err
    assert not out.exists()


HEAD = "kernel_name,dim_m,dim_n,dim_k,fusion_avg\n"


@pytest.mark.parametrize("body, needle", [
    ("a,1024,1024,1024,43.9\nb,1024,1024,1024,999\n", "is already on line 2"),  # one shape, two times
    ("a,1024,1024,1024,1e308\nb,128,128,128,1.3\n", "the time from"),  # scores overflowed
    ("a,1024,1024,1024,5e-324\nb,128,128,128,1.3\n", "the time from"),  # error_pct was inf
    ("a,1_024,1024,1024,43.9\nb,128,128,128,1.3\n", "must be integers"),  # int() took it
    ("a,\u0661\u0662\u0668,128,128,1.3\nb,256,128,128,1.5\n", "must be integers"),  # Arabic-Indic digits
    ("a\x00b,1024,1024,1024,43.9\nb,128,128,128,1.3\n", "control character"),
    ("a,1024,1024,1024,43.9\n", "at least two shapes"),  # R^2 was nan
    ("a,1024,1024,1024,10\nb,128,128,128,10\n", "at least two shapes"),
    ('"' + "x" * 200_000 + '",1024,1024,1024,43.9\n', "not a CSV this reads"),  # the csv module's field limit
    ("a," + "1" * 5000 + ",128,128,1.3\nb,256,128,128,1.5\n", "sizes must be from 1"),  # int(): ValueError, exit 1
    ("a,128,128,128,1_0\nb,256,128,128,1.5\n", "must be integers"),  # float() read 1_0 as 10
    ('a,128,128,128,1.3\n"b,256,128,128,1.5\nc,512,128,128,2.5\n', "a quoted field is not closed"),  # was "integers"
])
def test_bench_refuses_what_it_cannot_score(tmp_path, capsys, body, needle):
    """Each measured CSV above once gave a traceback, inf or nan, or a silent choice between two times."""
    bad = tmp_path / "bad.csv"
    bad.write_text(HEAD + body)
    out = tmp_path / "out"
    assert bench.main(["--measured", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err
    assert not out.exists()


def test_bench_refuses_a_device_an_empty_path_and_a_repeated_column(tmp_path, capsys):
    dup = tmp_path / "dup.csv"
    dup.write_text("kernel_name,dim_m,dim_n,dim_k,fusion_avg,dim_m\na,1,2,3,4.0,9\n")
    out = tmp_path / "out"
    for measured, needle in (("/dev/zero", "not a regular file"), ("", "path is empty"), (str(dup), "twice")):
        assert bench.main(["--measured", measured, "--out", str(out)]) == 2
        assert needle in capsys.readouterr().err
        assert not out.exists()
    with pytest.raises(SystemExit) as exc:  # argparse: one line, exit 2
        bench.main(["--measured"])
    assert exc.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.slow
def test_bench_predicts_a_measured_csv(tmp_path, capsys):
    src = bench.SHIPPED[0].read_text().splitlines()
    mine = tmp_path / "mine.csv"
    mine.write_text("\n".join(src[:6]) + "\n")
    out = tmp_path / "out"
    assert bench.main(["--measured", str(mine), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mine.csv (fit on shipped)" in text and "ten worst shapes (measured CSV)" in text
    assert "tpu_matmul_profiles.csv: 1024..4084, not fitted" in text and "split the larger of M and N" in text
    assert "tpu_matmul_4096.csv's rate carried to tpu_matmul_profiles.csv: R^2" in text
    assert "simulate_multicore on tpu_v4 + t0, scale (2)" in text and "mine.csv by the simulator" in text
    assert (out / "tpu_predictions.csv").read_text().count("\n") == 6  # header + 5 shapes
    assert "simulator_us" in (out / "tpu_predictions.csv").read_text().splitlines()[0]
    assert (out / "tpu_measured_vs_predicted.png").stat().st_size > 0
    before = (out / "tpu_predictions.csv").read_text()
    assert bench.main(["--measured", str(mine), "--out", str(out)]) == 2  # never overwrites another run
    assert "already holds" in capsys.readouterr().err
    assert (out / "tpu_predictions.csv").read_text() == before


def test_tiling_check_baseline_variant_is_the_model() -> None:
    """The tiling check's "the model" row refits the same three parameters as the mechanism; each variant moves
    the prediction (so the check compares something)."""
    rows = [r for r in bench.shipped_rows() if max(r[1]) <= 512]
    model, _ = bench.fit_mechanism(rows)
    same = bench.fit_variant(rows, "the model")
    for s in ((1024, 1024, 1024), (128, 640, 384), (32, 48, 112)):
        assert math.isclose(same(s), model(s), rel_tol=1e-9)
    for name in bench.VARIANTS[1:]:
        other = bench.fit_variant(rows, name)
        assert any(not math.isclose(other(s), model(s), rel_tol=1e-6)
                   for s in ((1024, 896, 1024), (200, 300, 700), (512, 256, 512)))


def test_core_split_variants_count_the_operand_both_cores_read() -> None:
    """The megacore variants: under the M split each core streams half the rows and (variant "B read by both
    cores") reads all of B; under the N split each core streams every row on half the N tiles and reads all of A."""
    hbm_us = lambda elems: 2 * elems / (TPU_V4.hbm_gbps * 1e3)  # noqa: E731 (float16 over the HBM peak)
    m, n, k = 1024, 256, 768
    fill, (c, mxu, hbm) = bench.variant_features((m, n, k), "the model")
    _, (_, mxu_b, hbm_b) = bench.variant_features((m, n, k), "B read by both cores (M split)")
    assert mxu_b == mxu and hbm_b == pytest.approx(hbm + hbm_us(k * n))
    # N = 256: one MXU tile per core, the same MXU stream, A read twice
    _, (_, mxu_n, hbm_n) = bench.variant_features((m, n, k), "cores split N when it is two MXU tiles wide")
    assert mxu_n == pytest.approx(mxu) and hbm_n == pytest.approx(hbm + hbm_us(m * k))
    assert bench.variant_features((m, 384, k), "cores split N when it is two MXU tiles wide") == \
        bench.variant_features((m, 384, k), "the model")
    # M or N, whichever streams less: 3 N tiles split 2 + 1 stream more than half the rows, so M is split
    _, (_, mxu_3, hbm_3) = bench.variant_features((m, 384, k), "cores split M or N, whichever streams (then moves) less")
    _, (_, mxu_m, hbm_m) = bench.variant_features((m, 384, k), "the model")
    assert mxu_3 == pytest.approx(mxu_m) and hbm_3 == pytest.approx(hbm_m + hbm_us(k * 384))
    # XLA's choice in the profiles: N > M splits N (A read by both cores), else M (B read by both)
    larger = "cores split the larger of M and N (XLA's choice in the profiles)"
    assert bench.variant_features((m, n, k), larger) == bench.variant_features((m, n, k), "B read by both cores (M split)")
    _, (_, mxu_l, hbm_l) = bench.variant_features((256, 384, k), larger)  # 3 N tiles: 2 on one core
    _, (_, mxu_t, hbm_t) = bench.variant_features((256, 384, k), "the model")
    assert hbm_l == pytest.approx(hbm_t + hbm_us(256 * k)) and mxu_l == pytest.approx(mxu_t * 4 / 3)
    # the VPU variant moves HBM time (at its peak) into the fixed part and times the conversion of A and B
    fix_v, (_, _, vpu) = bench.variant_features((m, n, k), "f16->bf16 pass over A and B on the VPU, HBM at peak")
    assert fix_v == pytest.approx(fill + hbm)
    assert vpu == pytest.approx((m * k + k * n) / (TPU_V4.cores * bench.VPU_ELEMS_PER_CYCLE * TPU_V4.clock_ghz * 1e3))


@pytest.mark.slow
def test_the_larger_measured_file_is_the_same_measurement_at_larger_sizes_and_is_never_fitted():
    big = bench.read_rows(bench.LARGER_MEASURED)
    sizes = set(range(1024, 4097, 512))
    assert len(big) == 343 and {s for r in big for s in r[1]} == sizes
    ship = {r[1]: r[2] for r in bench.shipped_rows()}
    (cube,) = [r[2] for r in big if r[1] == (1024, 1024, 1024)]
    assert cube == pytest.approx(ship[(1024, 1024, 1024)], rel=0.01)  # the one shape both files time
    assert bench.LARGER_MEASURED not in bench.SHIPPED
    _, params = bench.fit_mechanism(bench.shipped_rows())
    rate, (r2, mape) = bench.steady_rate_diagnostic(big, params)
    # the file's pipelined float16 rate lies between the one-tile rate and the bf16 figure the model borrows
    assert params.eta_mxu < rate < STEADY_ETA_MXU and r2 > 0.95 and mape < 10


def test_the_profiled_file_holds_xlas_schedule_and_is_never_fitted() -> None:
    """The 100 profiled shapes: the same measurement as the shipped files (1024^3 within 1%), never fitted on,
    and XLA's backend config read from each profile: the larger of M and N split over the cores (99 of 100), the
    N split the slower, the 1024^3 loop 8 window steps."""
    from npukit.benchmarks import _tpu_profiles as prof

    rows = prof.read_schedules()
    assert len(rows) == 100 and len({r.shape for r in rows}) == 100 and prof.PROFILED not in bench.SHIPPED
    assert [r[1] for r in bench.read_rows(prof.PROFILED)] == [r.shape for r in rows]
    ship = {r[1]: r[2] for r in bench.shipped_rows()}
    (cube,) = [r for r in rows if r.shape == (1024, 1024, 1024)]
    assert cube.us == pytest.approx(ship[(1024, 1024, 1024)], rel=0.01) and cube.steps == 8
    lines = prof.schedule_lines(rows)
    assert lines[0].startswith("the two TensorCores split the larger of M and N on 99 of 100 shapes")
    by = {d: sorted(prof.peak_fraction(r) for r in rows if r.split == d) for d in (0, 1)}
    assert by[1][len(by[1]) // 2] < by[0][len(by[0]) // 2]
    r2, mape = prof.smooth_ceiling(rows)
    assert 0 < r2 < 0.98 and mape > 10  # no smooth t0 + FLOPs / rate fit reaches the target on these shapes


def test_smooth_ceiling_recovers_an_exact_line() -> None:
    from npukit.benchmarks import _tpu_profiles as prof

    rows = [prof.Schedule((m, 512, 256), 1.0 + 2 * m * 512 * 256 / 5e7, 0, "e", 1, 1) for m in (64, 256, 1024, 4096)]
    r2, mape = prof.smooth_ceiling(rows)
    assert r2 == pytest.approx(1.0) and mape == pytest.approx(0.0, abs=1e-6)
