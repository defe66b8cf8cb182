"""Cycle-stepped weight-stationary array (numba kernel); also runs input-stationary (see _cycle_is).

Registers (all explicit, updated once per clock cycle in place; rows are visited bottom-up and the
activation shift within a row carries each register's old value to its right neighbour, so every
read sees the previous cycle's value):

* ``w[bank, r, c]``  weight register(s) of PE(r, c) (int32). ``nbanks`` = 1 (scalesim timing) or 2
  (double-buffered: the shadow bank is loaded while the other computes). A fold's weights are
  written row by row, row ``rho`` at cycle ``load0(f) + rho`` (row-addressed load, ``R`` cycles).
* ``act[r, c]``      activation register (int32): PE(r, c) latches its left neighbour's value of the
  previous cycle (PE(r, 0) latches the skewed edge input) and passes it right the next cycle.
* ``ps[r, c]``       psum register (int64): ``ps[r, c] <- ovf_P(ps[r-1, c] + act[r, c] * w[r, c])``
  (row 0 adds to 0); the value latched by row R-1 leaves the array that cycle.

Schedule (the contract of :mod:`npukit.sim.cycle`): fold ``f = j * kf + i`` (column fold j outer, K-fold i inner),
``load0(f) = f * period`` and the input of row r, activation m enters PE(r, 0) at
``R + f * period + m + r``; ``period`` = ``2R + C + M - 2`` (scalesim) or ``M + R + C - 2``
(double-buffered). Because ``period >= M + C - 1`` a row holds at most one fold's activations in any
cycle, so the weight bank a row uses (the tag that travels with the activations in hardware) is that
fold's. The input skew is the per-row delay ``r`` of this schedule (skew FIFOs are not modelled).

Gating (what "active" means, and the only place cycles/PEs are skipped): a register is written only
when it latches valid data that some output needs. Activations are latched in PEs of mapped rows
``r < ku`` and columns ``c < nu`` of the fold; psums in every row of the mapped columns (rows
``r >= ku`` pass the psum down unchanged, adding ``a * 0``); weights in mapped PEs only. Every other
register holds its value, so visiting only the active wavefront of each row is exact. Idle cycles
are still stepped (cost O(R) each). The contract's "unused rows/columns hold weight 0" is
observationally the same: an unmapped row gets no activation (adds 0) and an unmapped column's
psums are never read, so their weight registers are left untouched and not counted.

Arithmetic is int64: a P <= 62-bit psum plus a product of two <= 32-bit operands cannot overflow
before ``ovf_P`` is applied. Column loops use unsigned indices so numba emits no negative-index
wraparound and LLVM vectorizes them.

Outputs: the psum leaving row R-1 for output (m, n) in K-fold i goes through the quantizer and the
accumulator at the same cycle: ``acc <- ovf_B(q)`` for i == 0, else ``ovf_B(acc + q)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# counter slots returned by the kernel
N_MAC, N_ACT_W, N_PSUM_W, N_STAT_W, N_STREAM_READ, N_STAT_READ, N_PSUM_RW, LAST_CYCLE, LAST_OUT, N_COUNTERS = range(10)


@njit(cache=True, inline="always")
def ovf(s: int, lo: int, hi: int, half: int, mask: int, sat: bool) -> int:
    """Saturate to [lo, hi] or wrap (two's complement, ``mask = 2**bits - 1``, ``half = 2**(bits-1)``)."""
    if sat:
        if s > hi:
            return hi
        if s < lo:
            return lo
        return s
    return ((s + half) & mask) - half


@njit(cache=True, inline="always")
def ovf_bounds(bits: int) -> tuple[int, int, int, int]:
    """(lo, hi, half, mask) of a ``bits``-bit two's-complement value, the arguments :func:`ovf` takes."""
    one = np.int64(1)
    half = one << (bits - 1)
    return -half, half - 1, half, half - 1 + half


@njit(cache=True)
def fold_tables(n_out: int, t_out: int, n_in: int, t_in: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per fold ``f = o * fin + q`` (outer tile o of ``n_out`` in tiles of ``t_out``, inner tile q of ``n_in``
    in tiles of ``t_in``, ``fin`` inner tiles): int64 arrays of o, q and the used extents of both tiles."""
    fo = (n_out + t_out - 1) // t_out
    fin = (n_in + t_in - 1) // t_in
    F = fo * fin
    io = np.empty(F, np.int64)
    ii = np.empty(F, np.int64)
    uo = np.empty(F, np.int64)
    ui = np.empty(F, np.int64)
    for f in range(F):
        o = f // fin
        q = f - o * fin
        io[f] = o
        ii[f] = q
        uo[f] = min(t_out, n_out - o * t_out)
        ui[f] = min(t_in, n_in - q * t_in)
    return io, ii, uo, ui


@njit(cache=True, inline="always")
def quant_acc(x: int, has_q: bool, mult: int, shift: int, qlo: int, qhi: int) -> int:
    """The psum quantizer (npukit.sim.quant.quantize) on one int64 psum; identity when not has_q."""
    if not has_q:
        return x
    y = x * mult
    if shift > 0:
        r = y >> shift
        rem = y & ((np.int64(1) << (shift - 1)) - 1 + (np.int64(1) << (shift - 1)))
        half = np.int64(1) << (shift - 1)
        if rem > half or (rem == half and (r & 1) == 1):
            r += 1
        y = r
    if y > qhi:
        return qhi
    if y < qlo:
        return qlo
    return y


@njit(cache=True, inline="always")
def _mac_row(ps, act, w, bank, r, lo_c, hi_c, plo, phi, phalf, pmask, sat):
    """ps[r, c] <- ovf_P(ps[r-1, c] + act[r, c] * w[bank, r, c]) for c in [lo_c, hi_c] (row 0 adds to 0)."""
    lo = np.uint64(lo_c)
    hi = np.uint64(hi_c + 1)
    if r == 0:
        if sat:
            for c in range(lo, hi):
                s = np.int64(act[0, c]) * np.int64(w[bank, 0, c])
                ps[0, c] = phi if s > phi else (plo if s < plo else s)
        else:
            for c in range(lo, hi):
                s = np.int64(act[0, c]) * np.int64(w[bank, 0, c])
                ps[0, c] = ((s + phalf) & pmask) - phalf
    elif sat:
        for c in range(lo, hi):
            s = ps[r - 1, c] + np.int64(act[r, c]) * np.int64(w[bank, r, c])
            ps[r, c] = phi if s > phi else (plo if s < plo else s)
    else:
        for c in range(lo, hi):
            s = ps[r - 1, c] + np.int64(act[r, c]) * np.int64(w[bank, r, c])
            ps[r, c] = ((s + phalf) & pmask) - phalf


@njit(cache=True)
def run_ws(A, B, R, C, period, nbanks, P, sat, Bbits, has_q, mult, shift, want_fp, fp, out, out_cycle, counts):
    """Step a weight-stationary GEMM ``A (M x K) @ B (K x N)`` cycle by cycle.

    A, B: int32. out, out_cycle: (M, N) int64, written. fp: (F, M, C) int64 fold psums when
    ``want_fp``. counts: int64[N_COUNTERS], written. Returns nothing."""
    M, K = A.shape
    N = B.shape[1]
    # per-fold tables: fold f = j * kf + i (column fold j outer, K-fold i inner)
    fj, fi, fnu, fku = fold_tables(N, C, K, R)
    F = fi.shape[0]

    act = np.zeros((R, C), np.int32)
    w = np.zeros((nbanks, R, C), np.int32)
    ps = np.zeros((R, C), np.int64)

    plo, phi, phalf, pmask = ovf_bounds(P)
    blo, bhi, bhalf, bmask = ovf_bounds(Bbits)

    n_mac = 0
    n_act = 0
    n_psum = 0
    n_stat = 0
    n_stream_read = 0
    n_psum_rw = 0
    last_out = -1

    end = 2 * R + M + C - 3 + (F - 1) * period  # last cycle of the last fold's window
    for t in range(end + 1):
        # ---- weight load: fold fl writes row rho of its bank at cycle fl * period + rho
        fl = t // period
        rho = t - fl * period
        if fl < F and rho < fku[fl]:
            i = fi[fl]
            j = fj[fl]
            nu = fnu[fl]
            bank = fl % nbanks
            for c in range(nu):
                w[bank, rho, c] = B[i * R + rho, j * C + c]
            n_stat += nu
        # ---- the array, rows bottom-up; row r sees tau = t - r - R relative to fold 0's input origin
        tau = t - (R - 1) - R
        f = tau // period
        u = tau - f * period
        for r in range(R - 1, -1, -1):
            if 0 <= f < F:
                nu = fnu[f]
                if u <= M + nu - 2:
                    lo_c = max(0, u - M + 1)
                    hi_c = min(nu - 1, u)
                    cnt = hi_c - lo_c + 1
                    ku = fku[f]
                    if r < ku:
                        # activations move one PE right; PE(r, 0) takes the skewed edge input A[u, i*R + r]
                        # (forward pass carrying the left neighbour's old value; each register written once)
                        if lo_c == 0:
                            prev = A[u, fi[f] * R + r]
                            n_stream_read += 1
                        else:
                            prev = act[r, lo_c - 1]
                        for c in range(np.uint64(lo_c), np.uint64(hi_c + 1)):
                            cur = act[r, c]
                            act[r, c] = prev
                            prev = cur
                        _mac_row(ps, act, w, f % nbanks, r, lo_c, hi_c, plo, phi, phalf, pmask, sat)
                        n_mac += cnt
                        n_act += cnt
                    else:
                        # unmapped row of the fold: the psum passes down (adds a * 0)
                        for c in range(np.uint64(lo_c), np.uint64(hi_c + 1)):
                            ps[r, c] = ps[r - 1, c]
                    n_psum += cnt
                    if r == R - 1:
                        # psums leaving the bottom: output (m, j*C + c) of K-fold i, m = u - c
                        i = fi[f]
                        nb0 = fj[f] * C
                        for c in range(lo_c, hi_c + 1):
                            m = u - c
                            x = ps[r, c]
                            q = quant_acc(x, has_q, mult, shift, blo, bhi)
                            if i == 0:
                                out[m, nb0 + c] = ovf(q, blo, bhi, bhalf, bmask, sat)
                            else:
                                out[m, nb0 + c] = ovf(out[m, nb0 + c] + q, blo, bhi, bhalf, bmask, sat)
                                n_psum_rw += 1
                            out_cycle[m, nb0 + c] = t
                            last_out = t
                            if want_fp:
                                fp[f, m, c] = x
            u += 1
            if u == period:
                u = 0
                f += 1
    counts[N_MAC] = n_mac
    counts[N_ACT_W] = n_act
    counts[N_PSUM_W] = n_psum
    counts[N_STAT_W] = n_stat
    counts[N_STREAM_READ] = n_stream_read
    counts[N_STAT_READ] = n_stat
    counts[N_PSUM_RW] = n_psum_rw
    counts[LAST_CYCLE] = end
    counts[LAST_OUT] = last_out
