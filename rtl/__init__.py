"""npukit.rtl: Verilog-2005 sources of the systolic array and its psum path (shipped as package data), and
their tools: the design configuration (:class:`RtlConfig`, its size limits), design statistics (flip-flop
bits from pyverilog and yosys), lint (Verilator -Wall, yosys check) and the cocotb test suite against the
cycle-level model on Icarus or Verilator.

Names are loaded on first use (PEP 562), so importing the package imports neither cocotb nor pyverilog.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "RtlConfig": "_config", "MAX_BUFFER_WORDS": "_config", "MAX_GEMM_DIM": "_config", "MAX_PES": "_config",
    "MAX_QUANT_SAMPLES": "_config", "DEFAULT_ARRAY": "_config", "user_sources": "_config",
    "declared_modules": "_config",
    "module_parameters": "_stats", "rtl_stats": "_stats", "yosys_ff_bits": "_stats",
    "yosys_counts": "_stats",
    "default_dims": "_cases", "standard_cases": "_cases", "suite_dims": "_cases",
    "GemmCase": "_runner", "run_gemm_suite": "_runner", "run_quant_suite": "_runner",
    "SIMULATORS": "_tools", "check_simulator": "_tools", "verilator_tools": "_tools",
    "lint_all": "_lint", "verilator_lint": "_lint", "yosys_check": "_lint",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:  # PEP 562 lazy attributes
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
