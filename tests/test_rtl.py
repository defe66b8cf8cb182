"""The Verilog systolic array (rtl/*.v) against the cycle-level model, through cocotb on Icarus.

Each parameter set is one Icarus build (one folder under a session temp dir). The cases are
seeded: the seed is random per session unless ``NPUKIT_RTL_SEED`` is set; tests/conftest.py draws it once and
prints it at the end of the session (and in the header without -q). The cocotb testbenches are
npukit.rtl._tb_npu / _tb_quant (package modules, so ``npukit rtl test`` runs the same suite); the
RTL-cycle <-> contract-cycle mapping is documented in _tb_npu.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from npukit.cli import main
from npukit.rtl._cases import CASE_NAMES, FOLD_CASES, MIN_TIES, fold_dims, quant_stats, standard_cases, suite_dims
from npukit.rtl._config import DESIGN_FILES, RtlConfig, source_paths
from npukit.rtl._runner import GemmCase, run_gemm_suite, run_quant_suite
from npukit.sim import Arch, Layer, map_layer
from npukit.sim.cycle import run_gemm
from npukit.sim.errors import ConfigError

pytestmark = [
    pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) is not installed"),
    pytest.mark.rtl,
    pytest.mark.slow,
]

SEED = int(os.environ["NPUKIT_RTL_SEED"])  # drawn once per session in conftest.py unless set


@pytest.fixture(scope="session")
def build_root(tmp_path_factory):
    return tmp_path_factory.mktemp("sim_build")


def _cfg(rows, cols, dataflow, overflow, p, b=None, dims=None, timing="scalesim"):
    probe = RtlConfig(rows=rows, cols=cols, dataflow=dataflow, overflow=overflow, pe_psum_bits=p, psum_buffer_bits=b)
    m, n, k = dims or suite_dims(probe)
    return RtlConfig(rows=rows, cols=cols, dataflow=dataflow, overflow=overflow, pe_psum_bits=p, psum_buffer_bits=b,
                     max_m=m, max_n=n, max_k=k, timing=timing)


# (rows, cols, dataflow, overflow, P, B): 4x4 covers both overflow modes at a small P (products of
# two int8 overflow 12 bits) and a narrow accumulator; then 8x8, 16x8 and 32x32 in ws and os.
CONFIGS = [
    (4, 4, "ws", "saturate", 32, None),
    (4, 4, "ws", "saturate", 12, None),
    (4, 4, "ws", "wrap", 12, None),
    (4, 4, "ws", "wrap", 16, 10),
    (4, 4, "os", "saturate", 12, None),
    (4, 4, "os", "wrap", 12, 8),
    (8, 8, "ws", "saturate", 16, None),
    (8, 8, "os", "wrap", 32, None),
    (8, 8, "is", "wrap", 14, None),
    (16, 8, "ws", "wrap", 32, 20),
    (16, 8, "os", "saturate", 16, None),
    (32, 32, "ws", "saturate", 32, None),
    (32, 32, "os", "wrap", 20, None),
]


# double-buffered timing (ws and is): 3x1 reads a fold's last activation in the next fold (T = R + M - 1)
DB_CONFIGS = [
    (4, 4, "ws", "saturate", 16, None),
    (3, 1, "ws", "wrap", 12, None),
    (5, 2, "ws", "saturate", 32, 20),
    (8, 8, "is", "wrap", 14, None),
]


@pytest.mark.parametrize("rows,cols,dataflow,overflow,p,b", CONFIGS, ids=lambda v: str(v))
def test_gemm_bit_and_cycle_exact(build_root, rows, cols, dataflow, overflow, p, b):
    _check_suite(build_root, rows, cols, dataflow, overflow, p, b, "scalesim")


@pytest.mark.parametrize("rows,cols,dataflow,overflow,p,b", DB_CONFIGS, ids=lambda v: str(v))
def test_gemm_double_buffered_bit_and_cycle_exact(build_root, rows, cols, dataflow, overflow, p, b):
    _check_suite(build_root, rows, cols, dataflow, overflow, p, b, "double-buffered")
    # the contract's double-buffered count is shorter than scalesim's whenever there are several folds
    probe = RtlConfig(rows=rows, cols=cols, dataflow=dataflow)
    m, n, k = suite_dims(probe)
    x = np.zeros((m, k), int), np.zeros((k, n), int)
    assert run_gemm(*x, rows, cols, dataflow=dataflow, timing="double-buffered").cycles < run_gemm(
        *x, rows, cols, dataflow=dataflow).cycles


def _analytical_cycles(m, n, k, rows, cols, dataflow, timing):
    """``npukit sim``'s compute cycles of one GEMM under SCALE-Sim's (fixed) mapping, the RTL's fold order."""
    arch = Arch(rows=rows, cols=cols, dataflow=dataflow, timing=timing, mapping="fixed")
    return map_layer(Layer("g", m, n, k), arch).compute_cycles


