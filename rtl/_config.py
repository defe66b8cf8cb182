"""RTL build configuration: the Verilog parameters of ``npu_top`` for one array and GEMM size range.

One :class:`RtlConfig` is one Icarus build (one build folder). Array shape and bit widths are in
bits; ``max_m/max_n/max_k`` are the largest GEMM the build must run (they size the operand
buffers and the accumulator, in words).
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from npukit.sim.datapath import DATAFLOWS, GEMM_ALIASES, OVERFLOW_MODES, accepts_old_names, check_psum_widths
from npukit.sim.errors import ConfigError

#: Verilog DATAFLOW parameter per dataflow. Input stationary runs on the weight-stationary hardware
#: with the operands' roles swapped (A' = B^T, B' = A^T, out = out'^T), exactly the contract's "is".
DATAFLOW_CODES = {"ws": 0, "os": 1, "is": 0}
#: Verilog OVERFLOW parameter per overflow mode (:data:`npukit.sim.quant.OVERFLOW_MODES`).
OVERFLOW_CODES = {"saturate": 0, "wrap": 1}
#: Verilog TIMING parameter per timing mode of the cycle contract. double-buffered is built for ws (and
#: is, on the ws hardware) only: two weight banks per PE.
TIMINGS = {"scalesim": 0, "double-buffered": 1}
#: Verilog sources of the design, leaves first; the top is ``npu_top``.
DESIGN_FILES = ("sram_sp.v", "pe.v", "systolic_array.v", "psum_quantizer.v", "accumulator.v", "npu_top.v")
#: Read latency of the operand SRAMs (sram_sp.v) in periods: the array is fed one period after the read.
SRAM_LAT = 1
#: Periods from a psum leaving the array (contract cycle t) to its output on npu_top's ports, ws/is: the
#: SRAM read, the array's bottom psum register and the accumulator's output register (os adds the drain
#: tree's :attr:`RtlConfig.drain_latency`; see :attr:`RtlConfig.out_latency`).
OUT_LAT = 2 + SRAM_LAT
SHIFT_BITS = 6

# Input limits, checked before anything is allocated or built (Icarus allocates every buffer word,
# the operands travel to the testbench as JSON, and every PE is simulated every cycle):
#: Largest array, rows x cols PEs.
MAX_PES = 128 * 128
#: Largest M, N or K of one build (``max_m/max_n/max_k``, and so of any GEMM it runs).
MAX_GEMM_DIM = 1024
#: Largest operand buffer (A or B) of one build, in words of one array row or column.
MAX_BUFFER_WORDS = 1 << 16
#: Largest quantizer check (random inputs of ``npukit rtl test --quant-samples``).
MAX_QUANT_SAMPLES = 1_000_000


def _bits(n: int) -> int:
    """Unsigned bits to hold 0..n (at least 1)."""
    return max(1, int(n).bit_length())


def rtl_dir() -> Path:
    """Folder holding the shipped Verilog sources (package data of npukit.rtl)."""
    return Path(str(importlib.resources.files("npukit.rtl")))


#: Default array rows = cols of ``npukit rtl test``, ``stats`` and ``lint`` (and of :class:`RtlConfig` callers
#: that pass none): 4x4 builds in seconds on Icarus.
DEFAULT_ARRAY = 4
#: Suffixes of the Verilog files ``npukit rtl test --rtl-dir DIR`` compiles.
USER_SUFFIXES = (".v", ".sv")

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def declared_modules(path: Path) -> set[str]:
    """Names of the modules declared in the Verilog file ``path`` (comments ignored)."""
    text = _COMMENTS.sub(" ", path.read_text(errors="replace"))
    return set(re.findall(r"\bmodule\s+([A-Za-z_][A-Za-z0-9_$]*)", text))


def user_sources(folder: str | Path, top: str = "npu_top") -> list[Path]:
    """The Verilog files (``*.v``, ``*.sv``, not recursive, sorted) of ``folder`` that replace the shipped design;
    :class:`ConfigError` when the folder is missing, holds none or none declares module ``top``."""
    base = Path(folder)
    if not base.is_dir():
        raise ConfigError(f"--rtl-dir '{base}' is not a folder; pass the folder holding your Verilog sources")
    files = sorted(p.resolve() for p in base.iterdir() if p.suffix in USER_SUFFIXES and p.is_file())
    if not files:
        raise ConfigError(f"--rtl-dir '{base}' holds no Verilog sources (*.v, *.sv); pass the folder of your design")
    if not any(top in declared_modules(p) for p in files):
        raise ConfigError(f"--rtl-dir '{base}': no file declares module {top}; the testbench drives {top} with the "
                          "parameters and ports of docs/rtl.md (section 'Your own Verilog')")
    return files


def source_paths(files: tuple[str, ...] = DESIGN_FILES) -> list[Path]:
    """Absolute paths of the Verilog files; raises ConfigError when the package data is missing."""
    base = rtl_dir()
    paths = [base / f for f in files]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ConfigError(f"Verilog sources {missing} are missing from {base}; reinstall npukit (pip install -e .)")
    return paths


@accepts_old_names(GEMM_ALIASES, "RtlConfig")
@dataclass(frozen=True)
class RtlConfig:
    """One parameter set of ``npu_top`` (array rows x cols, widths in bits, GEMM size range).

    Widths use the datapath names (:mod:`npukit.sim.datapath`): ``pe_psum_bits`` P, the PE psum registers
    (Verilog ``PSUM_W``); ``psum_buffer_bits`` B, the running psums between K-folds (``ACC_W``, default P;
    at most P + ceil(log2(K-folds of max_k)), see :func:`npukit.sim.datapath.check_psum_widths`). The old
    keywords ``psum_bits`` and ``acc_bits`` are deprecated aliases."""

    rows: int = 4
    cols: int = 4
    data_bits: int = 8
    pe_psum_bits: int = 32
    psum_buffer_bits: int | None = None
    mult_bits: int = 16
    dataflow: str = "ws"
    overflow: str = "saturate"
    max_m: int = 16
    max_n: int = 16
    max_k: int = 16
    timing: str = "scalesim"

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive integer (got {v!r}); pass e.g. --{name} 8")
        if self.rows * self.cols > MAX_PES:
            raise ConfigError(f"array {self.rows}x{self.cols} has more than {MAX_PES:,} PEs (128x128), the RTL limit; "
                              "pass smaller --rows/--cols")
        # widths limited to what the int64 cycle model (npukit.sim.cycle) checks against
        for name, hi, hint in (("data_bits", 16, "--data-bits 8"), ("pe_psum_bits", 62, "e.g. --pe-psum-bits 32"),
                               ("psum_buffer_bits", 62, "e.g. --psum-buffer-bits 32"),
                               ("mult_bits", 16, "at most 16: the quantizer multiplier is 16 bits wide")):
            v = getattr(self, name)
            if v is None and name == "psum_buffer_bits":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 2 <= v <= hi:
                raise ConfigError(f"{name} must be an integer in [2, {hi}] (got {v!r}); pass {hint}")
        if self.dataflow not in DATAFLOWS:
            raise ConfigError(f"unknown dataflow {self.dataflow!r}; the RTL runs {', '.join(DATAFLOWS)}")
        if self.overflow not in OVERFLOW_MODES:
            raise ConfigError(f"unknown overflow mode {self.overflow!r}; use {' or '.join(OVERFLOW_MODES)}")
        if self.timing not in TIMINGS:
            raise ConfigError(f"unknown timing {self.timing!r}; use {' or '.join(TIMINGS)}")
        if self.timing == "double-buffered" and self.dataflow == "os":
            raise ConfigError("the RTL builds double-buffered timing for ws and is only (two weight banks per PE); "
                              "run os with --timing scalesim")
        for name in ("max_m", "max_n", "max_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive integer (got {v!r})")
            if v > MAX_GEMM_DIM:
                d = name[-1]
                raise ConfigError(f"GEMM {d.upper()} = {v:,} is above the RTL limit of {MAX_GEMM_DIM:,}; "
                                  f"pass --{d} (rtl stats: --max-{d}) of at most {MAX_GEMM_DIM:,}")
        kf = 1 if self.dataflow == "os" else -(-self.max_k // self.rows)
        check_psum_widths(self.pe_psum_bits, self.psum_buffer_width, kf, "RtlConfig",
                          ("pe_psum_bits", "psum_buffer_bits"))
        words = self.buffer_words(self.max_m, self.max_n, self.max_k)
        if max(words) > MAX_BUFFER_WORDS:
            raise ConfigError(
                f"GEMM {self.max_m}x{self.max_k}x{self.max_n} on {self.rows}x{self.cols} needs operand buffers of "
                f"{words[0]:,} and {words[1]:,} words, above the RTL limit of {MAX_BUFFER_WORDS:,}; "
                "pass smaller --m/--n/--k (or --max-*) or a larger array"
            )

    @property
    def psum_buffer_width(self) -> int:
        """Psum buffer width B in bits (default: the PE psum width P)."""
        return self.pe_psum_bits if self.psum_buffer_bits is None else self.psum_buffer_bits

    @property
    def hw_dataflow(self) -> str:
        """The hardware dataflow: 'ws' (for ws and is) or 'os'."""
        return "os" if self.dataflow == "os" else "ws"

    @property
    def out_width(self) -> int:
        """Bits of one output lane of npu_top: B (ws/is) or max(P, B) (os)."""
        return max(self.pe_psum_bits, self.psum_buffer_width) if self.dataflow == "os" else self.psum_buffer_width

    @property
    def drain_latency(self) -> int:
        """Cycles of the os drain tree (registered 2:1 mux levels, ceil(log2(rows))); 0 for ws/is."""
        return (self.rows - 1).bit_length() if self.hw_dataflow == "os" else 0

    @property
    def out_latency(self) -> int:
        """Periods from contract cycle t (a psum leaving the array) to the output on npu_top's ports."""
        return OUT_LAT + self.drain_latency

    def hw_dims(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """(M, N, K) of the GEMM the hardware runs (is swaps M and N: out^T = B^T A^T)."""
        return (n, m, k) if self.dataflow == "is" else (m, n, k)

    def buffer_words(self, m: int, n: int, k: int) -> tuple[int, int]:
        """Words of the A and B operand buffers needed for an M x K @ K x N GEMM."""
        m, n, k = self.hw_dims(m, n, k)
        nf = -(-n // self.cols)
        if self.hw_dataflow == "ws":
            kf = -(-k // self.rows)
            return kf * m, nf * kf * self.rows
        return -(-m // self.rows) * k, nf * k

    def fold_cycles(self, m: int, n: int, k: int) -> int:
        """T, the cycles of one fold (timing: scalesim or double-buffered)."""
        m, n, k = self.hw_dims(m, n, k)
        if self.hw_dataflow == "ws":
            return (self.rows if self.timing == "scalesim" else 0) + self.rows + self.cols + m - 2
        return self.rows + self.cols + k - 2

    def parameters(self) -> dict[str, int]:
        """Verilog parameters of npu_top for this configuration."""
        a_words, b_words = self.buffer_words(self.max_m, self.max_n, self.max_k)
        t = self.fold_cycles(self.max_m, self.max_n, self.max_k)
        m, n, k = self.hw_dims(self.max_m, self.max_n, self.max_k)
        dim = max(m, n, k) + max(self.rows, self.cols) + 2 * self.rows + self.cols + 2
        return {
            "ROWS": self.rows,
            "COLS": self.cols,
            "DATA_W": self.data_bits,
            "PSUM_W": self.pe_psum_bits,
            "ACC_W": self.psum_buffer_width,
            "MULT_W": self.mult_bits,
            "SHIFT_W": SHIFT_BITS,
            "DATAFLOW": DATAFLOW_CODES[self.dataflow],
            "OVERFLOW": OVERFLOW_CODES[self.overflow],
            "TIMING": TIMINGS[self.timing],
            "DIM_W": _bits(max(dim, t)),
            "A_AW": _bits(a_words - 1),
            "B_AW": _bits(b_words - 1),
            "ACC_AW": _bits(m - 1) if self.hw_dataflow == "ws" else 1,
        }

    def tag(self) -> str:
        """Short unique name of this parameter set (used for build folders)."""
        p = self.parameters()
        db = "" if self.timing == "scalesim" else "_db"
        return (
            f"{self.dataflow}_{self.overflow}{db}_r{self.rows}c{self.cols}_d{self.data_bits}p{self.pe_psum_bits}"
            f"a{self.psum_buffer_width}m{self.mult_bits}_dim{p['DIM_W']}a{p['A_AW']}b{p['B_AW']}acc{p['ACC_AW']}"
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def check_gemm(self, m: int, n: int, k: int) -> None:
        """Raise ConfigError when an M x K @ K x N GEMM does not fit this build's buffers."""
        if m < 1 or n < 1 or k < 1:
            raise ConfigError(f"GEMM dims must be positive (got M={m}, N={n}, K={k})")
        if m > self.max_m or n > self.max_n or k > self.max_k:
            raise ConfigError(
                f"GEMM {m}x{k}x{n} exceeds this build's max_m/max_n/max_k = {self.max_m}/{self.max_n}/{self.max_k}; "
                "build with larger max_* values"
            )
