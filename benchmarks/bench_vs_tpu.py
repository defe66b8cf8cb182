"""Predict measured Cloud TPU v4 matmul times by mechanism (npukit.sim.tpu) and score the prediction.

    python benchmarks/bench_vs_tpu.py --out out/tpu
    python benchmarks/bench_vs_tpu.py --measured my_shapes.csv --out out/tpu_mine

The model's three parameters are always fitted on the shipped shapes only
(``benchmarks/data/tpu_matmul/``, see its README for the source). Printed: the fit, then for the
shipped shapes leave-one-size-class-out (size class = the largest of M, N, K; each class predicted by
a fit on the others) and the extrapolation check (fit on shapes with M, N, K <= 512, predict the
rest); the fit on all shipped shapes against the larger measured shapes of the same source (1024..4096,
``tpu_matmul_4096.csv``, and 100 profiled shapes with XLA's backend config, ``tpu_matmul_profiles.csv``; never
fitted on), an in-sample diagnostic of what they say beyond one tile and what XLA's configs say; for
``--measured CSV`` (same columns as the shipped files: ``kernel_name, dim_m, dim_n,
dim_k, fusion_avg``, times in µs) R^2, MAPE and the ten worst shapes of the prediction fitted on all
shipped shapes. Each block also shows the baseline: a line fitted to SCALE-Sim's single-array cycles
(128 x 128 ws, min over the two operand orders) under the same protocol. Beyond the shipped
shapes (more than one tile of XLA's loop) it prints predictions for the record and how far the baseline
line parts from them on a 512..4096 grid. It also scores npukit's general multi-core simulator on the ``tpu_v4``
preset under the same protocol (two parameters calibrated: ``benchmarks/_tpu_sim.py``). Writes
``tpu_predictions.csv`` and ``tpu_measured_vs_predicted.png`` under ``--out``.

``tpu_predictions.csv`` has one row per shape (the shipped shapes, or the ``--measured`` ones); times in µs. Its
columns do not all come from the same protocol:

* ``measured_us``: the measurement;
* ``predicted_us``, ``error_pct`` (100 x (predicted - measured) / measured): the model. Without ``--measured``
  left out: each shape predicted by the fit on the other size classes (the plot's and the ten worst shapes'
  numbers). With ``--measured``: the fit on all shipped shapes;
* ``mxu_us_at_peak``, ``hbm_us_at_peak``: the mechanism's MXU and HBM terms at the peaks (no fit);
* ``baseline_us``: the baseline line fitted on **all** shipped shapes, in-sample on the shipped shapes (the
  tables' left-out baseline scores are not in the CSV);
* ``simulated_us``: npukit's multi-core simulator on the preset, uncalibrated;
* ``simulator_us``: that simulator with t0 and scale fitted on **all** shipped shapes (in-sample, like the
  baseline).

So on the default run ``predicted_us`` is left out and ``baseline_us`` and ``simulator_us`` are not: row by row they
favour the baseline and the simulator; the tables compare the three under one protocol.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from npukit.benchmarks._args import Parser, out_folder, publish
from npukit.benchmarks._tpu_profiles import PROFILED, read_schedules, schedule_lines
from npukit.benchmarks._tpu_sim import PRESET, fit_simulator, simulated_us
from npukit.sim import ConfigError, NpukitError, format_table, prepare_out_dir, write_csv, write_figure
from npukit.sim.textfile import check_file, read_text
from npukit.sim.tpu import (
    GENERATIONS,
    MAX_TPU_DIM,
    N_PARAMS,
    STEADY_ETA_MXU,
    TILE,
    TPU_V4,
    TpuChip,
    TpuFit,
    first_tile_us,
    fit,
    matmul_terms,
    predict_us,
)

DATA = Path(__file__).resolve().parent / "data" / "tpu_matmul"
SHIPPED = (DATA / "tpu_matmul_128.csv", DATA / "tpu_matmul_1024.csv")
#: Measured shapes of 1024..4096 from the same source, never fitted on: scored against the fit on SHIPPED (its README).
LARGER_MEASURED = DATA / "tpu_matmul_4096.csv"
COLUMNS = ("kernel_name", "dim_m", "dim_n", "dim_k", "fusion_avg")
EXTRAPOLATION_MAX = 512
OUTPUTS = ("tpu_predictions.csv", "tpu_measured_vs_predicted.png")
#: The padding check: the same chip with 256 x 256 MXUs (as TPU v6e's) and the same peak.
WIDE_MXU = replace(TPU_V4, name="tpu-v4-with-256-mxu", mxus_per_core=1, mxu_rows=256, mxu_cols=256)
#: Shapes beyond the shipped ones, predicted for the record (no measurement here).
LARGER = ((2048, 2048, 2048), (4096, 4096, 4096), (4096, 4096, 1024), (1024, 1024, 4096), (2048, 4096, 3072))

Shape = tuple[int, int, int]
Row = tuple[str, Shape, float]


MIN_US, MAX_US = 1e-3, 1e9  # a measured time outside this (µs) is not a matmul's


def read_rows(path: str | Path) -> list[Row]:
    """(kernel_name, (M, N, K), measured µs) rows of a measurement CSV; :class:`ConfigError` (one line) if it is
    not a readable UTF-8 file of at most 64 MiB with the columns :data:`COLUMNS` (each once), sizes from 1 to
    :data:`npukit.sim.tpu.MAX_TPU_DIM`, times from 0.001 µs to 10^9 µs, kernel names without control characters and
    no shape twice. Errors name the file line a row ends on (blank lines and quoted line breaks counted)."""
    p = Path(path)
    hint = f"pass a CSV with columns {', '.join(COLUMNS)}"
    if not str(path).strip():
        raise ConfigError(f"the measured CSV path is empty; {hint}")
    text = read_text(check_file(p, "measured CSV", ConfigError, hint), "measured CSV", ConfigError)
    # newline="": lines split on \n, \r\n and \r only, as the csv module expects (str.splitlines also splits on
    # U+2028, \x0c, ..., which a field may hold); strict: an unclosed quote is an error, not a field
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    names = reader.fieldnames or []
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ConfigError(f"measured CSV '{p}' lacks columns {', '.join(missing)}; it needs {', '.join(COLUMNS)}")
    if twice := sorted({c for c in names if names.count(c) > 1}):
        raise ConfigError(f"measured CSV '{p}' names column {twice[0]} twice")
    rows: list[Row] = []
    seen: dict[Shape, int] = {}
    try:
        for r in reader:
            i = reader.line_num  # the file line this record ends on
            dims = [str(r[c] or "").strip() for c in ("dim_m", "dim_n", "dim_k")]
            avg = str(r["fusion_avg"] or "").strip()
            try:  # no digit separators (float() reads 1_0 as 10), no 5,000-digit numbers
                t = float(avg) if "_" not in avg and len(avg) <= 64 else math.nan
            except (TypeError, ValueError):
                t = math.nan
            if not all(d.isascii() and d.isdigit() for d in dims) or not math.isfinite(t):
                raise ConfigError(f"measured CSV '{p}' line {i}: dim_m/dim_n/dim_k must be integers "
                                  "and fusion_avg a number")
            shape = tuple(int(d) if len(d) <= 18 else MAX_TPU_DIM + 1 for d in dims)  # int() refuses 4,301 digits
            if min(shape) < 1 or max(shape) > MAX_TPU_DIM or not MIN_US <= t <= MAX_US:
                raise ConfigError(f"measured CSV '{p}' line {i}: sizes must be from 1 to {MAX_TPU_DIM} and the time "
                                  f"from {MIN_US:g} to {MAX_US:g} µs")
            name = str(r["kernel_name"] or "")
            if any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in name):
                raise ConfigError(f"measured CSV '{p}' line {i}: kernel_name holds a control character")
            if shape in seen:
                raise ConfigError(f"measured CSV '{p}' line {i}: shape {shape[0]}x{shape[1]}x{shape[2]} is already "
                                  f"on line {seen[shape]}; give each shape once (its mean time)")
            seen[shape] = i
            rows.append((name, shape, t))
    except csv.Error as exc:
        why = "a quoted field is not closed" if "end of data" in str(exc) else str(exc)
        raise ConfigError(f"measured CSV '{p}' is not a CSV this reads ({why})") from None
    if not rows:
        raise ConfigError(f"measured CSV '{p}' has no rows")
    return rows


def shipped_rows() -> list[Row]:
    """The shipped measurements, one row per shape (a shape measured in both files keeps its mean)."""
    by_shape: dict[Shape, list[Row]] = {}
    for path in SHIPPED:
        for row in read_rows(path):
            by_shape.setdefault(row[1], []).append(row)
    return [(rs[0][0], s, sum(r[2] for r in rs) / len(rs)) for s, rs in by_shape.items()]


def scalesim_cycles(m: int, n: int, k: int, size: int = 128) -> int:
    """SCALE-Sim v3 ws compute cycles of one 128 x 128 array, min over the two operand orders."""
    def ws(rows: int, cols: int) -> int:
        return -(-k // size) * -(-cols // size) * (3 * size + rows - 2) - 1
    return min(ws(m, n), ws(n, m))


# --- the two predictors, each a fit on (shapes, times) returning a function of a shape ---

Predictor = Callable[[Shape], float]


def fit_mechanism(rows: Sequence[Row], chip: TpuChip = TPU_V4) -> tuple[Predictor, TpuFit]:
    params = fit([r[1] for r in rows], [r[2] for r in rows], chip)
    return (lambda s: predict_us(params, *s, chip=chip)), params


def fit_overlapped(rows: Sequence[Row]) -> Predictor:
    """The alternative the overlap check rejects: the same three parameters, but HBM transfers hidden behind
    the MXUs (t = t0 + fill + max(MXU / eta_mxu, HBM / eta_hbm)); least squares on the relative error."""
    import numpy as np
    from scipy.optimize import least_squares

    terms = [matmul_terms(*r[1], chip=TPU_V4) for r in rows]
    f, m, h = (np.array([getattr(t, a) for t in terms]) for a in ("fill_us", "mxu_us", "hbm_us"))
    y = np.array([r[2] for r in rows])
    p = least_squares(lambda p: (p[0] + f + np.maximum(m * p[1], h * p[2]) - y) / y, [0.7, 2.7, 2.2]).x

    def pred(s: Shape) -> float:
        t = matmul_terms(*s, chip=TPU_V4)
        return float(p[0] + t.fill_us + max(t.mxu_us * p[1], t.hbm_us * p[2]))
    return pred


def fit_baseline(rows: Sequence[Row]) -> Predictor:
    """Ordinary least-squares line t = a + b * SCALE-Sim cycles (the curve that failed on larger shapes)."""
    import numpy as np

    x = np.array([scalesim_cycles(*r[1]) for r in rows], dtype=float)
    y = np.array([r[2] for r in rows])
    b, a = np.polyfit(x, y, 1)
    return lambda s: float(a + b * scalesim_cycles(*s))


def scores(measured: Sequence[float], predicted: Sequence[float]) -> tuple[float, float]:
    """(R^2, MAPE in %) of predictions against measurements."""
    n = len(measured)
    mean = sum(measured) / n
    ss_res = sum((p - m) ** 2 for m, p in zip(measured, predicted, strict=True))
    ss_tot = sum((m - mean) ** 2 for m in measured)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    mape = 100.0 * sum(abs(p - m) / m for m, p in zip(measured, predicted, strict=True)) / n
    return r2, mape


def size_class(shape: Shape) -> int:
    return max(shape)


def leave_one_class_out(rows: Sequence[Row], fitter: Callable[[Sequence[Row]], Predictor]) -> list[float]:
    """Each size class predicted by a fit on all the other classes."""
    pred = [0.0] * len(rows)
    for c in sorted({size_class(r[1]) for r in rows}):
        train = [r for r in rows if size_class(r[1]) != c]
        f = fitter(train)
        for i, r in enumerate(rows):
            if size_class(r[1]) == c:
                pred[i] = f(r[1])
    return pred


def protocol_scores(rows: Sequence[Row], fitter: Callable[[Sequence[Row]], Predictor]) -> list[float]:
    """The protocol every check uses: leave-one-size-class-out R^2 and MAPE %, and fit on M, N, K <=
    :data:`EXTRAPOLATION_MAX` -> the rest R^2 and MAPE % (rounded for printing)."""
    lo = scores([r[2] for r in rows], leave_one_class_out(rows, fitter))
    small = [r for r in rows if size_class(r[1]) <= EXTRAPOLATION_MAX]
    large = [r for r in rows if size_class(r[1]) > EXTRAPOLATION_MAX]
    fs = fitter(small)
    ex = scores([r[2] for r in large], [fs(r[1]) for r in large])
    return [round(lo[0], 4), round(lo[1], 2), round(ex[0], 4), round(ex[1], 2)]


def line_against_model(model: Predictor, base: Predictor, grid_step: int = 512,
                       grid_max: int = 4096) -> tuple[float, float]:
    """(R^2, MAPE %) of the baseline line ``base`` if the ``model``'s predictions were the measurements of the
    M, N, K grid ``grid_step``..``grid_max``: how far the two part beyond the shipped shapes."""
    import itertools

    grid = list(itertools.product(range(grid_step, grid_max + 1, grid_step), repeat=3))
    return scores([model(s) for s in grid], [base(s) for s in grid])


def steady_rate_parts(rows: Sequence[Row], params: TpuFit) -> list[tuple[float, float]]:
    """Per shape, the two parts of :func:`steady_rate_diagnostic`'s predictor in µs: (the model's first tile plus the
    later output tiles' C written at the fitted ``eta_hbm``, the later tiles' MXU streaming at the peak)."""
    parts = []
    for r in rows:
        t = matmul_terms(*r[1], chip=TPU_V4)
        m1, n1 = min(r[1][0], TPU_V4.cores * TILE[0]), min(r[1][1], TILE[1])
        c_rest = 2 * (r[1][0] * r[1][1] - m1 * n1) / (TPU_V4.hbm_gbps * 1e3)
        parts.append((first_tile_us(t, params) + c_rest / params.eta_hbm, t.rest_mxu_us))
    return parts


def steady_rate_diagnostic(rows: Sequence[Row], params: TpuFit) -> tuple[float, tuple[float, float]]:
    """An in-sample diagnostic of the multi-tile part, never used to predict: the model's first tile, then the later
    tiles' MXU streaming at one rate (the best R^2 over a 0.005 grid on ``rows``), their A and B loads hidden behind
    it and every further output tile's C written at the fitted ``eta_hbm``; returns (that rate, its R^2 and MAPE)."""
    parts = steady_rate_parts(rows, params)
    meas = [r[2] for r in rows]
    best = max((scores(meas, [fixed + mxu / (k / 200) for fixed, mxu in parts]), k / 200) for k in range(40, 200))
    return best[1], best[0]


