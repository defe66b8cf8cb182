"""Execution of one psum-quantized GEMM: geometry, input-tile features, calibration statistics,
the float fake-quant path (via :mod:`npukit.kernels.psumquant`) and the integer-exact path
(NumPy int64 with the shared quantizer of :mod:`npukit.sim.quant`).

Conventions: a layer is the GEMM ``y = x @ w`` with ``x`` M x K (one row per output vector: a token,
or an output pixel of a convolution after im2col) and ``w`` K x N. K is cut into ``kf`` K-tiles of
``rows`` (the array's rows), N into ``nt`` N-tiles of ``cols`` (its columns). The *psum domain* is
the number system the array works in: integer units (``x`` and ``w`` are integer-valued, int8 by
default) or plain float units. Scales ("steps") are psum-domain units per quantizer LSB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from npukit.sim import quant as squant

LOG2_FLOOR = -60.0  # log2 of the range assigned to an all-zero tile (any step represents 0 exactly)
TOP_K = 8  # largest |x| per K-tile kept as tile features (the predictor's peak-times-weight feature)


@dataclass(frozen=True)
class Geom:
    """Tile geometry of one GEMM on an R x C array (all counts, no units)."""

    K: int
    N: int
    rows: int
    cols: int

    @property
    def kf(self) -> int:
        return -(-self.K // self.rows)

    @property
    def nt(self) -> int:
        return -(-self.N // self.cols)


# ---------------------------------------------------------------------------------- features
@dataclass
class TileFeatures:
    """Statistics of the input activation tiles of x (M x K) in psum-domain units.

    ``rms``/``peak``: (M, kf) RMS and max |x| of row m over K-tile t (RMS over the tile's real
    length); ``row_rms``/``row_peak``: (M,) over the whole row; ``top_val``/``top_idx``: (M, kf, TOP_K)
    the TOP_K largest |x| of each K-tile and their column indices in x (for the predictor's
    peak-times-weight feature; None when not computed)."""

    rms: torch.Tensor
    peak: torch.Tensor
    row_rms: torch.Tensor
    row_peak: torch.Tensor
    top_val: torch.Tensor | None = None
    top_idx: torch.Tensor | None = None


def tile_features(x: torch.Tensor, g: Geom) -> TileFeatures:
    M = x.shape[0]
    pad = g.kf * g.rows - g.K
    xp = torch.nn.functional.pad(x.float(), (0, pad)) if pad else x.float()
    xt = xp.view(M, g.kf, g.rows)
    lens = torch.full((g.kf,), float(g.rows))
    lens[-1] = g.K - (g.kf - 1) * g.rows
    sq = xt.square().sum(2)
    rms = (sq / lens.to(x.device)).sqrt()
    peak = xt.abs().amax(2)
    top = xt.abs().topk(min(TOP_K, g.rows), dim=2)
    idx = top.indices + (torch.arange(g.kf, device=x.device) * g.rows)[None, :, None]
    return TileFeatures(rms, peak, (sq.sum(1) / g.K).sqrt(), peak.amax(1), top.values, idx)


def safe_log2(v: torch.Tensor) -> torch.Tensor:
    return torch.log2(v.clamp_min(2.0**LOG2_FLOOR))


# ---------------------------------------------------------------------------------- float psums
def tile_psums(x: torch.Tensor, w: torch.Tensor, g: Geom, t: int) -> torch.Tensor:
    """Exact-as-float32 psum of K-tile ``t``: (M, N)."""
    k0, k1 = t * g.rows, min(g.K, (t + 1) * g.rows)
    return x[:, k0:k1] @ w[k0:k1]


def tile_absmax(p: torch.Tensor, g: Geom) -> torch.Tensor:
    """(M, N) -> (M, nt): max |p| over each N-tile's columns."""
    M = p.shape[0]
    pad = g.nt * g.cols - g.N
    pp = torch.nn.functional.pad(p.abs(), (0, pad)) if pad else p.abs()
    return pp.view(M, g.nt, g.cols).amax(2)


def oracle_ranges(x: torch.Tensor, w: torch.Tensor, g: Geom, semantics: str) -> torch.Tensor:
    """The true psum ranges (max |psum|) per tile: transfer (M, kf, nt) of each K-tile psum; buffer
    (M, nt) of the running sum over all K-tile prefixes. Float32, psum-domain units."""
    M = x.shape[0]
    if semantics == "transfer":
        out = torch.empty(M, g.kf, g.nt, device=x.device)
        for t in range(g.kf):
            out[:, t] = tile_absmax(tile_psums(x, w, g, t), g)
        return out
    run = torch.zeros(M, g.N, device=x.device)
    best = torch.zeros(M, g.nt, device=x.device)
    for t in range(g.kf):
        run += tile_psums(x, w, g, t)
        best = torch.maximum(best, tile_absmax(run, g))
    return best


