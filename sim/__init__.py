"""npukit.sim: the energy/latency accounting layer and the analytical systolic-array NPU simulator.

Public API: :class:`Ledger`, :class:`EnergyTable` / :func:`load_table`, :class:`Arch` /
:func:`load_arch`, :class:`Layer` / :class:`Workload` and the built-in workloads,
:func:`simulate`; multi-core NPUs: :class:`MultiCoreArch` / :func:`load_multicore_arch`, :func:`simulate_multicore`;
:func:`load_chip` reads any ``--arch`` value into one or the other.
This package imports neither torch nor triton.
"""

from .arch import Arch, ArchSource, Bits, SramKiB, load_arch, load_arch_source, load_scalesim_cfg
from .bounded import (
    MAX_DEPTH,
    MAX_INT,
    MAX_TEXT_BYTES,
    check_depth,
    check_finite,
    check_integers,
    check_number,
    check_shape,
    check_size,
    load_json,
    load_yaml,
    parse_dim,
    short,
)
from .chip import check_arch_spec, chip_table, is_multicore_spec, load_chip
from .disk_cache import cache_root, cache_subdir
from .energy import BUILTIN_TABLES, EnergyTable, load_table
from .errors import ConfigError, EnergyTableError, LedgerError, NpukitError, WorkloadError
from .interconnect import Dram, Interconnect, SharedMemory
from .ledger import Ledger
from .multicore import Core, MultiCoreArch, homogeneous, load_multicore_arch, single_core
from .multicore_sim import MultiCoreResult, simulate_multicore
from .output import (
    atomic_file,
    check_out_dir,
    check_targets,
    check_writable_file,
    format_table,
    markdown_table,
    path_inside,
    prepare_out_dir,
    safe_filename,
    write_csv,
    write_figure,
    write_text,
)
from .result_text import render_result
from .simulator import LayerResult, SimResult, map_layer, simulate
from .workload import (
    MAX_DIM,
    VECTOR_OPS,
    Layer,
    VectorOp,
    Workload,
    conv_layer,
    gemm,
    llama3_8b_layer,
    load_topology_csv,
    minilm_l6,
    resnet18,
)

__all__ = [
    "Arch", "ArchSource", "Bits", "SramKiB", "load_arch", "load_arch_source", "load_scalesim_cfg",
    "cache_root", "cache_subdir",
    "BUILTIN_TABLES", "EnergyTable", "load_table",
    "MAX_DEPTH", "MAX_INT", "MAX_TEXT_BYTES", "check_depth", "check_finite", "check_number", "check_size", "load_json",
    "load_yaml", "check_integers", "check_shape", "parse_dim", "short", "MAX_DIM",
    "ConfigError", "EnergyTableError", "LedgerError", "NpukitError", "WorkloadError",
    "Ledger",
    "Core", "Dram", "Interconnect", "MultiCoreArch", "MultiCoreResult", "SharedMemory", "homogeneous",
    "load_multicore_arch", "simulate_multicore", "single_core", "check_arch_spec", "chip_table", "is_multicore_spec",
    "load_chip",
    "atomic_file", "check_out_dir", "check_targets",
    "check_writable_file", "format_table", "markdown_table", "path_inside", "prepare_out_dir",
    "safe_filename", "write_csv", "write_figure", "write_text",
    "write_report",
    "LayerResult", "SimResult", "map_layer", "render_result", "simulate",
    "Layer", "VECTOR_OPS", "VectorOp", "Workload", "conv_layer", "gemm", "llama3_8b_layer", "load_topology_csv", "minilm_l6",
    "resnet18",
    "run_gemm", "CycleResult", "quantize", "dequantize",
]

# The cycle-level model and the quantizer need numpy (and numba on first use): loaded on demand so
# that ``npukit sim`` starts without them.
_LAZY = {
    "run_gemm": ("cycle", "run_gemm"),
    "CycleResult": ("cycle", "CycleResult"),
    "quantize": ("quant", "quantize"),
    "dequantize": ("quant", "dequantize"),
    "write_report": ("report", "write_report"),
}


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy attributes
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{mod}", __name__), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