def rate_carried(rows: Sequence[Row], params: TpuFit, rate: float) -> tuple[float, float]:
    """(R^2, MAPE %) on ``rows`` of :func:`steady_rate_diagnostic`'s predictor at a ``rate`` found on other rows."""
    return scores([r[2] for r in rows], [fixed + mxu / rate for fixed, mxu in steady_rate_parts(rows, params)])


def worst(rows: Sequence[Row], pred: Sequence[float], n: int = 10) -> list[list[object]]:
    order = sorted(range(len(rows)), key=lambda i: -abs(pred[i] - rows[i][2]) / rows[i][2])[:n]
    return [[rows[i][0], *rows[i][1], round(rows[i][2], 3), round(pred[i], 3),
             round(100 * (pred[i] - rows[i][2]) / rows[i][2], 1)] for i in order]


def block(title: str, rows: Sequence[Row], pred: Sequence[float], base: Sequence[float]) -> list[object]:
    r2, mape = scores([r[2] for r in rows], pred)
    br2, bmape = scores([r[2] for r in rows], base)
    return [title, len(rows), round(r2, 4), round(mape, 2), round(br2, 4), round(bmape, 2)]


def run(measured: str | None, out: str) -> int:
    out_folder(out, OUTPUTS)
    ship = shipped_rows()
    mine = read_rows(measured) if measured is not None else None
    if mine is not None and (len(mine) < 2 or len({r[2] for r in mine}) < 2):
        raise ConfigError(f"measured CSV '{measured}' needs at least two shapes with different times (R^2 compares "
                          "them)")
    out_dir = prepare_out_dir(out)

    mech, params = fit_mechanism(ship)
    base = fit_baseline(ship)
    print(f"chip {TPU_V4.name}: {TPU_V4.cores} cores x {TPU_V4.mxus_per_core} MXUs of {TPU_V4.mxu_rows}x{TPU_V4.mxu_cols} "
          f"at {TPU_V4.clock_ghz} GHz = {TPU_V4.peak_tflops:.0f} TFLOP/s bf16, HBM {TPU_V4.hbm_gbps:.0f} GB/s")
    print(f"fit on {len(ship)} shipped shapes ({N_PARAMS} parameters): t0 = {params.t0_us:.3f} us, "
          f"eta_mxu = {params.eta_mxu:.3f} ({params.eta_mxu * TPU_V4.peak_tflops:.1f} TFLOP/s), "
          f"eta_hbm = {params.eta_hbm:.3f} ({params.eta_hbm * TPU_V4.hbm_gbps:.0f} GB/s)\n")

    table = []
    loso = leave_one_class_out(ship, lambda rs: fit_mechanism(rs)[0])
    loso_base = leave_one_class_out(ship, fit_baseline)
    table.append(block("shipped, fitted on all", ship, [mech(r[1]) for r in ship], [base(r[1]) for r in ship]))
    table.append(block("shipped, leave one size class out", ship, loso, loso_base))
    small = [r for r in ship if size_class(r[1]) <= EXTRAPOLATION_MAX]
    large = [r for r in ship if size_class(r[1]) > EXTRAPOLATION_MAX]
    f_small, p_small = fit_mechanism(small)
    b_small = fit_baseline(small)
    table.append(block(f"fit M,N,K <= {EXTRAPOLATION_MAX}, predict the rest", large,
                       [f_small(r[1]) for r in large], [b_small(r[1]) for r in large]))
    target = mine if mine is not None else ship
    pred = [mech(r[1]) for r in target] if mine is not None else loso
    if mine is not None:
        table.append(block(f"{Path(measured).name} (fit on shipped)", mine, pred, [base(r[1]) for r in mine]))
    bigger = read_rows(LARGER_MEASURED)
    table.append(block(f"{LARGER_MEASURED.name}: 1024..4096, not fitted", bigger, [mech(r[1]) for r in bigger],
                       [base(r[1]) for r in bigger]))
    profiled = read_rows(PROFILED)
    table.append(block(f"{PROFILED.name}: 1024..4084, not fitted", profiled, [mech(r[1]) for r in profiled],
                       [base(r[1]) for r in profiled]))
    print(format_table(["case", "shapes", "R^2", "MAPE %", "baseline R^2", "baseline MAPE %"], table))
    print("baseline: a least-squares line in SCALE-Sim's 128x128 ws cycles, fitted under the same protocol")
    rates = {}
    for path, rows in ((LARGER_MEASURED, bigger), (PROFILED, profiled)):
        rate, (dr2, dmape) = rates[path] = steady_rate_diagnostic(rows, params)
        print(f"what {path.name} says beyond one tile (in-sample, not the model): with the later tiles' MXUs "
              f"at {rate:.3f} of peak (the model: {STEADY_ETA_MXU}), A and B hidden, C written at eta_hbm after each "
              f"output tile: R^2 {dr2:.3f}, MAPE {dmape:.1f}%")
    for src, dst, dst_rows in ((LARGER_MEASURED, PROFILED, profiled), (PROFILED, LARGER_MEASURED, bigger)):
        cr2, cmape = rate_carried(dst_rows, params, rates[src][0])
        print(f"  {src.name}'s rate carried to {dst.name}: R^2 {cr2:.3f}, MAPE {cmape:.1f}%")
    print(f"XLA's schedule in {PROFILED.name} (its backend configs, not fitted):")
    for line in schedule_lines(read_schedules()):
        print(f"  {line}")
    print(f"fit on M, N, K <= {EXTRAPOLATION_MAX} ({len(small)} shapes): t0 = {p_small.t0_us:.3f} us, "
          f"eta_mxu = {p_small.eta_mxu:.3f}, eta_hbm = {p_small.eta_hbm:.3f}")
    per = []
    for c in sorted({size_class(r[1]) for r in ship}):
        idx = [i for i, r in enumerate(ship) if size_class(r[1]) == c]
        err = [(loso[i] - ship[i][2]) / ship[i][2] for i in idx]
        per.append([c, len(idx), round(100 * sum(map(abs, err)) / len(err), 2), round(100 * sum(err) / len(err), 2)])
    print("\nper size class, left out (no trend in the bias with size is what extrapolation needs):")
    print(format_table(["max(M,N,K)", "shapes", "MAPE %", "bias %"], per))
    pad = []
    for chip in (TPU_V4, WIDE_MXU):
        lo = leave_one_class_out(ship, lambda rs, c=chip: fit_mechanism(rs, c)[0])
        r2, mape = scores([r[2] for r in ship], lo)
        pad.append([f"{chip.mxu_rows}x{chip.mxu_cols} ({chip.name})", round(r2, 4), round(mape, 2)])
    print("\npadding check (N and K padded to the MXU width; leave one size class out on the shipped shapes):")
    print(format_table(["MXU", "R^2", "MAPE %"], pad))
    protocol_head = ["LOSO R^2", "LOSO MAPE %", f"<= {EXTRAPOLATION_MAX} -> rest R^2", "MAPE %"]
    over = [[name, *protocol_scores(ship, fitter)]
            for name, fitter in (("MXU + HBM (the model)", lambda rs: fit_mechanism(rs)[0]),
                                 ("max(MXU, HBM)", fit_overlapped))]
    print("\noverlap check within one tile (HBM time added to or hidden behind the MXU time):")
    print(format_table(["terms", *protocol_head], over))
    tiling = [[name, *protocol_scores(ship, lambda rs, n=name: fit_variant(rs, n))] for name in VARIANTS]
    print("\ntiling check within one tile (three parameters each, the same protocol):")
    print(format_table(["variant", *protocol_head], tiling))
    sim = simulated_us([r[1] for r in ship] + [r[1] for r in mine or []] + list(LARGER))
    sim_fit, (st0, sscale) = fit_simulator(ship, sim)
    raw = scores([r[2] for r in ship], [sim[r[1]] for r in ship])
    general = [[name, *protocol_scores(ship, fitter)]
               for name, fitter in ((f"the model ({N_PARAMS} parameters)", lambda rs: fit_mechanism(rs)[0]),
                                    (f"simulate_multicore on {PRESET} + t0, scale (2)", lambda rs: fit_simulator(rs, sim)[0]),
                                    ("baseline line in SCALE-Sim cycles (2)", fit_baseline))]
    print(f"\nnpukit's general multi-core simulator on the {PRESET} preset (8 MXU cores, CMEM, HBM; "
          f"sim/archs/{PRESET}.toml), the same protocol:")
    print(format_table(["predictor", *protocol_head], general))
    print(f"uncalibrated on the shipped shapes: R^2 {raw[0]:.4f}, MAPE {raw[1]:.2f}% (measured / simulated "
          f"{min(r[2] / sim[r[1]] for r in ship):.2f} to {max(r[2] / sim[r[1]] for r in ship):.2f}); fitted on all: "
          f"t = {st0:.3f} us + {sscale:.3f} x simulated")
    if mine is not None:
        r2, mape = scores([r[2] for r in mine], [sim_fit(r[1]) for r in mine])
        print(f"{Path(measured).name} by the simulator (fit on shipped): R^2 {r2:.4f}, MAPE {mape:.2f}%")
    print("\nwhich generation (one JAX device each; a device cannot beat its peaks):")
    print(format_table(["device", "MXU", "peak TFLOP/s", "HBM GB/s", "best measured / peak", "fits"],
                       generation_rows(ship)))
    big = []
    for s in LARGER:
        t = predict_us(params, *s, chip=TPU_V4)
        big.append([f"{s[0]}x{s[1]}x{s[2]}", round(t, 1), round(2 * s[0] * s[1] * s[2] / t / 1e6, 1),
                    round(sim_fit(s), 1)])
    print("\npredicted beyond the shipped shapes (fit on all shipped shapes; not measured here):")
    print(format_table(["M x N x K", "predicted us", "TFLOP/s", f"simulator on {PRESET} us"], big))
    print(f"4096^3 fitted on M, N, K <= {EXTRAPOLATION_MAX} instead: {predict_us(p_small, 4096, 4096, 4096):.0f} us; "
          f"bounds: MXU at peak {2 * 4096**3 / TPU_V4.peak_tflops / 1e6:.0f} us, "
          f"A, B and C once over HBM at peak {3 * 2 * 4096**2 / TPU_V4.hbm_gbps / 1e3:.0f} us")
    lr2, lmape = line_against_model(mech, base)
    print(f"the baseline line against these predictions on the M, N, K grid 512..4096 (step 512): R^2 {lr2:.2f}, "
          f"MAPE {lmape:.1f}%")
    label = "measured CSV" if mine is not None else "shipped shapes, leave one size class out"
    print(f"\nten worst shapes ({label}):")
    print(format_table(["kernel", "M", "N", "K", "measured us", "predicted us", "error %"], worst(target, pred)))

    err = sorted(((r[2] - p) ** 2, r[2]) for r, p in zip(target, pred, strict=True))[::-1]
    rest = err[5:]  # R^2 over the other shapes (their own mean); only when enough remain to mean something
    sst = sum((m - sum(x for _, x in rest) / len(rest)) ** 2 for _, m in rest) if len(rest) >= 5 else 0.0
    if sst > 0 and sum(e for e, _ in err) > 0:
        print(f"the 5 worst shapes carry {100 * sum(e for e, _ in err[:5]) / sum(e for e, _ in err):.0f}% of the "
              f"squared error (R^2 of the other {len(rest)}: {1 - sum(e for e, _ in rest) / sst:.4f})")

    csv_rows = []
    for r, p in zip(target, pred, strict=True):
        t = matmul_terms(*r[1], chip=TPU_V4)
        csv_rows.append({"kernel_name": r[0], "dim_m": r[1][0], "dim_n": r[1][1], "dim_k": r[1][2],
                         "measured_us": r[2], "predicted_us": round(p, 4),
                         "error_pct": round(100 * (p - r[2]) / r[2], 2),
                         "mxu_us_at_peak": round(t.mxu_us, 4), "hbm_us_at_peak": round(t.hbm_us, 4),
                         "baseline_us": round(base(r[1]), 4), "simulated_us": round(sim[r[1]], 4),
                         "simulator_us": round(sim_fit(r[1]), 4)})
    print(f"\nwrote {publish(out_dir, OUTPUTS[0], lambda p: write_csv(p, csv_rows))}")
    print(f"wrote {publish(out_dir, OUTPUTS[1], lambda p: plot(p, target, pred, label))}")
    return 0