# ---------------------------------------------------------------------------------- calibration stats
@dataclass
class CalibStats:
    """Statistics of one layer gathered over the calibration batches (psum-domain units).

    ``tile_max`` (kf, nt): max |p_t| over rows; ``tile_sum``/``tile_sumsq``/``tile_n``: moments of
    the K-tile psums per (t, j) (for ``sigma``); ``run_max``/``run_sum``/``run_sumsq``/``run_n``
    (nt,): the same for the running sums S_t of every prefix (buffer semantics); ``act_absmax``:
    max |x| in real units (before activation quantization); ``xs``: sampled rows of x (domain
    units) kept for the predictor fit."""

    g: Geom
    tile_max: torch.Tensor = field(init=False)
    tile_sum: torch.Tensor = field(init=False)
    tile_sumsq: torch.Tensor = field(init=False)
    tile_n: torch.Tensor = field(init=False)
    run_max: torch.Tensor = field(init=False)
    run_sum: torch.Tensor = field(init=False)
    run_sumsq: torch.Tensor = field(init=False)
    run_n: torch.Tensor = field(init=False)
    samples: list[torch.Tensor] = field(default_factory=list)
    batches: int = 0

    def __post_init__(self) -> None:
        kf, nt = self.g.kf, self.g.nt
        z = torch.zeros
        self.tile_max, self.tile_sum, self.tile_sumsq, self.tile_n = z(kf, nt), z(kf, nt), z(kf, nt), z(kf, nt)
        self.run_max, self.run_sum, self.run_sumsq, self.run_n = z(nt), z(nt), z(nt), z(nt)

    def _per_tile(self, v: torch.Tensor) -> torch.Tensor:
        """(M, N) -> (nt,) sums over rows and each N-tile's columns (float64 for stable moments)."""
        s = v.double().sum(0)
        pad = self.g.nt * self.g.cols - self.g.N
        if pad:
            s = torch.nn.functional.pad(s, (0, pad))
        return s.view(self.g.nt, self.g.cols).sum(1).float()

    def update(self, x: torch.Tensor, w: torch.Tensor, max_rows: int, gen: torch.Generator) -> None:
        g = self.g
        M = x.shape[0]
        ncol = torch.full((g.nt,), float(g.cols))
        ncol[-1] = g.N - (g.nt - 1) * g.cols
        run = torch.zeros(M, g.N)
        for t in range(g.kf):
            p = tile_psums(x, w, g, t)
            run += p
            self.tile_max[t] = torch.maximum(self.tile_max[t], tile_absmax(p, g).amax(0))
            self.tile_sum[t] += self._per_tile(p)
            self.tile_sumsq[t] += self._per_tile(p * p)
            self.tile_n[t] += ncol * M
            self.run_max = torch.maximum(self.run_max, tile_absmax(run, g).amax(0))
            self.run_sum += self._per_tile(run)
            self.run_sumsq += self._per_tile(run * run)
            self.run_n += ncol * M
        take = min(M, max_rows)
        idx = torch.randperm(M, generator=gen)[:take]
        self.samples.append(x[idx].clone())
        self.batches += 1

    def sample_rows(self, cap: int, gen: torch.Generator) -> torch.Tensor:
        xs = torch.cat(self.samples) if self.samples else torch.zeros(0, self.g.K)
        if xs.shape[0] > cap:
            xs = xs[torch.randperm(xs.shape[0], generator=gen)[:cap]]
        return xs


