"""Cycle-level systolic-array model: one GEMM stepped register by register, bit- and cycle-exact.

:func:`run_gemm` runs ``A (M x K) @ B (K x N)`` on an R x C array under the cycle contract shared with
the RTL (this docstring and the kernels' in ``_cycle_ws`` / ``_cycle_os`` / ``_cycle_is``) and returns
the outputs, the exact compute cycles (equal to the analytical model's ``compute_cycles`` and to what
the RTL testbench reports), the cycle each output leaves the array, and optionally the psums that
leave the array in every fold (what the PsumQuant quantizer sees).

Datapath (width names of :mod:`npukit.sim.datapath`): operands are signed ``data_bits``-bit integers
(input and weight); every PE register holding a psum is ``pe_psum_bits`` (P) wide and every addition in
a PE is saturated or wrapped to P bits (``overflow``). For ws/is, psums that leave the array go through
the psum quantizer (:func:`npukit.sim.quant.quantize`, when ``quant=(mult, shift)``) and the running
psums of the psum buffer, ``psum_buffer_bits`` (B) wide (at most P + ceil(log2(K-folds)):
:func:`npukit.sim.datapath.check_psum_widths`): ``acc <- ovf_B(q)`` for the first K-fold, ``acc <- ovf_B(acc + q)`` after,
summing K-folds in order i = 0, 1, ...; within a fold the psum adds rows 0..R-1 top to bottom.
For os the accumulator is the PE itself (k = 0..K-1 in order); ``quant`` (if given) maps the final
P-bit values to ``quantize(x, mult, shift, B)``.

Timing (cycles numbered from 0, absolute): see the kernels' docstrings in ``_cycle_ws`` /
``_cycle_os`` / ``_cycle_is``. The last cycle of the last fold's window has index ``F*T - 1`` in
scalesim timing and ``R + F*T' - 1`` (ws/is) / ``F*K + R + C - 3`` (os) double-buffered; it is the
leave cycle of the last output whenever the last fold uses the whole array. ``cycles`` is that index
turned into compute cycles by :func:`npukit.sim.datapath.cycle_count`, the one convention of every
tool: the index itself in scalesim timing (SCALE-Sim 3.0.0's reported cycles), the index + 1 (a count)
double-buffered. ``out_cycle[m, n]`` is the cycle (an index) at which the final psum of output (m, n)
leaves the array (ws/is: its last K-fold; os: the cycle its accumulator is final); the quantizer and
accumulator are taken as combinational at that cycle.

Ledger (when given; recorded in the ledger's current scope, component names of
:mod:`npukit.sim.simulator`): ``pe_array mac (D, D, P)``; ``input_registers``/``weight_registers
reg_write`` at D bits and ``psum_registers reg_write`` at P bits, counting only writes of registers that
latch valid data an output needs (see the kernels: weights of mapped PEs once per fold, moving operands
in mapped PEs, psums in mapped columns including the pass-through rows below the last mapped K row,
which the analytical model does not count), and one ``reg_read`` of each per MAC;
``ifmap_sram``/``filter_sram sram_read`` at D bits for every operand element entering the array;
the psum path by the one set of psum charging rules (:func:`npukit.sim.psum_path.psum_records`):
a ``psum_buffer`` read and write and a ``psum_adder`` add for every psum leaving the array in a K-fold
after the first, and, when B < P (ws/is), the psum path hardware ``psum_hw`` (default: a ``static``
``mult_shift`` quantizer with a 16-bit multiplier when ``quant`` is given, else policy ``none``, a
saturating clamp); and ``add_cycles(cycles)``. SRAM capacities are not
declared: declare them (e.g. ``simulator.declare_components``) before pricing energy.

Old keyword names (deprecated, one warning): ``psum_bits`` -> ``pe_psum_bits``, ``acc_bits`` ->
``psum_buffer_bits``.

Limits of the int64 model: ``data_bits`` <= 32, ``pe_psum_bits`` and ``psum_buffer_bits`` <= 62, and for ws/is
with a quantizer ``|mult| * 2**(P-1) < 2**63`` (P <= 48 for any 16-bit multiplier). Size limits,
checked before anything is allocated (the model allocates from the sizes, not only from the operands
passed): ``rows * cols`` <= :data:`MAX_PES`, and the outputs (M x N) and the fold psums (F x M x C for
ws, F x N x C for is) at most :data:`MAX_WORDS` int64 words each.

The numba kernels are imported on first use, so importing this module stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arch import PsumQuantHW
from .datapath import (
    DATAFLOWS,
    GEMM_ALIASES,
    OVERFLOW_MODES,
    TIMING_MODES,
    Bits,
    check_psum_widths,
    cycle_count,
    old_keywords,
)
from .errors import ConfigError
from .ledger import Ledger
from .psum_path import PsumCounts, psum_records
from .quant import MAX_SHIFT, MULT_BITS, check_mult, quantize

__all__ = ["CycleResult", "run_gemm", "contract_cycles"]

#: Largest array of the cycle-level model, rows x cols PEs (1024 x 1024).
MAX_PES = 1 << 20
#: Largest array the model allocates from the sizes (outputs, fold psums), in int64 words (1 GiB).
MAX_WORDS = 1 << 27

FoldPsum = tuple[int, int, slice, slice, np.ndarray]


@dataclass
class CycleResult:
    """Result of :func:`run_gemm`.

    ``out``: (M, N) int64 outputs (B-bit accumulator values for ws/is; P-bit, or quantized B-bit,
    values for os). ``cycles``: compute cycles (:func:`npukit.sim.datapath.cycle_count` of the last
    cycle's index; equal to the analytical model and the RTL). ``out_cycle``: (M, N) int64, absolute
    cycle (an index from 0) each output leaves the array. ``fold_psums``: when requested, one
    ``(fold, k_fold, rows, cols, psums)`` per fold in fold order, ``psums`` = int64
    ``out[rows, cols]``-shaped P-bit psums leaving the array in that fold (os: the final values).
    ``pe_cycles``: ``rows * cols * cycles``. ``counts``: event counts recorded into the ledger."""

    out: np.ndarray
    cycles: int
    out_cycle: np.ndarray
    fold_psums: list[FoldPsum] | None
    pe_cycles: int
    dataflow: str = "ws"
    timing: str = "scalesim"
    counts: dict[str, int] = field(default_factory=dict)


def _pos_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or int(v) <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _width(name: str, v: Any, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or not 1 <= int(v) <= hi:
        raise ConfigError(f"{name} must be an integer in 1..{hi} bits (int64 model), got {v!r}")
    return int(v)


def _operand(name: str, x: Any, bits: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 2 or 0 in arr.shape:
        raise ConfigError(f"{name} must be a non-empty 2-D integer matrix, got shape {arr.shape}")
    ints = arr.dtype != bool and np.issubdtype(arr.dtype, np.integer)
    if arr.dtype == object:  # e.g. nested lists of Python ints too big for int64
        ints = all(isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) for v in arr.flat)
    if not ints:
        raise ConfigError(f"{name} must hold integers (got dtype {arr.dtype}); quantize it to {bits}-bit integers first")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    amin, amax = int(arr.min()), int(arr.max())
    if amin < lo or amax > hi:
        raise ConfigError(
            f"{name} holds values in [{amin}, {amax}] that do not fit data_bits={bits} (signed [{lo}, {hi}]); "
            f"clip the operand or raise data_bits"
        )
    return np.ascontiguousarray(arr, dtype=np.int32)


def _check_words(what: str, words: int) -> None:
    if words > MAX_WORDS:
        raise ConfigError(f"{what} would take {words:,} int64 words, above the cycle model's limit of {MAX_WORDS:,} "
                          "(MAX_WORDS, 1 GiB); run a smaller GEMM or split it")


def _quant(quant: Any) -> tuple[int, int] | None:
    if quant is None:
        return None
    if not isinstance(quant, tuple | list) or len(quant) != 2:
        raise ConfigError(f"quant must be None or (multiplier, shift), got {quant!r}")
    mult = check_mult(quant[0], MULT_BITS)
    shift = quant[1]
    if isinstance(shift, bool) or not isinstance(shift, int | np.integer) or not 0 <= int(shift) <= MAX_SHIFT:
        raise ConfigError(f"quant shift must be an integer in 0..{MAX_SHIFT}, got {shift!r}")
    return mult, int(shift)


def contract_cycles(M: int, N: int, K: int, rows: int, cols: int, dataflow: str, timing: str) -> int:
    """The contract's compute cycles of one GEMM (== ``run_gemm(...).cycles`` ==
    ``map_layer(...).compute_cycles`` under the fixed mapping): the index of its last cycle through
    :func:`npukit.sim.datapath.cycle_count` (scalesim: the index, double-buffered: a count)."""
    R, C = rows, cols
    if dataflow == "os":
        F = -(-M // R) * -(-N // C)
        last = F * (R + C + K - 2) - 1 if timing == "scalesim" else F * K + R + C - 3
    else:
        temporal, extent = (M, N) if dataflow == "ws" else (N, M)
        F = -(-K // R) * -(-extent // C)
        last = F * (2 * R + C + temporal - 2) - 1 if timing == "scalesim" else R + F * (temporal + R + C - 2) - 1
    return cycle_count(last, timing)


@old_keywords(GEMM_ALIASES, "run_gemm")
def run_gemm(
    A: Any,
    B: Any,
    rows: int,
    cols: int,
    dataflow: str = "ws",
    data_bits: int = 8,
    pe_psum_bits: int = 32,
    overflow: str = "saturate",
    timing: str = "scalesim",
    psum_buffer_bits: int | None = None,
    quant: tuple[int, int] | None = None,
    return_fold_psums: bool = False,
    ledger: Ledger | None = None,
    psum_hw: PsumQuantHW | None = None,
) -> CycleResult:
    """Run ``A @ B`` on a ``rows`` x ``cols`` systolic array, cycle by cycle (see module docstring).

    ``A``: (M, K), ``B``: (K, N) signed integers of ``data_bits`` bits. ``pe_psum_bits``: P, PE psum
    register width (bits). ``psum_buffer_bits``: B, width of the running psums between K-folds (bits,
    default P). ``quant``: ``(multiplier, shift)`` of the psum quantizer or None. ``psum_hw``: the psum
    path hardware the ledger charges when B < P (see the module docstring). Raises :class:`ConfigError`
    on bad input."""
    R = _pos_int("rows", rows)
    C = _pos_int("cols", cols)
    if R * C > MAX_PES:
        raise ConfigError(f"array {R}x{C} has more than {MAX_PES:,} PEs, the cycle model's limit (MAX_PES); "
                          "pass smaller rows/cols")
    if dataflow not in DATAFLOWS:
        raise ConfigError(f"unknown dataflow '{dataflow}': use one of {', '.join(DATAFLOWS)}")
    if timing not in TIMING_MODES:
        raise ConfigError(f"unknown timing mode '{timing}': use one of {', '.join(TIMING_MODES)}")
    if overflow not in OVERFLOW_MODES:
        raise ConfigError(f"unknown overflow mode '{overflow}': use one of {', '.join(OVERFLOW_MODES)}")
    D = _width("data_bits", data_bits, 32)
    P = _width("pe_psum_bits", pe_psum_bits, 62)
    Bb = P if psum_buffer_bits is None else _width("psum_buffer_bits", psum_buffer_bits, 62)
    q = _quant(quant)
    a = _operand("A", A, D)
    b = _operand("B", B, D)
    M, K = a.shape
    K2, N = b.shape
    if K2 != K:
        raise ConfigError(f"A is {M}x{K} but B is {K2}x{N}: the inner dimensions must match")
    check_psum_widths(P, Bb, 1 if dataflow == "os" else -(-K // R), "run_gemm", ("pe_psum_bits", "psum_buffer_bits"))
    _check_words("the outputs", M * N)
    if return_fold_psums and dataflow != "os":
        temporal, extent = (M, N) if dataflow == "ws" else (N, M)
        _check_words("the fold psums", -(-K // R) * -(-extent // C) * temporal * C)
    if q is not None and dataflow != "os" and abs(q[0]) * (1 << (P - 1)) >= 1 << 63:
        raise ConfigError(
            f"quant multiplier {q[0]} times a {P}-bit psum overflows the int64 model; use pe_psum_bits <= 48"
        )
    sat = overflow == "saturate"
    nb = 1 if timing == "scalesim" else 2
    has_q = q is not None
    mult, shift = q if q is not None else (1, 0)

    if dataflow == "os":
        from . import _cycle_os as k_os

        counts = np.zeros(k_os.N_COUNTERS, np.int64)
        period = R + C + K - 2 if timing == "scalesim" else K
        raw = np.zeros((M, N), np.int64)
        out_cycle = np.full((M, N), -1, np.int64)
        k_os.run_os(a, b, R, C, period, nb, P, sat, raw, out_cycle, counts)
        out = quantize(raw, mult, shift, Bb) if has_q else raw
        ev = {
            "macs": int(counts[k_os.N_MAC]),
            "reg_input": int(counts[k_os.N_A_W]),
            "reg_weight": int(counts[k_os.N_B_W]),
            "reg_accumulator": int(counts[k_os.N_ACC_W]),
            "ifmap_reads": int(counts[k_os.N_A_READ]),
            "filter_reads": int(counts[k_os.N_B_READ]),
            "psum_buffer_updates": 0,
        }
        fold_psums = None
        if return_fold_psums:
            mf, nf = -(-M // R), -(-N // C)
            fold_psums = []
            for f in range(mf * nf):
                i, j = divmod(f, nf)
                rs, cs = slice(i * R, min(M, (i + 1) * R)), slice(j * C, min(N, (j + 1) * C))
                fold_psums.append((f, 0, rs, cs, raw[rs, cs].copy()))
        last, last_out = int(counts[k_os.LAST_CYCLE]), int(counts[k_os.LAST_OUT])
    else:
        from . import _cycle_ws as k_ws

        counts = np.zeros(k_ws.N_COUNTERS, np.int64)
        temporal = M if dataflow == "ws" else N
        period = 2 * R + C + temporal - 2 if timing == "scalesim" else temporal + R + C - 2
        if dataflow == "ws":
            F = -(-K // R) * -(-N // C)
            fp = np.zeros((F, M, C) if return_fold_psums else (1, 1, 1), np.int64)
            out = np.zeros((M, N), np.int64)
            out_cycle = np.full((M, N), -1, np.int64)
            k_ws.run_ws(a, b, R, C, period, nb, P, sat, Bb, has_q, mult, shift, return_fold_psums, fp, out, out_cycle, counts)
        else:
            from . import _cycle_is as k_is

            out, out_cycle, fp = k_is.run_is(a, b, R, C, period, nb, P, sat, Bb, has_q, mult, shift, return_fold_psums, counts)
        moving, stationary = int(counts[k_ws.N_ACT_W]), int(counts[k_ws.N_STAT_W])
        ev = {
            "macs": int(counts[k_ws.N_MAC]),
            "reg_input": moving if dataflow == "ws" else stationary,
            "reg_weight": stationary if dataflow == "ws" else moving,
            "reg_accumulator": int(counts[k_ws.N_PSUM_W]),
            "ifmap_reads": int(counts[k_ws.N_STREAM_READ if dataflow == "ws" else k_ws.N_STAT_READ]),
            "filter_reads": int(counts[k_ws.N_STAT_READ if dataflow == "ws" else k_ws.N_STREAM_READ]),
            "psum_buffer_updates": int(counts[k_ws.N_PSUM_RW]),
        }
        fold_psums = None
        if return_fold_psums:
            kf = -(-K // R)
            ext = N if dataflow == "ws" else M
            fold_psums = []
            for f in range(fp.shape[0]):
                j, i = divmod(f, kf)
                span = slice(j * C, min(ext, (j + 1) * C))
                used = span.stop - span.start
                if dataflow == "ws":
                    fold_psums.append((f, i, slice(0, M), span, fp[f, :, :used].copy()))
                else:
                    fold_psums.append((f, i, span, slice(0, N), fp[f, :, :used].T.copy()))
        last, last_out = int(counts[k_ws.LAST_CYCLE]), int(counts[k_ws.LAST_OUT])

    cycles = cycle_count(last, timing)
    expected = contract_cycles(M, N, K, R, C, dataflow, timing)
    if cycles != expected or last_out > last or int(out_cycle.min()) < 0:  # internal consistency of the kernels
        raise AssertionError(
            f"cycle model inconsistent: stepped to cycle {last} ({cycles} compute cycles, contract {expected}), "
            f"last output at {last_out}"
        )
    ev["last_output_cycle"] = last_out
    if ledger is not None:
        hw = None
        if Bb < P and dataflow != "os":
            hw = psum_hw or PsumQuantHW(policy="static" if q is not None else "none", scale_form="mult_shift",
                                        multiplier_bits=MULT_BITS)
        counts = PsumCounts(M, K, N, R, C, ev["psum_buffer_updates"], ev["psum_buffer_updates"])
        _record(ledger, ev, D, P, cycles, psum_records(counts, Bits(D, D, P, Bb, Bb), hw))
    return CycleResult(
        out=out,
        cycles=cycles,
        out_cycle=out_cycle,
        fold_psums=fold_psums,
        pe_cycles=R * C * cycles,
        dataflow=dataflow,
        timing=timing,
        counts=ev,
    )


def _record(ledger: Ledger, ev: dict[str, int], D: int, P: int, cycles: int, psum: list) -> None:
    rec = ledger.record
    rec("pe_array", "mac", (D, D, P), ev["macs"])
    rec("input_registers", "reg_write", D, ev["reg_input"])
    rec("weight_registers", "reg_write", D, ev["reg_weight"])
    rec("psum_registers", "reg_write", P, ev["reg_accumulator"])
    for comp, w in (("input_registers", D), ("weight_registers", D), ("psum_registers", P)):
        rec(comp, "reg_read", w, ev["macs"])
    rec("ifmap_sram", "sram_read", D, ev["ifmap_reads"])
    rec("filter_sram", "sram_read", D, ev["filter_reads"])
    for comp, act, bits, n in psum:
        rec(comp, act, bits, n)
    ledger.add_cycles(cycles)