def _check_suite(build_root, rows, cols, dataflow, overflow, p, b, timing):
    cfg = _cfg(rows, cols, dataflow, overflow, p, b, timing=timing)
    cases = standard_cases(cfg, SEED)
    print(f"seed {SEED}: {cfg.tag()}")
    res = run_gemm_suite(cfg, cases, build_root)
    assert [c["name"] for c in res.cases] == list(CASE_NAMES)
    by_name = {x.name: x for x in cases}
    for c in res.cases:
        x = by_name[c["name"]]
        ref = run_gemm(x.a, x.b, rows, cols, dataflow=dataflow, pe_psum_bits=p, overflow=overflow, psum_buffer_bits=b,
                       quant=x.quant, timing=timing)
        assert c["passed"], f"seed {SEED}, {cfg.tag()}: {c['first_mismatch']} ({c['mismatches']} problems)"
        assert c["outputs"] == ref.out.size and c["rtl_cycles"] == ref.cycles == c["model_cycles"]
        # one cycle count everywhere: the RTL's, the cycle model's and the analytical simulator's
        assert c["rtl_cycles"] == _analytical_cycles(x.a.shape[0], x.b.shape[1], x.a.shape[1], rows, cols, dataflow,
                                                     timing)
    if p <= 16:  # the edge cases really overflow P bits: exact sums leave the P-bit range
        for name in ("edges", "extremes"):
            case = by_name[name]
            exact = case.a.astype(np.int64) @ case.b.astype(np.int64)
            assert np.abs(exact).max() >= 1 << (p - 1), f"{name} does not overflow {p} bits"
    # the fold cases fill every fold: N % C == 0 and the spatial-row dim (ws/is K, os M) % R == 0
    for name, rf, cf in FOLD_CASES:
        case = by_name[name]
        assert (case.a.shape[0], case.b.shape[1], case.a.shape[1]) == fold_dims(cfg, rf, cf)
        hm, hn, hk = cfg.hw_dims(case.a.shape[0], case.b.shape[1], case.a.shape[1])
        assert hn == cf * cols and (hm if dataflow == "os" else hk) == rf * rows
    # quantized cases span the B-bit range (scale from the data); many_folds has ties of both parities
    qmax = (1 << (cfg.psum_buffer_width - 1)) - 1
    for name in ("quant", "many_folds"):
        st = quant_stats(cfg, by_name[name])
        assert st["distinct"] >= st["psums"] // 4 and st["max_abs"] >= qmax // 32, st
        assert st["saturated"] <= st["psums"] // 8, st
    st = quant_stats(cfg, by_name["many_folds"])
    assert st["ties_even"] >= MIN_TIES and st["ties_odd"] >= MIN_TIES, st


@pytest.mark.parametrize("rows,cols,dataflow,overflow,p,timing", [(4, 4, "ws", "saturate", 16, "scalesim"),
                                                                  (4, 4, "os", "wrap", 12, "scalesim"),
                                                                  (4, 3, "is", "wrap", 16, "double-buffered")])
