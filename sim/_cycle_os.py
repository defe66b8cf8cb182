"""Cycle-stepped output-stationary array (numba kernel).

Registers (explicit, updated once per cycle in place; rows are visited bottom-up so the downward
shift reads the previous cycle's value, and within a row the rightward shift runs right-to-left):

* ``a[r, c]``         A operand register (int32), moves one PE right per cycle; PE(r, 0) latches the
  skewed edge input ``A[i*R + r, k]`` at cycle ``o(f) + k + r``.
* ``b[r, c]``         B operand register (int32), moves one PE down per cycle; PE(0, c) latches the
  skewed edge input ``B[k, j*C + c]`` at cycle ``o(f) + k + c``.
* ``acc[bank, r, c]`` the PE's P-bit accumulator (int64): ``acc <- ovf_P(acc + a * b)``; at k = 0
  the accumulator starts from 0. ``nbanks`` = 1 (scalesim) or 2 (double-buffered accumulators,
  fold f uses bank f % 2 so a fold's drain overlaps the next fold's compute).

Schedule (the contract of :mod:`npukit.sim.cycle`): fold ``f = i * nf + j`` (row fold i outer), operands k reach
PE(r, c) at ``o(f) + k + r + c`` with ``o(f) = f * period``, ``period`` = ``R + C + K - 2``
(scalesim) or ``K`` (double-buffered). The output of PE(r, c) is final at ``o(f) + K - 1 + r + c``;
that value is captured as the output at that cycle (the drain that shifts finished outputs out is
not modelled, as the contract does not count it, and its register writes are not counted).

Gating: only PEs mapped in a fold (``r < mu``, ``c < nu``) latch data; every other register holds its
value, so visiting only the active segments of each row is exact. In double-buffered timing a row
can hold several folds at once (K < C); each fold's column segment is stepped, rightmost (oldest)
first. Idle cycles are still stepped.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._cycle_ws import fold_tables, ovf_bounds

N_MAC, N_A_W, N_B_W, N_ACC_W, N_A_READ, N_B_READ, LAST_CYCLE, LAST_OUT, N_COUNTERS = range(9)


@njit(cache=True, inline="always")
def _acc_row(acc, a, b, bank, r, lo_c, hi_c, plo, phi, phalf, pmask, sat):
    """acc[bank, r, c] <- ovf_P(acc[bank, r, c] + a[r, c] * b[r, c]) for c in [lo_c, hi_c].

    (unsigned column indices: numba then skips negative-index wraparound and the loop vectorizes)"""
    lo = np.uint64(lo_c)
    hi = np.uint64(hi_c + 1)
    if sat:
        for c in range(lo, hi):
            s = acc[bank, r, c] + np.int64(a[r, c]) * np.int64(b[r, c])
            acc[bank, r, c] = phi if s > phi else (plo if s < plo else s)
    else:
        for c in range(lo, hi):
            s = acc[bank, r, c] + np.int64(a[r, c]) * np.int64(b[r, c])
            acc[bank, r, c] = ((s + phalf) & pmask) - phalf


@njit(cache=True)
def run_os(A, B, R, C, period, nbanks, P, sat, out, out_cycle, counts):
    """Step an output-stationary GEMM ``A (M x K) @ B (K x N)`` cycle by cycle.

    A, B: int32. out (P-bit final accumulator values), out_cycle: (M, N) int64, written.
    counts: int64[N_COUNTERS], written."""
    M, K = A.shape
    N = B.shape[1]
    # fold f = i * nf + j (row fold i outer)
    fi, fj, fmu, fnu = fold_tables(M, R, N, C)
    F = fi.shape[0]

    a = np.zeros((R, C), np.int32)
    b = np.zeros((R, C), np.int32)
    acc = np.zeros((nbanks, R, C), np.int64)

    plo, phi, phalf, pmask = ovf_bounds(P)

    n_mac = 0
    n_a_read = 0
    n_b_read = 0
    last_out = -1

    end = (F - 1) * period + K + R + C - 3
    for t in range(end + 1):
        # row r sees x = t - r at column 0 (d = x - c at column c); folds overlapping the row's
        # d-window [x - C + 1, x] are f_lo..f_hi.
        x = t - (R - 1)
        f_hi = x // period
        f_lo = -((-(x - C + 1 - K + 1)) // period)
        for r in range(R - 1, -1, -1):
            fa = max(f_lo, 0)
            fb = min(f_hi, F - 1)
            for f in range(fa, fb + 1):
                if r >= fmu[f]:
                    continue
                e = x - f * period  # k at column 0
                nu = fnu[f]
                hi_c = min(nu - 1, e)
                lo_c = max(0, e - K + 1)
                if lo_c > hi_c:
                    continue
                cnt = hi_c - lo_c + 1
                i = fi[f]
                j = fj[f]
                # A moves right; PE(r, 0) latches A[i*R + r, e]
                if lo_c == 0:
                    prev = A[i * R + r, e]
                    n_a_read += 1
                else:
                    prev = a[r, lo_c - 1]
                for c in range(np.uint64(lo_c), np.uint64(hi_c + 1)):
                    cur = a[r, c]
                    a[r, c] = prev
                    prev = cur
                # B moves down; PE(0, c) latches B[e - c, j*C + c]
                if r == 0:
                    for c in range(lo_c, hi_c + 1):
                        b[0, c] = B[e - c, j * C + c]
                    n_b_read += cnt
                else:
                    for c in range(np.uint64(lo_c), np.uint64(hi_c + 1)):
                        b[r, c] = b[r - 1, c]
                bank = f % nbanks
                if e <= hi_c:
                    acc[bank, r, e] = 0  # k == 0 at column e: the accumulator starts from 0
                _acc_row(acc, a, b, bank, r, lo_c, hi_c, plo, phi, phalf, pmask, sat)
                n_mac += cnt
                if e - K + 1 >= 0:
                    # k == K-1 at column lo_c: this output is final now
                    out[i * R + r, j * C + lo_c] = acc[bank, r, lo_c]
                    out_cycle[i * R + r, j * C + lo_c] = t
                    last_out = max(last_out, t)
            x += 1
            while (f_hi + 1) * period <= x:
                f_hi += 1
            while f_lo * period + K - 1 < x - C + 1:
                f_lo += 1
    counts[N_MAC] = n_mac
    counts[N_A_W] = n_mac
    counts[N_B_W] = n_mac
    counts[N_ACC_W] = n_mac
    counts[N_A_READ] = n_a_read
    counts[N_B_READ] = n_b_read
    counts[LAST_CYCLE] = end
    counts[LAST_OUT] = last_out
