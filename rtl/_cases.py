"""Seeded GEMM test cases for the RTL: random ints, edge values, overflow stress, fold boundaries and
quantized psums.

Two families of sizes per array (all short, to keep Icarus runs short):

* ``default_dims``: two spatial-row folds and two column folds, both last folds partial (padding
  rows and columns are exercised);
* ``fold_dims``: every fold full (N % C == 0 and, ws/is, K % R == 0, os M % R == 0): one fold and
  3 x 3 folds. Only these reach the controller's fold-boundary compares with equality
  (``last_i``, ``last_j``, ``acc_last`` in npu_top.v).

The quantized cases take (multiplier, shift) from the data, as a tile-max psum scale would: the
largest psum the quantizer sees maps to about the B-bit range divided by the K-folds summed into one
output. ``quant`` uses the full-precision multiplier on uniform data; ``many_folds`` draws operands
on a power-of-two grain and an odd multiplier so that about half of the psums are exact ties
(rem == half) of both parities, so a rounding-mode error changes GEMM outputs.
"""

from __future__ import annotations

import math

import numpy as np

from ._config import RtlConfig
from ._runner import GemmCase

#: Spatial-row x column folds of the full-fold cases (name, row folds, column folds).
FOLD_CASES = (("single_fold", 1, 1), ("many_folds", 3, 3))
MIN_TIES = 3  # ties of each parity a ties case must hold (the suite checks it), however few its psums
#: Names of the cases :func:`standard_cases` returns without explicit dims, in order.
CASE_NAMES = ("random", "edges", "extremes", "quant", *(name for name, _, _ in FOLD_CASES))


