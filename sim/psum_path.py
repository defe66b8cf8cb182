"""The psum charging rules: the one function (:func:`psum_records`) that turns counts and widths into every
``psum_buffer``, ``psum_adder``, ``psum_quantizer``, ``psum_features`` and ``psum_predictor`` ledger record.
The analytical simulator (:mod:`npukit.sim._accounting`), the cycle model's ledger
(:func:`npukit.sim.cycle.run_gemm`) and PsumQuant's PyTorch traffic counter (``PsumTraffic``) all call it,
so one design costs the same whichever entry point measured it.

Counts (one GEMM of M x K @ K x N on an R x C array; kf = ceil(K/R) K-folds, nt = ceil(N/C) N-tiles): a
running psum leaves the array once per K-fold; every fold after the first reads the running psum, adds
the new fold psum and (except the last, whose sum goes to the ofmap) writes it back, so with no spill
the psum buffer sees M * N * (kf - 1) reads and writes and the adder as many adds (a spilled running
psum is read from DRAM instead, and still added).

Widths (names of :mod:`npukit.sim.datapath`; the reasons are the physics of each unit):

* ``psum_buffer`` SRAM reads/writes and DRAM spills are at the width running psums are held at
  (:func:`npukit.sim.datapath.running_psum_bits`): ``psum_buffer`` bits, except with quantized
  ``transfer`` semantics, where each fold psum carries its own scale and so is dequantized into a
  running psum of ``pe_psum`` bits.
* ``psum_adder`` ``int_add`` at that same running width: the adder merges an incoming psum (quantized
  to ``psum_buffer`` bits, or a dequantized / unquantized ``pe_psum``-bit psum, never wider than the
  running psum by the width rule) into the running psum, so its carry chain spans the running psum.
  (The simulator used to charge it at the in-array accumulator width, 32 bits for an 8-bit buffer.)
* ``psum_quantizer``, once per fold psum (M * N * kf) when psums are narrower than ``pe_psum``:
  a saturating compare to the buffer range (an add at ``psum_buffer`` bits; an estimate: Horowitz 2014
  has no comparator entry), for every policy (``none`` has only this). A quantizing policy adds the
  requantize step on the ``pe_psum``-bit fold psum: a rounding add at ``pe_psum`` bits, and with
  ``mult_shift`` scales a multiply ``pe_psum`` x ``multiplier_bits`` (a ``pow2`` step is a shift:
  wiring and a barrel shifter, not priced). ``transfer`` semantics then dequantizes each psum back to
  the running psum's scale: a multiply ``psum_buffer`` x ``multiplier_bits`` with ``mult_shift``
  scales, a shift (free) with ``pow2``; ``buffer`` semantics shares one scale over all K-folds and
  needs no dequantize before the output.
* ``psum_features`` (policy ``psumquant``): per input element of every tile, |x| and a running max
  (one compare), x^2 (``input`` x ``input`` multiply) and a sum of squares (an add at 2*input + log2 R
  bits), and a top-k peak selector (``top_k`` compares); per tile, RMS and crest factor in the log2
  domain (estimated as 4 adds at 16 bits for the log2/sqrt look-ups). Buffer semantics needs the
  whole row's features before the first K-tile's psum is quantized, so the input is read once more
  from the ifmap SRAM (M * K reads at input bits) and the per-tile features are combined per row
  (3 adds at 16 bits per tile); transfer semantics computes them as the tile streams into the array.
* ``psum_predictor`` (policy ``psumquant``): one scale per (row, N-tile) in buffer semantics, per
  (row, K-tile, N-tile) in transfer semantics; each is a ``predictor_features``-long dot product at
  16 bits (MACs 16 x 16 into 32) plus the peak-times-weight feature (``top_k`` MACs at
  ``input`` x ``weight``) and a shift-and-round to the hardware step (one add at 16 bits).

The per-action energies come from the energy table (integer multiply and add at the stated widths);
the 16-bit fixed-point widths of the feature and predictor datapaths are npukit's estimates, not a
published design.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .arch import Arch, PsumQuantHW
from .datapath import Bits, running_psum_bits

Record = tuple[str, str, tuple[int, ...], int]  # (component, action, bits, count)
COMPONENTS = ("psum_quantizer", "psum_features", "psum_predictor")
FIXED_BITS = 16  # npukit's estimate of the feature/predictor datapath width


@dataclass(frozen=True)
class PsumCounts:
    """What the psum path of one GEMM (or ``batch`` of them, counts already summed) did.

    ``M, K, N``: the GEMM (M x K @ K x N); ``rows, cols``: the array (PEs). ``buffer_reads``,
    ``buffer_writes``: running psums read from / written to the psum buffer SRAM; ``spilled_reads``:
    running psums read back from DRAM (added like the on-chip ones; the DRAM records are the caller's).
    ``gemms``: how many such GEMMs (scales the quantizer, feature and predictor counts)."""

    M: int
    K: int
    N: int
    rows: int
    cols: int
    buffer_reads: int
    buffer_writes: int
    spilled_reads: int = 0
    gemms: int = 1


def psum_records(c: PsumCounts, bits: Bits, hw: PsumQuantHW | None) -> list[Record]:
    """Every psum-path record of ``c`` at widths ``bits`` (see the module docstring for the rules).

    ``hw``: the psum quantization hardware when psums leave the array narrower than ``pe_psum`` (a
    quantizer, or with policy ``none`` a saturating clamp), None when they are kept whole."""
    held = running_psum_bits(bits, hw.semantics if hw else "buffer", hw is not None and hw.policy != "none")
    out: list[Record] = [
        ("psum_buffer", "sram_read", (held,), c.buffer_reads),
        ("psum_buffer", "sram_write", (held,), c.buffer_writes),
        ("psum_adder", "int_add", (held,), c.buffer_reads + c.spilled_reads),
    ]
    if hw is not None:
        out += _quantizer(c, bits, hw)
    return [r for r in out if r[3]]


def _quantizer(c: PsumCounts, b: Bits, q: PsumQuantHW) -> list[Record]:
    M, K, N, g = c.M, c.K, c.N, c.gemms
    kf, nt = -(-K // c.rows), -(-N // c.cols)
    n_quant = g * M * N * kf
    out: list[Record] = [("psum_quantizer", "int_add", (b.psum_buffer,), n_quant)]  # saturating compare
    if q.policy == "none":
        return out
    if q.scale_form == "mult_shift":
        out.append(("psum_quantizer", "int_mult", (b.pe_psum, q.multiplier_bits), n_quant))
    out.append(("psum_quantizer", "int_add", (b.pe_psum,), n_quant))  # rounding
    if q.semantics == "transfer" and q.scale_form == "mult_shift":
        out.append(("psum_quantizer", "int_mult", (b.psum_buffer, q.multiplier_bits), n_quant))  # dequantize
    if q.policy != "psumquant":
        return out
    elems, tiles = g * M * K, g * M * kf
    sq_bits = min(64, 2 * b.input + math.ceil(math.log2(max(2, c.rows))))
    out += [
        ("psum_features", "int_add", (b.input,), elems * (1 + q.top_k)),  # running max + top-k compares
        ("psum_features", "int_mult", (b.input, b.input), elems),
        ("psum_features", "int_add", (sq_bits,), elems),
        ("psum_features", "int_add", (FIXED_BITS,), tiles * 4),  # log2 / sqrt look-ups (estimate)
    ]
    if q.semantics == "buffer":
        out += [
            ("psum_features", "sram_read", (b.input,), elems),  # the extra pass over each input row
            ("psum_features", "int_add", (FIXED_BITS,), tiles * 3),  # per-row combination of tile features
        ]
        n_pred = g * M * nt
    else:
        n_pred = g * M * kf * nt
    out += [
        ("psum_predictor", "int_mult", (FIXED_BITS, FIXED_BITS), n_pred * q.predictor_features),
        ("psum_predictor", "int_add", (2 * FIXED_BITS,), n_pred * q.predictor_features),
        ("psum_predictor", "int_mult", (b.input, b.weight), n_pred * q.top_k),
        ("psum_predictor", "int_add", (b.input + b.weight,), n_pred * q.top_k),
        ("psum_predictor", "int_add", (FIXED_BITS,), n_pred),
    ]
    return out


def quantized(arch: Arch) -> bool:
    """Whether the arch's psums leave the array narrower than ``pe_psum`` (the psum path exists); os
    keeps its psums in the PEs at ``pe_psum``: nothing to quantize."""
    return arch.bits.psum_buffer < arch.bits.pe_psum and arch.dataflow in ("ws", "is")


def arch_psum_hw(arch: Arch) -> PsumQuantHW | None:
    """The arch's psum quantization hardware when its psums are quantized, else None."""
    return arch.psum_quant if quantized(arch) else None


def held_bits(arch: Arch) -> int:
    """Width (bits) the arch holds running psums at in the psum buffer and in DRAM spills."""
    hw = arch_psum_hw(arch)
    return running_psum_bits(arch.bits, hw.semantics if hw else "buffer", hw is not None and hw.policy != "none")