def test_gemm_with_random_output_stalls(build_root, tmp_path, rows, cols, dataflow, overflow, p, timing):
    # out_ready low in ~30% of the periods: outputs bit-exact, cycles = model's once the stalls are taken out
    cfg = _cfg(rows, cols, dataflow, overflow, p, timing=timing)
    cases = standard_cases(cfg, SEED)
    res = run_gemm_suite(cfg, cases, build_root, stall_prob=0.3)
    for c in res.cases:
        assert c["passed"], f"seed {SEED}, {cfg.tag()}, stalls: {c['first_mismatch']}"
        assert c["rtl_cycles"] == c["model_cycles"], c
        # the operand streams were offered junk while busy (not taken)
        assert c["junk_offered"] > 0, c
    # a short case (a single fold: a few output periods, a few words per stream) may draw no stall at p = 0.3
    # and no input gap at the default gap probability; each case draws its own, so most cases draw some (5 or 6
    # of 6 on each of 50 seeds x these 3 configs; when every case of a seed drew the same stalls, seed 107 had 1)
    assert sum(c["stalls"] > 0 for c in res.cases) >= len(res.cases) // 2, [c["stalls"] for c in res.cases]
    assert sum(c["input_gaps"] > 0 for c in res.cases) >= len(res.cases) // 2, [c["input_gaps"] for c in res.cases]
    # back-to-back input words (no gaps, no junk): the same cycles
    tight = run_gemm_suite(cfg, cases[:2], build_root, stall_prob=0.3, gap_prob=0.0)
    assert tight.passed and [c["input_gaps"] + c["junk_offered"] for c in tight.cases] == [0, 0]
    assert [c["rtl_cycles"] for c in tight.cases] == [c["rtl_cycles"] for c in res.cases[:2]]
    # an accumulator that ignores the stall loses the held outputs: the run must fail. At stall probability 0.3
    # the one short case drew no stall where it matters for 8 of 300 seeds (seed 58 among them); at 0.6 those
    # 8 seeds and 61 others all fail
    srcs = _mutated(tmp_path, "accumulator.v", "else if (en) out_vld <= emit;", "else out_vld <= emit;")
    bad = run_gemm_suite(cfg, cases[:1], build_root, sources=srcs, stall_prob=0.6)
    assert not bad.passed and "at cycle" in bad.cases[0]["first_mismatch"]


def test_quantizer_100k_random_inputs(build_root):
    res = run_quant_suite(32, 8, 100_000, SEED, build_root, lanes=32)
    r = res.result
    print(f"seed {SEED}: {r}")
    assert r["n"] == 100_000 and r["steps"] >= 100_000 // 32
    assert r["ties"] >= 10_000 and r["saturated"] >= 10_000, r  # ties and saturation are exercised
    assert res.passed, f"seed {SEED}: {r['first_mismatch']} ({r['mismatches']} mismatches)"


def test_quantizer_narrow_psum_wide_output(build_root):
    res = run_quant_suite(20, 12, 20_000, SEED + 1, build_root, lanes=32)
    assert res.passed, f"seed {SEED + 1}: {res.result['first_mismatch']}"
    assert res.result["ties"] > 1000 and res.result["saturated"] > 1000


def test_quantizer_widest_psums(build_root):
    # products of up to 62 + 16 bits; every shift the bench draws stays in 0..63
    for in_bits, out_bits in ((49, 8), (62, 62)):
        res = run_quant_suite(in_bits, out_bits, 2000, SEED + 2, build_root, lanes=32)
        assert res.passed, f"seed {SEED + 2}, P={in_bits}: {res.result['first_mismatch']}"
        assert res.result["ties"] > 200 and res.result["saturated"] > 100, res.result


def _mutated(tmp_path, file, old, new):
    srcs = source_paths()
    out = []
    for s in srcs:
        d = tmp_path / s.name
        text = s.read_text()
        if s.name == file:
            assert old in text
            text = text.replace(old, new)
        d.write_text(text)
        out.append(d)
    return out