def default_dims(cfg: RtlConfig) -> tuple[int, int, int]:
    """(M, N, K) with 2 spatial-row folds and 2 column folds, both last folds partial, short stream."""
    r, c = cfg.rows, cfg.cols
    n = c + max(1, c // 2)
    if cfg.dataflow == "ws":
        return min(6, 2 * r + 1), n, r + max(1, r // 2)
    return r + max(1, r // 2), n, min(6, 2 * c + 1)


def fold_dims(cfg: RtlConfig, row_folds: int, col_folds: int, stream: int = 4) -> tuple[int, int, int]:
    """(M, N, K) whose hardware GEMM has ``row_folds`` full spatial-row folds (ws/is: K = row_folds * R;
    os: M = row_folds * R) and ``col_folds`` full column folds (N = col_folds * C; is: M), with a
    ``stream``-long streamed dimension (ws: M, is: N, os: K)."""
    r, c = cfg.rows, cfg.cols
    if cfg.dataflow == "ws":
        return stream, col_folds * c, row_folds * r
    if cfg.dataflow == "is":  # the hardware runs N x K @ K x M: its columns are M
        return col_folds * c, stream, row_folds * r
    return row_folds * r, col_folds * c, stream


def suite_dims(cfg: RtlConfig) -> tuple[int, int, int]:
    """The build size (max M, N, K) that holds every case of ``standard_cases(cfg, seed)``."""
    dims = [default_dims(cfg)] + [fold_dims(cfg, rf, cf) for _, rf, cf in FOLD_CASES]
    return tuple(max(d[i] for d in dims) for i in range(3))  # type: ignore[return-value]


def _edge(rng: np.random.Generator, shape: tuple[int, int], bits: int) -> np.ndarray:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return rng.choice(np.array([lo, hi, lo + 1, hi - 1, -1, 0, 1], dtype=np.int64), size=shape,
                      p=[0.35, 0.35, 0.05, 0.05, 0.1, 0.05, 0.05])


# ----------------------------------------------------------------------------- quantized cases
def fold_psums(cfg: RtlConfig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Every P-bit psum the quantizer sees for A @ B on this build (the cycle model's fold psums,
    flattened; os: the final values), as int64."""
    from npukit.sim.cycle import run_gemm

    res = run_gemm(a, b, cfg.rows, cfg.cols, dataflow=cfg.dataflow, data_bits=cfg.data_bits, pe_psum_bits=cfg.pe_psum_bits,
                   overflow=cfg.overflow, psum_buffer_bits=cfg.psum_buffer_bits, return_fold_psums=True)
    return np.concatenate([fp[4].ravel() for fp in res.fold_psums])


def _k_folds(cfg: RtlConfig, m: int, n: int, k: int) -> int:
    """Quantized psums summed into one output: ws/is the K-folds, os 1."""
    return 1 if cfg.hw_dataflow == "os" else -(-cfg.hw_dims(m, n, k)[2] // cfg.rows)


def _mult_max(cfg: RtlConfig) -> int:
    """Largest |multiplier|: MULT_W bits and, for ws/is, |mult| * 2**(P-1) < 2**63 (the int64 model)."""
    hi = (1 << (cfg.mult_bits - 1)) - 1
    if cfg.hw_dataflow == "ws":
        hi = min(hi, ((1 << 63) - 1) >> (cfg.pe_psum_bits - 1))
    return max(1, hi)


def _target(cfg: RtlConfig, kf: int) -> int:
    """Quantized magnitude of the largest psum: the B-bit range over the K-folds of one output."""
    return max(1, ((1 << (cfg.psum_buffer_width - 1)) - 1) // kf)


def tile_max_quant(cfg: RtlConfig, psums: np.ndarray, kf: int, rng: np.random.Generator) -> tuple[int, int]:
    """(mult, shift) with |mult| / 2**shift <= target / max|psum| as closely as the multiplier allows
    (largest shift whose multiplier fits), random sign: the tile-max scale in hardware form."""
    x = max(1, int(np.abs(psums).max()))
    target, hi = _target(cfg, kf), _mult_max(cfg)
    mult, shift = 1, 0
    for s in range(63, -1, -1):
        mult = (target << s) // x
        if mult <= hi:
            shift = s
            break
    mult = max(1, min(mult, hi))
    return (mult if rng.random() < 0.5 else -mult), shift


def _no_overflow_operands(cfg: RtlConfig, rng: np.random.Generator, dims: tuple[int, int, int]):
    """(A, B, amp): uniform operands in [-amp, amp] (clipped to D bits), amp the largest magnitude
    for which no psum (a sum of min(R, K) products for ws/is, K for os) can overflow P bits."""
    m, n, k = dims
    hk = cfg.hw_dims(m, n, k)[2]
    terms = min(cfg.rows, hk) if cfg.hw_dataflow == "ws" else hk
    amp = max(1, min(1 << (cfg.data_bits - 1), math.isqrt(((1 << (cfg.pe_psum_bits - 1)) - 1) // terms)))
    lo, hi = -(1 << (cfg.data_bits - 1)), (1 << (cfg.data_bits - 1)) - 1
    a = np.clip(rng.integers(-amp, amp + 1, (m, k)), lo, hi)
    b = np.clip(rng.integers(-amp, amp + 1, (k, n)), lo, hi)
    return a, b, amp


def _tie_counts(xs: list[int], mult: int, shift: int) -> tuple[int, int]:
    """(ties with an even floor, ties with an odd floor) among the psums ``xs``: x * mult has
    rem == half at ``shift``; round half up changes the first kind, ties to odd both."""
    even = odd = 0
    for x in xs:
        y = x * mult
        if shift and y & ((1 << shift) - 1) == 1 << (shift - 1):
            if (y >> shift) & 1:
                odd += 1
            else:
                even += 1
    return even, odd


def _ties_case(cfg: RtlConfig, rng: np.random.Generator, dims: tuple[int, int, int], name: str, seed: int,
               tries: int = 20) -> GemmCase:
    """A quantized GEMM with ties on about half its psums (see the module docstring).

    Operands are A = 2**ga * A', B = 2**gb * B' with magnitudes small enough that no psum overflows
    P bits, so every psum is x = 2**g * x' (g = ga + gb). With mult = m' * 2**t (m' odd) and shift
    g + t + 1, x * mult / 2**shift = x' * m' / 2: a tie exactly when x' is odd. g and m' are taken from
    the data so that the largest psum quantizes to about the target range. Operands are redrawn (at
    most ``tries`` times, keeping the best) until each tie parity holds at least 1/16 of the psums and at
    least :data:`MIN_TIES`."""
    best, best_score = None, -1
    for _ in range(tries):
        case = _ties_draw(cfg, rng, dims, name, seed)
        xs = [int(v) for v in fold_psums(cfg, case.a, case.b)]
        score = min(_tie_counts(xs, *case.quant))
        if score > best_score:
            best, best_score = case, score
        if score >= max(MIN_TIES, len(xs) // 16):
            break
    return best


def _ties_draw(cfg: RtlConfig, rng: np.random.Generator, dims: tuple[int, int, int], name: str, seed: int) -> GemmCase:
    kf = _k_folds(cfg, *dims)
    target, hi = _target(cfg, kf), _mult_max(cfg)
    a0, b0, amp = _no_overflow_operands(cfg, rng, dims)
    x0 = max(1, int(np.abs(fold_psums(cfg, a0, b0)).max()))
    need = max(0, math.ceil(math.log2(x0 / (2 * target)))) if x0 > 2 * target else 0
    cap = max(0, amp.bit_length() - 3)  # keep at least 4 magnitudes per operand
    ga = min(need, cap)
    gb = min(need - ga, cap)

    def grain(v: np.ndarray, g: int) -> np.ndarray:  # toward zero: magnitudes stay <= amp
        return np.sign(v) * ((np.abs(v) >> g) << g)

    a, b = grain(a0, ga), grain(b0, gb)
    g = ga + gb
    x = max(1, int(np.abs(fold_psums(cfg, a, b)).max()))
    odd = max(1, (2 * target << g) // x)
    odd = min(odd, hi)
    odd -= 1 - odd % 2  # the largest odd multiplier that does not exceed it
    odd = max(1, odd)
    t_max = 0
    while (odd << (t_max + 1)) <= hi and g + t_max + 2 <= 63:
        t_max += 1
    t = int(rng.integers(0, t_max + 1))
    mult = (odd << t) * (1 if rng.random() < 0.5 else -1)
    return GemmCase(name, a, b, (mult, g + t + 1), seed)


def quant_stats(cfg: RtlConfig, case: GemmCase) -> dict[str, int]:
    """What a quantized case exercises: psums, ties (rem == half) with an even / odd floor (round half
    up and ties to odd each change one kind), saturated psums and distinct quantized values."""
    from npukit.sim.quant import quantize

    mult, shift = case.quant
    xs = [int(v) for v in fold_psums(cfg, case.a, case.b)]
    ties_even, ties_odd = _tie_counts(xs, mult, shift)
    qs = [quantize(x, mult, shift, cfg.psum_buffer_width, mult_bits=cfg.mult_bits) for x in xs]
    qmax = (1 << (cfg.psum_buffer_width - 1)) - 1
    return {"psums": len(xs), "ties_even": ties_even, "ties_odd": ties_odd,
            "saturated": sum(1 for q in qs if q in (qmax, -qmax - 1)), "distinct": len(set(qs)),
            "max_abs": max(abs(q) for q in qs)}


def standard_cases(cfg: RtlConfig, seed: int, dims: tuple[int, int, int] | None = None) -> list[GemmCase]:
    """The suite for one build: random, edge values (+-max products, P-bit overflow when P is small),
    same-sign extremes (overflow in every PE chain) and a quantized case (tile-max multiplier/shift on
    operands whose psums fit P bits),
    all at ``dims`` (default: :func:`default_dims`); without ``dims`` also the full-fold cases
    (:data:`FOLD_CASES`: one fold, random; 3 x 3 folds, quantized with ties),
    which need a build of :func:`suite_dims`. With ``dims`` a quantized ties case at ``dims`` is added."""
    m, n, k = dims or default_dims(cfg)
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (cfg.data_bits - 1)), (1 << (cfg.data_bits - 1)) - 1
    cases = [GemmCase("random", rng.integers(lo, hi + 1, (m, k)), rng.integers(lo, hi + 1, (k, n)), None, seed)]
    cases.append(GemmCase("edges", _edge(rng, (m, k), cfg.data_bits), _edge(rng, (k, n), cfg.data_bits), None, seed))
    # every output a same-sign sum of +-2^(2D-2)-sized products: overflows P bits for small P
    a_ext = np.where((np.arange(m) < (m + 1) // 2)[:, None], lo, hi) * np.ones((m, k), np.int64)
    b_ext = np.where((rng.random(n) < 0.5)[None, :], lo, hi) * np.ones((k, n), np.int64)
    cases.append(GemmCase("extremes", a_ext, b_ext, None, seed))
    a_q, b_q, _ = _no_overflow_operands(cfg, rng, (m, n, k))
    quant = tile_max_quant(cfg, fold_psums(cfg, a_q, b_q), _k_folds(cfg, m, n, k), rng)
    cases.append(GemmCase("quant", a_q, b_q, quant, seed))
    if dims is not None:
        cases.append(_ties_case(cfg, rng, (m, n, k), "quant_ties", seed))
        return cases
    for name, rf, cf in FOLD_CASES:
        fm, fn, fk = fold_dims(cfg, rf, cf)
        if name == "many_folds":
            cases.append(_ties_case(cfg, rng, (fm, fn, fk), name, seed))
        else:
            cases.append(GemmCase(name, rng.integers(lo, hi + 1, (fm, fk)), rng.integers(lo, hi + 1, (fk, fn)), None, seed))
    return cases
