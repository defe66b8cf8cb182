"""The psum path's own hardware: quantizer, crest-factor feature unit and scale predictor.

Charged when psums are quantized (``bits.psum`` < ``bits.accumulator``) on a ws or is array (os keeps
its psums in the PEs at accumulator width: nothing to quantize). Counts follow how the policy of
:class:`npukit.sim.arch.PsumQuantHW` works on the GEMM's tiles: rows m of the input, K-tiles t of R
rows, N-tiles j of C columns (kf = ceil(K/R), nt = ceil(N/C)).

* ``psum_quantizer`` (every policy but ``none``): each K-tile psum is quantized once before it enters
  the psum path (buffer semantics: ``acc <- sat(acc + q(p_t))``; transfer: the transferred psum), so
  M * N * kf quantizations per GEMM, each a multiply by the scale (``accumulator`` x
  ``multiplier_bits``), a rounding add and a saturating compare (an add at ``bits.psum``; an estimate:
  Horowitz 2014 has no comparator entry). ``none``: the saturating compare only.
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

The per-action energies come from the arch's energy table (integer multiply and add at the stated
widths); the 16-bit fixed-point widths of the feature and predictor datapaths are npukit's
estimates, not a published design.
"""

from __future__ import annotations

import math

from .arch import Arch
from .workload import Layer

Record = tuple[str, str, tuple[int, ...], int]  # (component, action, bits, count)
COMPONENTS = ("psum_quantizer", "psum_features", "psum_predictor")
FIXED_BITS = 16  # npukit's estimate of the feature/predictor datapath width


def quantized(arch: Arch) -> bool:
    """Whether psums are narrower than the accumulator (the psum path exists)."""
    return arch.bits.psum < arch.bits.accumulator and arch.dataflow in ("ws", "is")


def psum_path_records(layer: Layer, arch: Arch) -> list[Record]:
    """Action counts of the psum path for one GEMM of ``layer`` (batch applied by the caller)."""
    if not quantized(arch):
        return []
    M, N, K, b, q = layer.M, layer.N, layer.K, arch.bits, arch.psum_quant
    kf, nt = -(-K // arch.rows), -(-N // arch.cols)
    n_quant = M * N * kf
    out: list[Record] = [("psum_quantizer", "int_add", (b.psum,), n_quant)]  # saturating compare
    if q.policy == "none":
        return out
    out += [
        ("psum_quantizer", "int_mult", (b.accumulator, q.multiplier_bits), n_quant),
        ("psum_quantizer", "int_add", (b.accumulator,), n_quant),  # rounding
    ]
    if q.policy != "psumquant":
        return out
    elems, tiles = M * K, M * kf
    sq_bits = min(64, 2 * b.input + math.ceil(math.log2(max(2, arch.rows))))
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
        n_pred = M * nt
    else:
        n_pred = M * kf * nt
    out += [
        ("psum_predictor", "int_mult", (FIXED_BITS, FIXED_BITS), n_pred * q.predictor_features),
        ("psum_predictor", "int_add", (2 * FIXED_BITS,), n_pred * q.predictor_features),
        ("psum_predictor", "int_mult", (b.input, b.weight), n_pred * q.top_k),
        ("psum_predictor", "int_add", (b.input + b.weight,), n_pred * q.top_k),
        ("psum_predictor", "int_add", (FIXED_BITS,), n_pred),
    ]
    return out
