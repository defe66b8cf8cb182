"""Cycle-stepped input-stationary array: the weight-stationary kernel with the roles swapped.

The contract defines input stationary as weight stationary with A^T and B exchanged: PE(r, c) holds
``A[j*C + c, i*R + r]`` (the stationary register, loaded row by row like ws weights), ``B[i*R + r, n]``
enters row r at local ``R + n + r`` and moves right, psums move down and output ``(j*C + c, n)`` leaves
at local ``2R - 1 + n + c``. That is exactly :func:`npukit.sim._cycle_ws.run_ws` stepping
``B^T (N x K) @ A^T (K x M)``, whose output (N x M) is the transpose of ``A @ B``; so this module
feeds the same register-level kernel the transposed operands and transposes the results back.
The register kinds swap for the ledger: the stationary registers hold inputs, the moving ones weights.
"""

from __future__ import annotations

import numpy as np

from ._cycle_ws import run_ws


def run_is(A, B, R, C, period, nbanks, P, sat, Bbits, has_q, mult, shift, want_fp, counts):
    """Step an input-stationary GEMM; returns (out (M x N), out_cycle (M x N), fold psums (F, N, C)).

    ``period`` is the is fold period (``2R + C + N - 2`` scalesim, ``N + R + C - 2`` double-buffered)."""
    M, K = A.shape
    N = B.shape[1]
    a_t = np.ascontiguousarray(B.T)  # streams (the ws "A": N x K)
    b_t = np.ascontiguousarray(A.T)  # stationary (the ws "B": K x M)
    out_t = np.zeros((N, M), np.int64)
    cyc_t = np.full((N, M), -1, np.int64)
    F = -(-K // R) * -(-M // C)
    fp = np.zeros((F, N, C) if want_fp else (1, 1, 1), np.int64)
    run_ws(a_t, b_t, R, C, period, nbanks, P, sat, Bbits, has_q, mult, shift, want_fp, fp, out_t, cyc_t, counts)
    return out_t.T.copy(), cyc_t.T.copy(), fp
