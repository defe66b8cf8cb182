"""numba kernels of SCALE-Sim's CALC-mode accounting (:mod:`npukit.sim._scalesim_memory`): the miss streams of
its read buffers and its ofmap write buffer, replayed request by request. Imported only when a closed form
does not apply, so that a run which needs none of them does not pay numba's import."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _addr(y0, x0, dy, dx, ch, m, k, H, W, C):  # pragma: no cover - numba
    y = y0[m] + dy[k]
    x = x0[m] + dx[k]
    if y >= H or x >= W:
        return -1
    return (y * W + x) * C + ch[k]


@njit(cache=True, inline="always")
def _miss(stamp, a, misses, E):  # pragma: no cover - numba
    """One request for address ``a`` of a read buffer that slides every ``E`` misses (0: never):
    the new miss count. The window is ``misses // E``, so ``stamp[a]`` says in which window ``a`` was
    last fetched; an address not fetched in the current window is a miss (a DRAM read)."""
    window = misses // E if E > 0 else 0
    if stamp[a] != window:
        stamp[a] = window
        return misses + 1
    return misses


@njit(cache=True)
def _misses_skewed_input(y0, x0, dy, dx, ch, H, W, Cin, R, nf, transposed, E):  # pragma: no cover - numba
    """Misses of the input stream. ws (transposed=False): per fold (column fold outer, K fold inner) the
    tile X[:, k-fold] (M rows x R lanes, skewed); os (transposed=True): X[m-fold, :]^T (K rows x R lanes)."""
    M, K = y0.shape[0], dy.shape[0]
    stamp = np.full(H * W * Cin, -1, np.int64)
    misses = 0
    outer = nf
    inner = (K + R - 1) // R if not transposed else (M + R - 1) // R
    T = M if not transposed else K
    for _fc in range(outer):
        for fr in range(inner):
            used = min(R, (K if not transposed else M) - fr * R)
            for r in range(T + R - 1):
                lo = max(0, r - T + 1)
                hi = min(used - 1, r)
                for c in range(lo, hi + 1):
                    t = r - c
                    if transposed:
                        a = _addr(y0, x0, dy, dx, ch, fr * R + c, t, H, W, Cin)
                    else:
                        a = _addr(y0, x0, dy, dx, ch, t, fr * R + c, H, W, Cin)
                    if a >= 0:
                        misses = _miss(stamp, a, misses, E)
    return misses


@njit(cache=True)
def _misses_is_input(y0, x0, dy, dx, ch, H, W, Cin, R, C, E):  # pragma: no cover - numba
    """is: per fold (M fold of C lanes outer, K fold of R rows inner) the tile X^T[k-fold, m-fold],
    rows flipped, not skewed."""
    M, K = y0.shape[0], dy.shape[0]
    stamp = np.full(H * W * Cin, -1, np.int64)
    misses = 0
    for fc in range((M + C - 1) // C):
        cu = min(C, M - fc * C)
        for fr in range((K + R - 1) // R):
            ru = min(R, K - fr * R)
            for i in range(R):
                rr = R - 1 - i
                if rr >= ru:
                    continue
                for c in range(cu):
                    a = _addr(y0, x0, dy, dx, ch, fc * C + c, fr * R + rr, H, W, Cin)
                    if a >= 0:
                        misses = _miss(stamp, a, misses, E)
    return misses


@njit(cache=True)
def _misses_os_filter(K, N, C, mf, E):  # pragma: no cover - numba
    stamp = np.full(K * N, -1, np.int64)
    misses = 0
    for fc in range((N + C - 1) // C):
        cu = min(C, N - fc * C)
        for _fr in range(mf):
            for r in range(K + C - 1):
                lo = max(0, r - K + 1)
                hi = min(cu - 1, r)
                for c in range(lo, hi + 1):
                    a = (fc * C + c) * K + (r - c)
                    misses = _miss(stamp, a, misses, E)
    return misses


@njit(cache=True)
def _misses_is_filter(K, N, R, mf, E):  # pragma: no cover - numba
    stamp = np.full(K * N, -1, np.int64)
    misses = 0
    for _fc in range(mf):
        for fr in range((K + R - 1) // R):
            ru = min(R, K - fr * R)
            for r in range(N + R - 1):
                lo = max(0, r - N + 1)
                hi = min(ru - 1, r)
                for c in range(lo, hi + 1):
                    a = (r - c) * K + fr * R + c
                    misses = _miss(stamp, a, misses, E)
    return misses


@njit(cache=True)
def _ofmap_drain(fold_L, fold_ru, fold_rows, P, T, R, os_mode, bw, active, drain_size):  # pragma: no cover
    """Replay SCALE-Sim's write buffer over every row (cycle) of the ofmap demand.

    Per fold f: ``fold_L[f]`` valid lanes, ``fold_ru[f]`` valid rows (os), ``fold_rows[f]`` cycles;
    ``P`` prefix rows, ``T`` temporal rows. Returns (DRAM words written, stall cycles)."""
    lines_per_drain = (drain_size + bw - 1) // bw
    free_space = active + drain_size
    line_idx, n_lines, start = 0, 0, 0
    drain_end, stall_total, cycle, written = 0, 0, 0, 0
    cap = 16
    p_idx = np.empty(cap, np.int64)
    p_val = np.empty(cap, np.int64)
    n_partial, p_ptr = 0, 0
    for f in range(fold_L.shape[0]):
        L, ru = fold_L[f], fold_ru[f]
        for r in range(fold_rows[f]):
            if os_mode:
                lo = max(0, r - P - (R - 1))
                hi = min(L - 1, r - P - (R - ru))
            else:
                lo = max(0, r - P - T + 1)
                hi = min(L - 1, r - P)
            rem = hi - lo + 1 if hi >= lo else 0
            cur = cycle + stall_total
            row_start = cur
            while rem > 0:
                if cur < drain_end:
                    if free_space > 1:
                        k = min(rem, free_space - 1)
                    else:
                        k = 1
                    free_space -= k
                    line_idx += k
                    n_lines += line_idx // bw
                    line_idx %= bw
                    rem -= k
                    if free_space <= 0:
                        cur = drain_end
                else:
                    k = free_space - active + 1
                    if k < 1:
                        k = 1
                    triggered = k <= rem
                    if not triggered:
                        k = rem
                    free_space -= k
                    line_idx += k
                    n_lines += line_idx // bw
                    line_idx %= bw
                    rem -= k
                    if triggered:
                        if line_idx != 0:
                            if n_partial == cap:
                                cap *= 2
                                p_idx = np.concatenate((p_idx, np.empty(cap - n_partial, np.int64)))
                                p_val = np.concatenate((p_val, np.empty(cap - n_partial, np.int64)))
                            p_idx[n_partial] = n_lines
                            p_val[n_partial] = line_idx
                            n_partial += 1
                            n_lines += 1
                            line_idx = 0
                        lines = min(lines_per_drain, n_lines - start)
                        if lines > 0:
                            last = start + lines - 1
                            while p_ptr < n_partial and p_idx[p_ptr] < last:
                                p_ptr += 1
                            v = bw
                            if p_ptr < n_partial and p_idx[p_ptr] == last:
                                v = p_val[p_ptr]
                            count = lines * bw - (bw - v)
                            written += count
                            free_space += count
                            start += lines
                            drain_end = cur + lines - 1
            stall_total += cur - row_start
            cycle += 1
    # the final drain of everything left
    if line_idx != 0:
        if n_partial == cap:
            p_idx = np.concatenate((p_idx, np.empty(1, np.int64)))
            p_val = np.concatenate((p_val, np.empty(1, np.int64)))
        p_idx[n_partial] = n_lines
        p_val[n_partial] = line_idx
        n_partial += 1
        n_lines += 1
    while start < n_lines:
        lines = min(lines_per_drain, n_lines - start)
        last = start + lines - 1
        while p_ptr < n_partial and p_idx[p_ptr] < last:
            p_ptr += 1
        v = bw
        if p_ptr < n_partial and p_idx[p_ptr] == last:
            v = p_val[p_ptr]
        written += lines * bw - (bw - v)
        start += lines
    return written, stall_total