# ---------------------------------------------------------------------------------- steps
def hw_steps(log2_step: torch.Tensor, form: str, integer: bool, rounding: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round continuous log2 steps to hardware form; returns (inv_step float32, mult int64, shift int64).

    ``form='pow2'``: step = 2^e, e an integer (``rounding`` 'ceil' or 'nearest'); ``'mult_shift'``:
    step = 2^shift / mult with a 16-bit multiplier in [2^14, 2^15). In the integer domain the
    shift is kept in 0..63 (a step below 1 is a multiplier > 1 with shift 0); in the float domain
    shifts may be negative (mult/shift then only describe the float step)."""
    e = log2_step.double()
    if form == "pow2":
        ei = torch.ceil(e - 1e-9) if rounding == "ceil" else torch.round(e)
        ei = ei.clamp(-200, 200)
        if integer:
            ei = ei.clamp(-14, 63)
            shift = ei.clamp_min(0)
            mult = torch.exp2(shift - ei)
        else:
            shift, mult = ei, torch.ones_like(ei)
    else:
        s = torch.exp2(e.clamp(-200, 200))
        shift = torch.floor(e) + 15
        if integer:
            shift = shift.clamp(0, 63)
        mult = torch.round(torch.exp2(shift) / s)
        if rounding == "ceil":  # never a smaller step than asked: mult rounded down
            mult = torch.floor(torch.exp2(shift) / s * (1 + 1e-12))
        mult = mult.clamp(1, 32767)
    inv = (mult / torch.exp2(shift)).float()
    return inv, mult.long(), shift.long()


# ---------------------------------------------------------------------------------- integer path
@dataclass
class IntGemmResult:
    """Integer-exact GEMM result. ``value``: float64 (M, N) in integer psum units (dequantized);
    ``acc``: int64 (M, N) accumulator in quantizer LSBs when the step of each output is the same for
    all K-tiles (always for buffer semantics), else None."""

    value: np.ndarray
    acc: np.ndarray | None


def _expand(v: np.ndarray, g: Geom) -> np.ndarray:
    """(M, nt) -> (M, N) repeating each N-tile value over its columns."""
    return np.repeat(v, g.cols, axis=1)[:, : g.N]


def _quantize_arr(p: np.ndarray, mult: np.ndarray, shift: np.ndarray, bits: int) -> np.ndarray:
    """sim.quant.quantize with per-element multiplier and shift (grouped by shift value)."""
    big = int(np.abs(p).max(initial=0)) * int(np.abs(mult).max(initial=0))
    if big >= 1 << 62:
        raise OverflowError("psum x multiplier exceeds int64")
    y = p * mult
    out = np.empty_like(y)
    for s in np.unique(shift):
        m = shift == s
        out[m] = squant.rne_shift(y[m], int(s))
    return squant.saturate(out, bits)


def int_tiled_gemm(
    a: np.ndarray,
    b: np.ndarray,
    rows: int,
    cols: int,
    bits: int,
    mult: np.ndarray | int,
    shift: np.ndarray | int,
    semantics: str = "buffer",
    overflow: str = "saturate",
    pe_psum_bits: int = 32,
) -> IntGemmResult:
    """Integer-exact psum-quantized GEMM, bit for bit the cycle-level model's WS accumulation.

    ``a`` (M x K) and ``b`` (K x N) integer arrays; each K-tile psum is computed exactly, brought to
    the PE psum width (``ovf(., pe_psum_bits, overflow)``; equal to the per-PE chain whenever the chain
    does not overflow mid-column, always true for int8 data and pe_psum_bits >= 16 + log2(rows)),
    quantized by ``sim.quant.quantize`` semantics with ``(mult, shift)`` (scalars, or arrays of shape
    (M, nt) for buffer / (M, kf, nt) for transfer), then

    * buffer: ``acc <- ovf(acc + q, bits, overflow)`` (first K-tile: ``acc <- q``), as
      ``run_gemm(..., psum_buffer_bits=bits, quant=(mult, shift))``;
    * transfer: the quantizer output is ``saturate``-d (or ``wrap``-ped) to ``bits``, and
      accumulated exactly (high precision).
    """
    a = np.asarray(a).astype(np.int64)
    b = np.asarray(b).astype(np.int64)
    M, K = a.shape
    N = b.shape[1]
    g = Geom(K, N, rows, cols)
    shp = (M, g.nt) if semantics == "buffer" else (M, g.kf, g.nt)
    mult_a = np.broadcast_to(np.asarray(mult, dtype=np.int64), shp)
    shift_a = np.broadcast_to(np.asarray(shift, dtype=np.int64), shp)
    exact_f64 = rows * int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0)) < 2**52
    acc = np.zeros((M, N), dtype=np.int64)
    val = np.zeros((M, N), dtype=np.float64)
    uniform = semantics == "buffer" or bool((mult_a == mult_a[:, :1]).all() and (shift_a == shift_a[:, :1]).all())
    for t in range(g.kf):
        k0, k1 = t * rows, min(K, (t + 1) * rows)
        if exact_f64:
            p = np.rint(a[:, k0:k1].astype(np.float64) @ b[k0:k1].astype(np.float64)).astype(np.int64)
        else:
            p = a[:, k0:k1] @ b[k0:k1]
        p = squant.ovf(p, pe_psum_bits, overflow)
        if semantics == "buffer":
            mm, ss = _expand(mult_a, g), _expand(shift_a, g)
            q = _quantize_arr(p, mm, ss, bits)
            acc = q if t == 0 else squant.ovf(acc + q, bits, overflow)
        else:
            mm, ss = _expand(mult_a[:, t], g), _expand(shift_a[:, t], g)
            q = _quantize_arr(p, mm, ss, 62)  # rne(x*mult, shift), then B-bit overflow handling
            q = squant.ovf(q, bits, overflow)
            acc += q
            val += q.astype(np.float64) * (np.exp2(ss.astype(np.float64)) / mm.astype(np.float64))
    if semantics == "buffer":
        mm, ss = _expand(mult_a, g), _expand(shift_a, g)
        val = acc.astype(np.float64) * (np.exp2(ss.astype(np.float64)) / mm.astype(np.float64))
    return IntGemmResult(val, acc if uniform else None)


def log2_qmax(bits: int) -> float:
    """log2 of the largest positive B-bit code, 2^(B-1) - 1."""
    return math.log2(2.0 ** (bits - 1) - 1.0)