def test_wrong_rtl_values_fail_with_first_mismatch_cycle_and_seed(build_root, tmp_path):
    # the accumulator subtracts later K-folds' psums instead of adding them
    srcs = _mutated(tmp_path, "accumulator.v", "assign sum = old_x + in_x;", "assign sum = old_x - in_x;")
    cfg = _cfg(4, 4, "ws", "saturate", 32)
    res = run_gemm_suite(cfg, standard_cases(cfg, SEED)[:1], build_root, sources=srcs)
    c = res.cases[0]
    assert not c["passed"] and not res.passed
    assert re.search(rf"\[random, seed {SEED}\] output \(\d+, \d+\): RTL -?\d+ at cycle \d+, model -?\d+ at cycle \d+",
                     c["first_mismatch"]), c["first_mismatch"]


def test_wrong_rtl_timing_fails_on_cycles(build_root, tmp_path):
    # one extra cycle per fold: values still right, every later fold late
    srcs = _mutated(tmp_path, "npu_top.v", "wire fold_end = run_q && (lt == t_len - 1'b1);",
                    "wire fold_end = run_q && (lt == t_len);")
    cfg = _cfg(4, 4, "ws", "wrap", 32)
    res = run_gemm_suite(cfg, standard_cases(cfg, SEED)[:1], build_root, sources=srcs)
    c = res.cases[0]
    assert not c["passed"]
    assert "at cycle" in c["first_mismatch"] and f"seed {SEED}" in c["first_mismatch"]
    assert c["rtl_cycles"] != c["model_cycles"]


def test_tiny_and_single_fold_gemms(build_root):
    cfg = RtlConfig(rows=4, cols=4, dataflow="ws", max_m=3, max_n=5, max_k=5)
    rng = np.random.default_rng(SEED)
    cases = [GemmCase("1x1x1", np.array([[-128]]), np.array([[-128]]), None, SEED),
             GemmCase("3x5x5", rng.integers(-128, 128, (3, 5)), rng.integers(-128, 128, (5, 5)), (3, 1), SEED)]
    res = run_gemm_suite(cfg, cases, build_root)
    assert res.passed, [c["first_mismatch"] for c in res.cases]
    assert res.cases[0]["rtl_cycles"] == run_gemm(cases[0].a, cases[0].b, 4, 4).cycles


@pytest.mark.parametrize("rows,cols,dataflow,timing,dims,fold", [(3, 1, "ws", "double-buffered", (2, 2, 9), 4),
                                                                (3, 2, "ws", "double-buffered", (1, 4, 9), 4),
                                                                (3, 1, "ws", "double-buffered", (1, 2, 9), 3),
                                                                (3, 1, "ws", "double-buffered", (1, 3, 6), 3),
                                                                (1, 1, "ws", "double-buffered", (1, 2, 3), 1),
                                                                (3, 1, "is", "double-buffered", (2, 1, 9), 3),
                                                                (1, 1, "os", "scalesim", (3, 2, 1), 1)])
def test_shortest_folds(build_root, rows, cols, dataflow, timing, dims, fold):
    # folds as short as the contract allows (double-buffered T = R with C = 1 and hardware M = 1,
    # else R + 1; os T = 1): the psums of one fold arrive while the next one runs (T = R: at local 0
    # of the fold after it), one period behind the controller (the SRAM read)
    m, n, k = dims
    cfg = RtlConfig(rows=rows, cols=cols, dataflow=dataflow, timing=timing, max_m=m, max_n=n, max_k=k, pe_psum_bits=16)
    rng = np.random.default_rng(SEED)
    cases = [GemmCase(f"c{i}", rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (k, n)), None, SEED + i)
             for i in range(2)]
    res = run_gemm_suite(cfg, cases, build_root, stall_prob=0.3)
    assert res.passed, f"seed {SEED}: {[c['first_mismatch'] for c in res.cases]}"
    assert cfg.fold_cycles(m, n, k) == fold
    # the RTL, the cycle model and the analytical simulator report the same compute cycles; on a 1x1
    # array they are the MACs (double-buffered ws: the one fill and drain add R + R + C - 2 = 1 cycle),
    # except scalesim os, SCALE-Sim's count: one fewer than the MACs
    want = _analytical_cycles(m, n, k, rows, cols, dataflow, timing)
    assert [c["rtl_cycles"] for c in res.cases] == [c["model_cycles"] for c in res.cases] == [want, want]
    if (rows, cols, dataflow) == (1, 1, "os"):
        assert want == m * n * k - 1
    elif (rows, cols) == (1, 1):
        assert want == m * n * k + 1


