"""Build npu_top (or another top) with Icarus through cocotb's runner and run the cocotb testbenches.

One build folder per parameter set: ``build_root / cfg.tag()``. Simulator output goes to
``build.log`` / ``sim.log`` in that folder; results come back as JSON written by the testbench.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npukit.sim.errors import ConfigError, NpukitError

from ._config import MAX_QUANT_SAMPLES, RtlConfig, source_paths

#: Most psum_quantizer instances in one quantizer check build.
MAX_LANES = 1024


class RtlSimError(NpukitError):
    """Icarus could not build or run a testbench (tool missing, compile error, crash)."""


@dataclass
class GemmCase:
    """One GEMM for the testbench: A (M x K), B (K x N) signed ints, quant (multiplier, shift) or None."""

    name: str
    a: np.ndarray
    b: np.ndarray
    quant: tuple[int, int] | None = None
    seed: int = 0

    def to_json(self) -> dict:
        return {"name": self.name, "a": self.a.tolist(), "b": self.b.tolist(),
                "quant": list(self.quant) if self.quant is not None else None, "seed": self.seed}


@dataclass
class SuiteResult:
    """Results of one build: per-case dicts (see _tb_npu) plus build and simulation wall time (s)."""

    config: RtlConfig
    cases: list[dict] = field(default_factory=list)
    build_s: float = 0.0
    sim_s: float = 0.0
    log: Path | None = None

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c["passed"] for c in self.cases)


def check_tools() -> None:
    """Raise RtlSimError when Icarus (iverilog/vvp) is not installed."""
    for tool in ("iverilog", "vvp"):
        if shutil.which(tool) is None:
            raise RtlSimError(f"{tool} not found; install Icarus Verilog 11 (Debian: apt-get install iverilog)")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def build(top: str, sources: list[Path], parameters: dict[str, int], build_dir: Path):
    """Compile ``top`` with Icarus (Verilog-2005, timescale 1ns/1ps) into ``build_dir`` (skipped when
    the sources and parameters are unchanged); returns (the cocotb runner, wall s)."""
    from cocotb_tools.runner import get_runner

    check_tools()
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or exc
        raise ConfigError(f"cannot create build folder '{build_dir}' ({why}); pass a writable --build-dir") from None
    stamp = build_dir / "params.json"
    want = json.dumps({"top": top, "parameters": parameters, "sources": [str(s) for s in sources]}, sort_keys=True)
    always = not stamp.is_file() or stamp.read_text() != want
    log = build_dir / "build.log"
    runner = get_runner("icarus")
    # the runner warns "Skipping compilation" on stderr when the build is current: not news here
    logging.getLogger(type(runner).__qualname__).setLevel(logging.ERROR)
    t0 = time.perf_counter()
    try:
        runner.build(
            sources=sources, hdl_toplevel=top, parameters=parameters, build_dir=build_dir, build_args=["-g2005"],
            timescale=("1ns", "1ps"), always=always, log_file=log,
        )
    except (SystemExit, Exception) as exc:  # the runner raises SystemExit / CalledProcessError
        raise RtlSimError(f"Icarus build of {top} failed ({exc}); see {log}:\n{_tail(log)}") from None
    stamp.write_text(want)
    return runner, time.perf_counter() - t0


def run_testbench(runner, top: str, module: str, build_dir: Path, job: dict) -> tuple[dict, float]:
    """Run cocotb test module ``module`` on ``runner``'s build in ``build_dir`` with ``job``; returns (results, wall s)."""
    job_path = build_dir / "job.json"
    result_path = build_dir / "result.json"
    job = dict(job, result_path=str(result_path))
    job_path.write_text(json.dumps(job))
    if result_path.exists():
        result_path.unlink()
    log = build_dir / "sim.log"
    t0 = time.perf_counter()
    failure = None
    try:
        runner.test(
            test_module=module, hdl_toplevel=top, build_dir=build_dir, test_dir=build_dir,
            # pytest-rewriting every imported module (numpy, numba, ...) costs seconds: only ours
            extra_env={"NPUKIT_RTL_JOB": str(job_path.resolve()), "COCOTB_REWRITE_ASSERTION_FILES": "_tb_*.py"},
            log_file=log,
            results_xml=str((build_dir / "results.xml").resolve()),
        )
    except (SystemExit, Exception) as exc:  # also raised when a cocotb test fails: its results still count
        failure = exc
    wall = time.perf_counter() - t0
    if not result_path.is_file():
        why = f" ({failure})" if failure is not None else ""
        raise RtlSimError(f"the {module} testbench on {top} wrote no results{why}; see {log}:\n{_tail(log)}")
    return json.loads(result_path.read_text()), wall


