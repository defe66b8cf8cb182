"""Speed of the cycle-level model: PE-cycles per second on a 128x128 array, one core.

PE-cycles = rows * cols * cycles (every PE of the array for every stepped cycle, busy or not).
Target: >= 2e8 PE-cycles/s per core for a 128x128 array. The benchmark steps one large
GEMM per dataflow (ws/os/is), checks its outputs against a matmul, projects the time to step all of
ResNet-18 (ws, npu128: compute cycles from the analytical simulator x 128*128) and, unless
``--no-resnet``, actually steps every ResNet-18 layer on random int8 data and checks that the
stepped cycles sum to the analytical model's.

Usage: ``python benchmarks/bench_cycle.py [--out out/bench] [--M 4096 --K 1024 --N 1024] [--quick]``.
Prints a table and writes ``<out>/bench_cycle.csv``. Times are wall-clock seconds and CPU seconds
of this process (the CPU figure is robust to other load on the machine).
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")  # one core (before numba is imported)

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from npukit.benchmarks._timing import WIDE_SPREAD, spread  # noqa: E402
from npukit.sim import format_table, load_arch, prepare_out_dir, resnet18, simulate, write_csv  # noqa: E402  # noqa: E402
from npukit.sim.cycle import run_gemm  # noqa: E402

TARGET = 2e8  # PE-cycles per second (the project's target)


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    res = fn()
    return res, time.perf_counter() - w0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench", help="output folder for bench_cycle.csv (default out/bench)")
    ap.add_argument("--M", type=int, default=4096)
    ap.add_argument("--K", type=int, default=1024)
    ap.add_argument("--N", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per dataflow GEMM; median reported (default 5)")
    ap.add_argument("--quick", action="store_true", help="small GEMM (M=1024, K=N=256) and no ResNet-18 run")
    ap.add_argument("--no-resnet", action="store_true", help="skip stepping all ResNet-18 layers")
    args = ap.parse_args(argv)
    if args.quick:
        args.M, args.K, args.N, args.no_resnet = 1024, 256, 256, True
    out_dir = prepare_out_dir(args.out)
    R, C = args.rows, args.cols
    rng = np.random.default_rng(0)
    A = rng.integers(-128, 128, (args.M, args.K), dtype=np.int64)
    B = rng.integers(-128, 128, (args.K, args.N), dtype=np.int64)
    exact = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.int64)  # exact: |sums| < 2**53

    # compile (or load the numba cache) outside the timed region
    for df in ("ws", "os", "is"):
        run_gemm(A[:4, :4].copy(), B[:4, :4].copy(), 2, 2, df)

    rows: list[dict] = []
    rate: dict[str, float] = {}
    for df in ("ws", "os", "is"):
        samples = [_timed(lambda df=df: run_gemm(A, B, R, C, df)) for _ in range(args.repeats)]
        res = samples[0][0]
        walls, cpus = spread([x[1] for x in samples]), spread([x[2] for x in samples])
        wall, cpu = walls.median, cpus.median
        ok = bool(np.array_equal(res.out, exact))
        rate[df] = res.pe_cycles / cpu
        rows.append(
            {
                "case": f"gemm {args.M}x{args.K}x{args.N}",
                "dataflow": df,
                "rows": R,
                "cols": C,
                "compute_cycles": res.cycles,  # the cycle-level model has no memory stalls
                "pe_cycles": res.pe_cycles,
                "wall_s": round(wall, 4),
                "cpu_s": round(cpu, 4),
                "pe_cycles_per_s_wall": round(res.pe_cycles / wall),
                "pe_cycles_per_s_cpu": round(res.pe_cycles / cpu),
                "outputs_exact": ok,
                "meets_2e8": res.pe_cycles / cpu >= TARGET,
                "n": cpus.n,
                "cpu_min_s": round(cpus.min, 4),
                "cpu_max_s": round(cpus.max, 4),
                "spread": round(max(cpus.ratio, walls.ratio), 2),
                "spread_flag": "WIDE" if cpus.wide or walls.wide else "",
            }
        )

    arch = load_arch("npu128")
    net = resnet18()
    sim = simulate(net, arch)
    pe_cycles = sim.compute_cycles * arch.rows * arch.cols
    rows.append(
        {
            "case": "resnet18 projected",
            "dataflow": "ws",
            "rows": arch.rows,
            "cols": arch.cols,
            "compute_cycles": sim.compute_cycles,
            "pe_cycles": pe_cycles,
            "wall_s": round(pe_cycles / rate["ws"], 3) if R == arch.rows and C == arch.cols else "",
            "cpu_s": round(pe_cycles / rate["ws"], 3) if R == arch.rows and C == arch.cols else "",
            "pe_cycles_per_s_wall": "",
            "pe_cycles_per_s_cpu": round(rate["ws"]),
            "outputs_exact": "",
            "meets_2e8": "",
        }
    )
    if not args.no_resnet:
        cycles, ok, wall, cpu = 0, True, 0.0, 0.0
        for layer in net.layers:  # only the run_gemm calls are timed
            a = rng.integers(-128, 128, (layer.M, layer.K), dtype=np.int64)
            b = rng.integers(-128, 128, (layer.K, layer.N), dtype=np.int64)
            r, w, c = _timed(lambda a=a, b=b: run_gemm(a, b, arch.rows, arch.cols, "ws"))
            cycles += r.cycles * layer.batch
            wall += w * layer.batch
            cpu += c * layer.batch
            ok &= bool(np.array_equal(r.out, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)))
        rows.append(
            {
                "case": "resnet18 stepped",
                "dataflow": "ws",
                "rows": arch.rows,
                "cols": arch.cols,
                "compute_cycles": cycles,
                "pe_cycles": cycles * arch.rows * arch.cols,
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "pe_cycles_per_s_wall": round(cycles * arch.rows * arch.cols / wall),
                "pe_cycles_per_s_cpu": round(cycles * arch.rows * arch.cols / cpu),
                "outputs_exact": ok and cycles == sim.compute_cycles,
                "meets_2e8": cycles * arch.rows * arch.cols / cpu >= TARGET,
            }
        )

    headers = list(dict.fromkeys(k for r in rows for k in r))
    shown = [[("yes" if v else "NO") if isinstance(v, bool) else v for v in (r.get(h, "") for h in headers)] for r in rows]
    print(format_table(headers, shown))
    for r in rows:
        if r.get("spread_flag"):
            print(f"warning: {r['case']} {r['dataflow']}: spread max/min {r['spread']}x over {r['n']} repeats "
                  f"(> {WIDE_SPREAD:g}x, wall or CPU time): too noisy to read; rerun on an idle machine")
    path = write_csv(out_dir / "bench_cycle.csv", rows, headers)
    print(f"wrote {path}")
    return 0 if all(r["outputs_exact"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