def test_bad_gemm_for_build_is_a_config_error(build_root):
    cfg = RtlConfig(rows=4, cols=4, max_m=4, max_n=4, max_k=4)
    with pytest.raises(ConfigError, match="exceeds this build"):
        run_gemm_suite(cfg, [GemmCase("big", np.zeros((5, 4), int), np.zeros((4, 4), int))], build_root)
    with pytest.raises(ConfigError, match="dataflow"):
        RtlConfig(dataflow="xs")
    with pytest.raises(ConfigError, match="rows"):
        RtlConfig(rows=0)
    with pytest.raises(ConfigError, match="double-buffered timing for ws and is only"):
        RtlConfig(dataflow="os", timing="double-buffered")


def test_verilog_2005_accepted_by_icarus():
    srcs = [str(p) for p in source_paths()]
    for df, tm in ((0, 0), (0, 1), (1, 0)):
        for ov in (0, 1):
            proc = subprocess.run(["iverilog", "-g2005", "-Wall", "-o", os.devnull, "-s", "npu_top", f"-Pnpu_top.DATAFLOW={df}",
                                   f"-Pnpu_top.OVERFLOW={ov}", f"-Pnpu_top.TIMING={tm}", *srcs], capture_output=True,
                                  text=True)
            assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    harness = source_paths(("psum_quantizer.v", "quantizer_lanes.v"))
    proc = subprocess.run(["iverilog", "-g2005", "-Wall", "-o", os.devnull, "-s", "quantizer_lanes", *map(str, harness)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    assert {p.name for p in source_paths()} == set(DESIGN_FILES)
    for p in source_paths() + harness:
        assert p.read_text().startswith("`timescale 1ns/1ps")


# ---------------------------------------------------------------------------- statistics
yosys = pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys is not installed: flip-flop cross-check skipped")


@yosys
@pytest.mark.parametrize("rows,cols,dataflow,overflow,p,timing", [(4, 4, "ws", "saturate", 32, "scalesim"),
                                                                  (3, 5, "os", "wrap", 12, "scalesim"),
                                                                  (4, 3, "ws", "wrap", 12, "double-buffered"),
                                                                  (3, 1, "ws", "wrap", 12, "double-buffered")])
def test_stats_flip_flops_match_yosys(rows, cols, dataflow, overflow, p, timing):
    from npukit.rtl._stats import module_parameters, rtl_stats, yosys_counts

    cfg = RtlConfig(rows=rows, cols=cols, dataflow=dataflow, overflow=overflow, pe_psum_bits=p, max_m=8, max_n=8, max_k=8,
                    timing=timing)
    st = rtl_stats(cfg)
    mods = {m["module"]: m for m in st["modules"]}
    assert set(mods) == {"npu_top", "sram_sp", "systolic_array", "pe", "psum_quantizer", "accumulator"}
    assert mods["pe"]["instances"] == rows * cols and mods["accumulator"]["instances"] == cols
    assert st["ff_bits"] == sum(m["ff_bits_total"] for m in mods.values())
    # the operand SRAMs are memory cells, not flip-flops: 2**A_AW + 2**B_AW words of one array row / column
    prm = cfg.parameters()
    assert mods["sram_sp"]["instances"] == 2 and mods["sram_sp"]["ff_bits_total"] == 0
    assert st["sram_bits"] == 8 * (rows * 2 ** prm["A_AW"] + cols * 2 ** prm["B_AW"])
    assert yosys_counts("npu_top", module_parameters(cfg, "npu_top")) == {"ff_bits": st["ff_bits"],
                                                                           "memory_bits": st["sram_bits"]}
    # a pe holds a, b (ws: the weight) and the psum register; os adds 3 tag + b valid + fin bits;
    # double-buffered ws a second weight bank and the activation's bank bit
    extra = 5 if dataflow == "os" else (8 + 1 if timing == "double-buffered" else 0)
    assert mods["pe"]["ff_bits"] == 2 * 8 + p + extra
    ports = {q["name"]: q for q in mods["npu_top"]["ports"]}
    assert ports["out_data"]["bits"] == cols * cfg.out_width and ports["out_data"]["direction"] == "output"
    assert mods["npu_top"]["parameters"]["ROWS"] == rows and mods["psum_quantizer"]["parameters"]["IN_W"] == p


@yosys
def test_stats_each_module_matches_yosys():
    from npukit.rtl._stats import TOPS, module_parameters, rtl_stats, yosys_ff_bits

    cfg = RtlConfig(rows=2, cols=3, pe_psum_bits=24, psum_buffer_bits=16, max_m=4, max_n=4, max_k=4)
    for top in TOPS:
        if top == "npu_top":
            continue
        assert rtl_stats(cfg, top)["ff_bits"] == yosys_ff_bits(top, module_parameters(cfg, top)), top


def test_stats_fast_scope_patch_is_exact():
    from npukit.rtl._stats import rtl_stats

    fast = rtl_stats(top="systolic_array", rows=2, cols=2, dataflow="os")
    slow = rtl_stats(RtlConfig(rows=2, cols=2, dataflow="os"), "systolic_array", fast=False)
    for d in (fast, slow):
        d.pop("analysis_s")
    assert fast == slow


# ---------------------------------------------------------------------------- CLI
def test_cli_rtl_stats_prints_table(capsys, tmp_path):
    out = tmp_path / "s.json"
    assert main(["rtl", "stats", "--rows", "2", "--cols", "3", "--top", "systolic_array", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"pe\s+6\s+48\s+288\s+16", text), text
    assert "total flip-flop bits: 288" in text and out.is_file()


def test_cli_rtl_test_passes_and_reports_cycles(capsys, tmp_path):
    rc = main(["rtl", "test", "--rows", "4", "--cols", "4", "--dataflow", "os", "--overflow", "wrap", "--pe-psum-bits", "12",
               "--seed", str(SEED), "--quant-samples", "2000", "--build-dir", str(tmp_path)])
    text = capsys.readouterr().out
    assert rc == 0, text
    ref_cycles = run_gemm(np.zeros((6, 6), int), np.zeros((6, 6), int), 4, 4, dataflow="os").cycles
    assert re.search(rf"random\s+6x6x6\s+-\s+{ref_cycles}\s+{ref_cycles}\s+36\s+0\s+PASS", text), text
    assert "quantizer" in text and "all passed" in text


def test_cli_rtl_test_exit_codes(capsys, tmp_path, monkeypatch):
    assert main(["rtl", "test", "--rows", "0", "--build-dir", str(tmp_path)]) == 2
    assert "rows must be a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["rtl", "test", "--dataflow", "xs"])
    assert exc.value.code == 2
    # a failing suite -> exit 1 and the first mismatch on stderr
    import npukit.rtl._runner as runner

    real = runner.run_gemm_suite

    def broken(cfg, cases, root, sources=None, **kw):
        srcs = _mutated(tmp_path, "accumulator.v", "assign old = in_first ? {ACC_W{1'b0}} : mem[in_addr];",
                        "assign old = mem[in_addr];")
        return real(cfg, cases, root, sources=srcs, **kw)

    monkeypatch.setattr(runner, "run_gemm_suite", broken)
    rc = main(["rtl", "test", "--rows", "4", "--cols", "4", "--seed", "5", "--quant-samples", "0",
               "--build-dir", str(tmp_path / "b")])
    cap = capsys.readouterr()
    assert rc == 1 and "FAIL" in cap.out and "seed 5" in cap.err and "at cycle" in cap.err