def run_gemm_suite(cfg: RtlConfig, cases: list[GemmCase], build_root: str | os.PathLike,
                   sources: list[Path] | None = None) -> SuiteResult:
    """Build npu_top for ``cfg`` (cached per parameter set) and run ``cases`` through it.

    ``sources`` replaces the shipped Verilog files (same module names), e.g. a modified copy."""
    if not cases:
        raise ConfigError("no GEMM cases to run; pass at least one")
    for c in cases:
        m, k = c.a.shape
        if c.b.shape[0] != k:
            raise ConfigError(f"case {c.name}: A is {m}x{k} but B is {c.b.shape[0]}x{c.b.shape[1]}; inner dims must match")
        cfg.check_gemm(m, c.b.shape[1], k)
    build_dir = Path(build_root).resolve() / (cfg.tag() if sources is None else f"{cfg.tag()}_custom")
    runner, build_s = build("npu_top", list(sources) if sources else source_paths(), cfg.parameters(), build_dir)
    job = {"config": cfg.to_dict(), "cases": [c.to_json() for c in cases]}
    res, sim_s = run_testbench(runner, "npu_top", "npukit.rtl._tb_npu", build_dir, job)
    return SuiteResult(config=cfg, cases=res["cases"], build_s=build_s, sim_s=sim_s, log=build_dir / "sim.log")


@dataclass
class QuantResult:
    """Result of the quantizer check: counts (inputs, ties, saturated, mismatches) and wall times (s)."""

    result: dict
    build_s: float
    sim_s: float
    log: Path

    @property
    def passed(self) -> bool:
        return bool(self.result.get("passed"))


def run_quant_suite(in_bits: int, out_bits: int, n: int, seed: int, build_root: str | os.PathLike,
                    mult_bits: int = 16, lanes: int = 256) -> QuantResult:
    """Check psum_quantizer (``lanes`` instances in parallel) on ``n`` seeded inputs against npukit.sim.quant."""
    for name, v, lo, hi in (("in_bits", in_bits, 2, 62), ("out_bits", out_bits, 2, 62), ("mult_bits", mult_bits, 2, 16)):
        if not lo <= v <= hi:
            raise ConfigError(f"quantizer {name} must be in [{lo}, {hi}] (got {v})")
    if not 1 <= n <= MAX_QUANT_SAMPLES or not 1 <= lanes <= MAX_LANES:
        raise ConfigError(f"the quantizer check needs 1..{MAX_QUANT_SAMPLES:,} inputs and 1..{MAX_LANES} lanes "
                          f"(got n={n:,}, lanes={lanes:,})")
    params = {"LANES": lanes, "IN_W": in_bits, "MULT_W": mult_bits, "OUT_W": out_bits, "SHIFT_W": 6}
    build_dir = Path(build_root).resolve() / f"quant_i{in_bits}o{out_bits}m{mult_bits}l{lanes}"
    sources = source_paths(("psum_quantizer.v", "quantizer_lanes.v"))
    runner, build_s = build("quantizer_lanes", sources, params, build_dir)
    job = {"in_bits": in_bits, "out_bits": out_bits, "mult_bits": mult_bits, "lanes": lanes, "n": n, "seed": seed}
    res, sim_s = run_testbench(runner, "quantizer_lanes", "npukit.rtl._tb_quant", build_dir, job)
    return QuantResult(result=res, build_s=build_s, sim_s=sim_s, log=build_dir / "sim.log")
