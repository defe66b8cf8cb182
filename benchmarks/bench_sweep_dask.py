"""Sweep throughput: the local process pool against a 2-worker Dask LocalCluster, 10,000 points.

The grid (10 rows x 10 cols x 4 psum widths x 5 psum buffer sizes x 5 one-layer GEMMs = 10,000
points) is swept into a fresh SQLite file by: the in-process backend (workers=1, reference), the
local process pool (2 processes) and a Dask LocalCluster of 2 worker processes with 1 thread each.
Pool and cluster are started once, before the timed runs (their start times are reported
separately), and reused, as a sweep on an existing cluster does. The runs are interleaved (serial,
pool, dask, serial, ...) and the median of ``--repeat`` runs is reported, since the machine may be shared.

``time_vs_pool`` is the median over repetitions of (this run's time / the local pool's run in the
same repetition). Scheduler overhead per point is given two ways: (a) the extra wall time of the
Dask run over the local pool run of the same repetition (median), divided by the points; (b) the
round trip of an empty task (submit, schedule, run, return to the client), measured on
``--noop-tasks`` no-op tasks, divided by the points per task the sweep uses (the sweep sends chunks
of about total layers / (8 x workers) layers, see npukit.sweeps).

    python benchmarks/bench_sweep_dask.py [--out out/bench] [--repeat 3] [--noop-tasks 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from npukit.benchmarks._timing import spread, wide_warnings
from npukit.sim import format_table, prepare_out_dir, write_csv
from npukit.sweeps import LocalPoolExecutor, SerialExecutor, expand_points, parse_sweep_spec, run_points

SPEC = {
    "sweep": {"name": "bench-dask", "arch": "npu128",
              "workloads": ["gemm:M=256,N=256,K=256", "gemm:M=512,N=1024,K=256", "gemm:M=1024,N=512,K=512",
                            "gemm:M=128,N=4096,K=1024", "gemm:M=2048,N=2048,K=128"]},
    "grid": {
        "rows": [8, 16, 24, 32, 48, 64, 96, 128, 192, 256],
        "cols": [8, 16, 24, 32, 48, 64, 96, 128, 192, 256],
        "bits.psum_buffer": [8, 16, 24, 32],
        "sram_kib.psum": [256, 512, 1024, 2048, 4096],
    },
}


def _noop(item: int) -> int:
    return item


def _noop_rate(ex, n: int) -> float:  # noqa: ANN001 - any Executor
    """Seconds per task for ``n`` empty tasks through ``ex`` (its in-flight window as in a sweep)."""
    list(ex.map_unordered(_noop, range(min(n, 20))))  # warm: workers have imported the function's module
    t0 = time.perf_counter()
    got = sum(1 for _ in ex.map_unordered(_noop, range(n)))
    assert got == n
    return (time.perf_counter() - t0) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out/bench", help="folder for bench_sweep_dask.csv (default out/bench)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved runs per backend; medians reported (default 3)")
    ap.add_argument("--noop-tasks", type=int, default=400, help="empty tasks for the per-task overhead (default 400)")
    args = ap.parse_args(argv)
    from npukit.sweeps._dask import DaskExecutor

    out = prepare_out_dir(args.out)
    points = expand_points(parse_sweep_spec(SPEC, origin="bench"))
    n = len(points)
    layers = sum(p.layers for p in points)
    t0 = time.perf_counter()
    pool = LocalPoolExecutor(2)
    list(pool.map_unordered(_noop, range(2)))  # started now, by fork while this process has one thread
    pool_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    dask_ex = DaskExecutor(local_workers=2)
    cluster_start = time.perf_counter() - t0
    backends = {"serial (workers=1)": SerialExecutor(), "local pool (workers=2)": pool, "dask LocalCluster (2 workers)": dask_ex}
    times: dict[str, list[float]] = {"serial (workers=1)": [], "local pool (workers=2)": [], "dask LocalCluster (2 workers)": []}
    try:
        for _ in range(max(1, args.repeat)):
            for case in times:
                with tempfile.TemporaryDirectory() as tmp:
                    db = Path(tmp) / "bench.sqlite"
                    s = run_points(points, db, executor=backends[case])
                    assert s.computed == n, s.line()
                times[case].append(s.seconds)
        noop_local = _noop_rate(pool, args.noop_tasks)
        noop_dask = _noop_rate(dask_ex, args.noop_tasks)
    finally:
        dask_ex.close()
        pool.close()

    target = min(2000, max(20, -(-layers // (8 * 2))))  # layers per chunk with 2 workers (npukit.sweeps._chunks)
    per_chunk = max(1, round(target / (layers / n)))
    med = {k: statistics.median(v) for k, v in times.items()}
    rows = []
    for case, ts in times.items():
        sp = spread(ts)
        rows.append({
            "case": case, "points": n, "seconds_median": round(med[case], 3), "seconds_min": round(sp.min, 3),
            "seconds_max": round(sp.max, 3), "spread": round(sp.ratio, 2), "spread_flag": "WIDE" if sp.wide else "",
            "seconds_all": " ".join(f"{t:.3f}" for t in ts), "points_per_s": round(n / med[case], 1),
            "time_vs_pool": round(statistics.median(t / p for t, p in zip(ts, times["local pool (workers=2)"], strict=True)), 3),
        })
    extra = statistics.median(d - p for d, p in zip(times["dask LocalCluster (2 workers)"], times["local pool (workers=2)"],
                                                     strict=True)) / n
    print(f"sweep benchmark: {n:,} points ({layers:,} layer-points), 2 workers, {per_chunk} points per task; "
          f"medians of {args.repeat} interleaved runs (shared machine: ratios matter more than absolutes)")
    print(format_table(list(rows[0]), [list(r.values()) for r in rows]))
    for ln in wide_warnings([dict(r, n=len(times[r["case"]])) for r in rows], lambda r: r["case"]):
        print(ln)
    over = [
        {"measure": "Dask LocalCluster start (2 worker processes)", "value": round(cluster_start, 3), "unit": "s"},
        {"measure": "local pool start (2 processes, fork)", "value": round(pool_start, 3), "unit": "s"},
        {"measure": "(a) Dask wall minus local-pool wall (median of pairs), per point", "value": round(extra * 1e6, 2),
         "unit": "us/point"},
        {"measure": "(b) empty-task round trip, Dask", "value": round(noop_dask * 1e3, 3), "unit": "ms/task"},
        {"measure": "(b) empty-task round trip, local pool", "value": round(noop_local * 1e3, 3), "unit": "ms/task"},
        {"measure": f"(b) Dask task overhead per point at {per_chunk} points/task",
         "value": round(noop_dask / per_chunk * 1e6, 3), "unit": "us/point"},
        {"measure": "(b) Dask task overhead per point at 1 point/task", "value": round(noop_dask * 1e6, 1), "unit": "us/point"},
    ]
    print(format_table(list(over[0]), [list(r.values()) for r in over]))
    csv_rows = [dict(r, measure="", value="", unit="") for r in rows]
    csv_rows += [dict(case="overhead", points=n, seconds_median="", seconds_min="", seconds_max="", spread="",
                      spread_flag="", seconds_all="", points_per_s="", time_vs_pool="", **o)
                 for o in over]
    path = write_csv(out / "bench_sweep_dask.csv", csv_rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