#: Tiling variants the "tiling check" fits (each three parameters, the same protocol as the model): how else XLA
#: could spread the matmul over the MXUs and cores, or what else the fusion spends time on. None beats the model
#: on both leave-one-class-out and extrapolation (docs/tpu.md).
VARIANTS = ("the model", "whole weight tiles per MXU", "fill and drain per weight tile", "rows per core padded to 128",
            "HBM bytes of the padded operands", "512^3 grid-step overhead instead of t0",
            "weight loads not hidden: max(rows per core, 128) per tile", "B read by both cores (M split)",
            "cores split M or N, whichever streams (then moves) less", "cores split N when it is two MXU tiles wide",
            "cores split the larger of M and N (XLA's choice in the profiles)",
            "f16->bf16 pass over A and B on the VPU, HBM at peak")
#: The VPU variant's nominal conversion rate (an estimate, not a published number): one 8 x 128 vector register
#: (the T(8,128) layout tile of the profiled HLO) per cycle per TensorCore.
VPU_ELEMS_PER_CYCLE = 8 * 128


def variant_features(s: Shape, name: str) -> tuple[float, tuple[float, float, float]]:
    """(fixed µs, the three features the calibrated parameters multiply) of ``s`` under tiling variant ``name``."""
    m, n, k = s
    t = matmul_terms(m, n, k, chip=TPU_V4)
    per_us = TPU_V4.clock_ghz * 1e3
    rows = -(-m // TPU_V4.sublanes) * TPU_V4.sublanes / TPU_V4.cores
    tiles = -(-k // TPU_V4.mxu_rows) * -(-n // TPU_V4.mxu_cols)
    fill, mxu, hbm, const = t.fill_us, t.mxu_us, t.hbm_us, 1.0
    if name == "whole weight tiles per MXU":
        mxu = -(-tiles // TPU_V4.mxus_per_core) * rows / per_us
    elif name == "fill and drain per weight tile":
        fill *= math.ceil(tiles / TPU_V4.mxus_per_core)
    elif name == "rows per core padded to 128":
        mxu = tiles / TPU_V4.mxus_per_core * -(-m // (128 * TPU_V4.cores)) * 128 / per_us
    elif name == "HBM bytes of the padded operands":
        mp, np_, kp = -(-m // 8) * 8, -(-n // 128) * 128, -(-k // 128) * 128
        hbm = 2 * (mp * kp + kp * np_ + mp * np_) / (TPU_V4.hbm_gbps * 1e3)
    elif name == "512^3 grid-step overhead instead of t0":
        const = float(-(-m // 512) * -(-n // 512) * -(-k // 512))
    elif name == "weight loads not hidden: max(rows per core, 128) per tile":
        mxu = tiles / TPU_V4.mxus_per_core * max(rows, TPU_V4.mxu_rows) / per_us
    elif name == "B read by both cores (M split)":
        hbm += 2 * k * n / (TPU_V4.hbm_gbps * 1e3)
    elif name == "cores split M or N, whichever streams (then moves) less":
        # M split: the model's rows per core, B read by both cores; N split: every row on each core, half of
        # the N tiles (rounded up) per core, A read by both. XLA's choice modelled as the faster MXU stream,
        # then the fewer HBM bytes.
        n_tiles_per_core = math.ceil(math.ceil(n / TPU_V4.mxu_cols) / TPU_V4.cores)
        n_split = (math.ceil(k / TPU_V4.mxu_rows) * n_tiles_per_core / TPU_V4.mxus_per_core
                   * math.ceil(m / TPU_V4.sublanes) * TPU_V4.sublanes / per_us)
        mxu, other = min((mxu, k * n), (n_split, m * k))  # a tie goes to the split that moves fewer bytes
        hbm += 2 * other / (TPU_V4.hbm_gbps * 1e3)
    elif name == "cores split the larger of M and N (XLA's choice in the profiles)":
        # the megacore split dimension of 99 of the 100 profiled shapes (tpu_matmul_profiles.csv); the N split streams
        # every row on half the N tiles (rounded up) per core and reads all of A on both, the M split all of B
        if n > m:
            n_tiles_per_core = math.ceil(math.ceil(n / TPU_V4.mxu_cols) / TPU_V4.cores)
            mxu = (math.ceil(k / TPU_V4.mxu_rows) * n_tiles_per_core / TPU_V4.mxus_per_core
                   * math.ceil(m / TPU_V4.sublanes) * TPU_V4.sublanes / per_us)
        hbm += 2 * (m * k if n > m else k * n) / (TPU_V4.hbm_gbps * 1e3)
    elif name == "cores split N when it is two MXU tiles wide":
        # one 128-wide N tile per core: the same MXU stream as the M split, but each core reads all of A
        if math.ceil(n / TPU_V4.mxu_cols) == TPU_V4.cores:
            hbm += 2 * m * k / (TPU_V4.hbm_gbps * 1e3)
    elif name == "f16->bf16 pass over A and B on the VPU, HBM at peak":
        fill += hbm  # HBM at its nominal bandwidth, not calibrated
        hbm = (m * k + k * n) / (TPU_V4.cores * VPU_ELEMS_PER_CYCLE * per_us)
    return fill, (const, mxu, hbm)


def fit_variant(rows: Sequence[Row], name: str) -> Predictor:
    """Least squares on the relative error of the three-parameter variant ``name``."""
    import numpy as np

    feats = [variant_features(r[1], name) for r in rows]
    y = np.array([r[2] for r in rows])
    x = np.array([f[1] for f in feats])
    w = 1.0 / y
    coef, *_ = np.linalg.lstsq(x * w[:, None], (y - np.array([f[0] for f in feats])) * w, rcond=None)

    def pred(s: Shape) -> float:
        fill, f = variant_features(s, name)
        return float(fill + np.dot(coef, f))
    return pred


def generation_rows(rows: Sequence[Row]) -> list[list[object]]:
    """Each generation's peaks against the best FLOP rate the measurements reach."""
    best = max(rows, key=lambda r: r[1][0] * r[1][1] * r[1][2] / r[2])
    tflops = 2 * best[1][0] * best[1][1] * best[1][2] / best[2] / 1e6
    out = []
    for label, chip in GENERATIONS.items():
        ratio = tflops / chip.peak_tflops
        out.append([label, f"{chip.mxus}x {chip.mxu_rows}x{chip.mxu_cols}", round(chip.peak_tflops, 1),
                    round(chip.hbm_gbps), round(ratio, 2), "no (above peak)" if ratio > 1 else "yes"])
    out.append([f"best measured: {best[0]}", "", round(tflops, 1), "", "", ""])
    return out


def plot(path: Path, rows: Sequence[Row], pred: Sequence[float], label: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5.5))
    meas = [r[2] for r in rows]
    sc = ax.scatter(meas, pred, c=[size_class(r[1]) for r in rows], s=10, cmap="viridis", norm=matplotlib.colors.LogNorm())
    lo, hi = min(meas + list(pred)) * 0.9, max(meas + list(pred)) * 1.1
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="measured = predicted")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (µs)", ylabel="predicted (µs)",
           title=f"TPU v4 matmul, npukit.sim.tpu\n{label}")
    fig.colorbar(sc, ax=ax, label="size class: max(M, N, K)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    try:
        return write_figure(path, fig, dpi=120)
    finally:
        plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", metavar="CSV", help="a measurement CSV with the shipped files' columns to predict "
                    "(default: the shipped shapes, left out one size class at a time)")
    ap.add_argument("--out", required=True, help="folder for tpu_predictions.csv and the plot (new or empty)")
    args = ap.parse_args(argv)
    try:
        return run(args.measured, args.out)
    except NpukitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
