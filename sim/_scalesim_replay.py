"""SCALE-Sim 3.0.0's memory system replayed request by request (numba): every report column, CALC and USER.

SCALE-Sim (``scalesim/memory/double_buffered_scratchpad_mem.py``) walks its three demand matrices one
row (one cycle) at a time; this module walks the same rows in the same order, generating each address
from the layer's geometry instead of building the matrices, and applies the same rules:

* **Rows.** Folds column-fold outer, row-fold inner; per fold ws/is ``2R + C + T - 2`` rows, os
  ``T + R + C - 2`` (T: ws M, is N, os K). Row ``i`` is issued at cycle ``i + stalls so far``; the
  stall of a row is the largest of its ifmap, filter and ofmap stalls (a read stall can be negative in
  USER mode, as SCALE-Sim's ``read_buffer.service_reads`` adds a negative head-room once and a positive
  one twice; the max with the ofmap's stall >= 0 keeps the row's stall >= 0).
* **CALC reads** (``read_buffer_estimate_bw.py``): sets of ``floor(S / 100)`` missed addresses; every
  50 sets the window slides (older sets forgotten) and that set's cycle is an event. DRAM trace: the
  first 50 sets are fetched before the first request at 10 words/cycle, each later batch over the
  cycles between two events; with no event all sets are fetched in the cycles before cycle 0.
* **USER reads** (``read_buffer.py``): the operand's prefetch matrix (its unique fold tiles, SCALE-Sim's
  order) cut into lines of ``ceil(S / 100)`` valid words; half the buffer's lines are the active window,
  the next ``ceil(S/2 / 100)`` lines the prefetch window. A request not in the active window moves both
  windows (circularly) by one prefetch window and fetches ``ceil(S/2 / bw)`` request lines of ``bw``
  words (``bw`` = the ``[layout]`` bank bandwidth), counted whole (``DRAM Reads`` = lines x bw) and
  finishing ``lines + 1`` cycles after the previous fetch. The first ``ceil(S/2 / bw)`` lines are
  fetched in the cycles before cycle 0.
* **Ofmap** (``write_buffer.py``): outputs fill lines of ``bw`` words (CALC: the array width; USER:
  ``Bandwidth``); above half the buffer with no drain in flight the partial line closes and half a
  buffer of lines drains, one line a cycle; a write that finds the buffer full waits for the drain.
  At the end every line left drains from the last row's cycle on.

Returned per layer (one GEMM): Total Cycles, Stall Cycles, SRAM start/stop cycles of the three
operands (first and last row with a request, at its serviced cycle), DRAM reads/writes and their
start/stop cycles. Checked against SCALE-Sim itself: ``tests/test_scalesim_replay.py`` and
``benchmarks/bench_vs_scalesim.py``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from numba import njit

from ._scalesim_memory import _input_addresses, scalesim_shape
from .arch import Arch
from .workload import Layer

DF_CODE = {"ws": 0, "os": 1, "is": 2}
FIELDS = ("total_cycles", "stall_cycles",
          "sram_ifmap_start", "sram_ifmap_stop", "sram_filter_start", "sram_filter_stop",
          "sram_ofmap_start", "sram_ofmap_stop",
          "dram_ifmap_start", "dram_ifmap_stop", "dram_ifmap_reads",
          "dram_filter_start", "dram_filter_stop", "dram_filter_reads",
          "dram_ofmap_start", "dram_ofmap_stop", "dram_ofmap_writes")
CALC_READ_BW = 10  # words/cycle SCALE-Sim's CALC mode assumes for its read buffers (single_layer_sim.py)


@njit(cache=True, inline="always")
def _x(g, m, k):  # pragma: no cover - numba
    y0, x0, dy, dx, ch, H, W, Cin = g
    y = y0[m] + dy[k]
    x = x0[m] + dx[k]
    if y >= H or x >= W:
        return -1
    return (y * W + x) * Cin + ch[k]


@njit(cache=True, inline="always")
def _ifmap(df, g, fr, fc, row, lane, R, C, M, K):  # pragma: no cover - numba
    if df == 0:
        t, k = row - lane - R, fr * R + lane
        return _x(g, t, k) if 0 <= t < M and k < K else -1
    if df == 1:
        m = fr * R + lane
        return _x(g, m, row - lane) if 0 <= row - lane < K and m < M else -1
    k, m = fr * R + R - 1 - row, fc * C + lane
    return _x(g, m, k) if row < R and k < K and m < M else -1


@njit(cache=True, inline="always")
def _filter(df, fr, fc, row, lane, R, C, N, K):  # pragma: no cover - numba
    if df == 0:
        k, n = fr * R + R - 1 - row, fc * C + lane
        return n * K + k if row < R and k < K and n < N else -1
    if df == 1:
        t, n = row - lane, fc * C + lane
        return n * K + t if 0 <= t < K and n < N else -1
    t, k = row - lane - R, fr * R + lane
    return t * K + k if 0 <= t < N and k < K else -1


@njit(cache=True, inline="always")
def _ofmap(df, fr, fc, row, lane, R, C, M, N, K):  # pragma: no cover - numba
    if df == 1:
        i = row - lane - (K - 1)
        return 0 <= i < R and fr * R + R - 1 - i < M and fc * C + lane < N
    t = row - lane - (2 * R - 1)
    return 0 <= t < (M if df == 0 else N) and fc * C + lane < (N if df == 0 else M)


@njit(cache=True, inline="always")
def _pf_addr(df, op, g, b, r, cc, R, C, M, N, K):  # pragma: no cover - numba
    """Element (row ``r`` of block ``b``, column ``cc``) of the stacked prefetch matrix of ``op``."""
    if op == 0:
        if df == 0:
            return _x(g, r, b * R + cc) if b * R + cc < K else -1
        if df == 1:
            return _x(g, b * R + cc, r) if b * R + cc < M else -1
        return _x(g, b * C + cc, r) if b * C + cc < M else -1
    if df == 2:
        return r * K + b * R + cc if b * R + cc < K else -1
    return (b * C + cc) * K + r if b * C + cc < N else -1


@njit(cache=True)
def _prefetch_seq(df, op, g, R, C, M, N, K):  # pragma: no cover - numba
    """SCALE-Sim's prefetch matrix of ``op`` (0 ifmap, 1 filter) flattened in its order: (valid
    addresses, number of elements including the -1 padding)."""
    if op == 0:
        if df == 0:
            nb, rows, cols, diag = -(-K // R), M, R, True
        elif df == 1:
            nb, rows, cols, diag = -(-M // R), K, R, True
        else:
            nb, rows, cols, diag = -(-M // C), K, C, False
    else:
        if df == 0:
            nb, rows, cols, diag = -(-N // C), K, C, False
        elif df == 1:
            nb, rows, cols, diag = -(-N // C), K, C, True
        else:
            nb, rows, cols, diag = -(-K // R), N, R, True
    Mr = nb * rows
    out = np.empty(Mr * cols, np.int64)
    n = 0
    if diag:
        for d in range(Mr + cols):
            for rr in range(min(d, Mr - 1), max(0, d - cols + 1) - 1, -1):
                a = _pf_addr(df, op, g, rr // rows, rr % rows, d - rr, R, C, M, N, K)
                if a >= 0:
                    out[n] = a
                    n += 1
    else:
        for rr in range(Mr):
            for cc in range(cols):
                a = _pf_addr(df, op, g, rr // rows, rr % rows, cc, R, C, M, N, K)
                if a >= 0:
                    out[n] = a
                    n += 1
    return out[:n], Mr * cols


@njit(cache=True)
def _line_index(seq, eps, space):  # pragma: no cover - numba
    """CSR of the hashed lines (``eps`` valid words each) that hold each address: (ptr, lines, #lines)."""
    cnt = np.zeros(space + 1, np.int64)
    for a in seq:
        cnt[a + 1] += 1
    ptr = np.cumsum(cnt)
    fill = ptr[:-1].copy()
    lines = np.empty(seq.shape[0], np.int64)
    for j in range(seq.shape[0]):
        a = seq[j]
        lines[fill[a]] = j // eps
        fill[a] += 1
    return ptr, lines, seq.shape[0] // eps + 1


@njit(cache=True, inline="always")
def _hit(ptr, lines, a, s, e):  # pragma: no cover - numba
    for j in range(ptr[a], ptr[a + 1]):
        ln = lines[j]
        if s < e:
            if s <= ln < e:
                return True
        elif ln >= s or ln < e:
            return True
    return False


@njit(cache=True)
def _replay(df, g, R, C, M, N, K, user, sizes, bws, if_space, f_space,
            if_ptr, if_lines, if_nl, f_ptr, f_lines, f_nl, if_tot, f_tot, of_total):  # pragma: no cover - numba
    res = np.zeros(17, np.int64)
    # read buffers: index 0 ifmap, 1 filter
    tot = np.array([int(sizes[0]), int(sizes[1])], np.int64)
    active = np.array([int(math.ceil(tot[0] * 0.5)), int(math.ceil(tot[1] * 0.5))], np.int64)
    pf = tot - active
    # USER state
    s = np.zeros(2, np.int64)
    e = np.zeros(2, np.int64)
    nact = np.zeros(2, np.int64)
    npf = np.zeros(2, np.int64)
    nl = np.array([if_nl, f_nl], np.int64)
    last = np.zeros(2, np.int64)
    acc = np.zeros(2, np.int64)
    dstart = np.zeros(2, np.int64)
    # CALC state
    per_set = tot // 100
    E = 50 * per_set
    stamp0 = np.full(if_space, -1, np.int64)
    stamp1 = np.full(f_space, -1, np.int64)
    misses = np.zeros(2, np.int64)
    first_req = np.full(2, -1, np.int64)
    events = np.zeros(2, np.int64)
    last_event = np.zeros(2, np.int64)
    if user:
        seqtot = np.array([if_tot, f_tot], np.int64)
        for o in range(2):
            eps = int(math.ceil(tot[o] / 100))
            ma, mp = int(math.ceil(active[o] / eps)), int(math.ceil(pf[o] / eps))
            nact[o] = min(ma, nl[o])
            npf[o] = min(mp, nl[o] - nact[o])
            e[o] = nact[o]
            n0 = min(-(-active[o] // bws[o]), -(-seqtot[o] // bws[o]))
            acc[o] = n0 * bws[o]
            dstart[o] = -n0
            last[o] = -1
    # ofmap write buffer
    obw = bws[2]
    o_tot = int(sizes[2])
    o_act = int(math.ceil(o_tot * 0.5))
    o_drain = o_tot - o_act
    lines_per_drain = -(-o_drain // obw)
    free = o_tot
    line_idx = 0
    n_lines = 0
    line_valid = np.empty(of_total // obw + 16, np.int64)
    ds = 0
    drain_end = 0
    o_acc = 0
    o_first = np.int64(-1)
    o_have = False
    o_stop = 0
    sram = np.full(6, -1, np.int64)
    stall = 0
    i = 0
    last_out = 0
    if df == 1:
        outer, inner, rows = -(-N // C), -(-M // R), K + R + C - 2
    elif df == 0:
        outer, inner, rows = -(-N // C), -(-K // R), 2 * R + C + M - 2
    else:
        outer, inner, rows = -(-M // C), -(-K // R), 2 * R + C + N - 2
    lanes_if = C if df == 2 else R
    lanes_f = R if df == 2 else C
    for fc in range(outer):
        for fr in range(inner):
            for row in range(rows):
                cycle = i + stall
                worst = 0
                for o in range(2):
                    off = 1
                    valid = False
                    for lane in range(lanes_if if o == 0 else lanes_f):
                        if o == 0:
                            a = _ifmap(df, g, fr, fc, row, lane, R, C, M, K)
                        else:
                            a = _filter(df, fr, fc, row, lane, R, C, N, K)
                        if a < 0:
                            continue
                        valid = True
                        if user:
                            ptr, lines = (if_ptr, if_lines) if o == 0 else (f_ptr, f_lines)
                            guard = 0
                            while not _hit(ptr, lines, a, s[o], e[o]) and guard <= nl[o]:
                                guard += 1
                                s[o] = (s[o] + npf[o]) % nl[o]
                                e[o] = (s[o] + nact[o]) % nl[o]
                                k = -(-pf[o] // bws[o])
                                acc[o] += k * bws[o]
                                last[o] += k + 1
                                p = last[o] - (cycle + off)
                                off += p
                                if p > 0:
                                    off += p
                        else:
                            if first_req[o] < 0:
                                first_req[o] = cycle
                            st = stamp0 if o == 0 else stamp1
                            window = misses[o] // E[o] if E[o] > 0 else 0
                            if st[a] != window:
                                st[a] = window
                                misses[o] += 1
                                if E[o] > 0 and misses[o] % E[o] == 0:
                                    events[o] += 1
                                    last_event[o] = cycle
                    if valid:
                        if sram[2 * o] < 0:
                            sram[2 * o] = cycle + off
                        sram[2 * o + 1] = cycle + off
                    worst = max(worst, off - 1)
                # ofmap
                cur = cycle
                valid = False
                for lane in range(C):
                    if not _ofmap(df, fr, fc, row, lane, R, C, M, N, K):
                        continue
                    valid = True
                    line_idx += 1
                    free -= 1
                    if line_idx == obw:
                        if n_lines == line_valid.shape[0]:
                            line_valid = np.concatenate((line_valid, np.empty(n_lines, np.int64)))
                        line_valid[n_lines] = obw
                        n_lines += 1
                        line_idx = 0
                    if cur < drain_end:
                        if free <= 0:
                            cur = drain_end
                    elif free < o_act:
                        if line_idx != 0:
                            if n_lines == line_valid.shape[0]:
                                line_valid = np.concatenate((line_valid, np.empty(n_lines, np.int64)))
                            line_valid[n_lines] = line_idx
                            n_lines += 1
                            line_idx = 0
                        end = min(ds + lines_per_drain, n_lines)
                        cnt = end - ds
                        data = cnt * obw - (obw - line_valid[end - 1])
                        o_acc += data
                        free += data
                        ds = end
                        if not o_have:
                            o_first, o_have = cur, True
                        drain_end = cur + cnt - 1
                        o_stop = max(o_stop, drain_end)
                if valid:
                    if sram[4] < 0:
                        sram[4] = cur
                    sram[5] = cur
                worst = max(worst, cur - cycle)
                last_out = cur
                stall += worst
                i += 1
    # final drain of everything left, from the last row's cycle on
    if line_idx != 0:
        if n_lines == line_valid.shape[0]:
            line_valid = np.concatenate((line_valid, np.empty(1, np.int64)))
        line_valid[n_lines] = line_idx
        n_lines += 1
    cyc = last_out
    while ds < n_lines:
        end = min(ds + lines_per_drain, n_lines)
        cnt = end - ds
        o_acc += cnt * obw - (obw - line_valid[end - 1])
        ds = end
        if not o_have:
            o_first, o_have = cyc, True
        o_stop = max(o_stop, cyc + cnt - 1)
        cyc = cyc + cnt
    # read buffers' DRAM windows
    for o in range(2):
        if user:
            res[8 + 3 * o] = dstart[o]
            res[9 + 3 * o] = last[o]
            res[10 + 3 * o] = acc[o]
        else:
            if events[o] > 0:
                res[8 + 3 * o] = first_req[o] - int(math.ceil(E[o] / CALC_READ_BW))
                res[9 + 3 * o] = last_event[o] + 1
            else:
                n_sets = -(-misses[o] // per_set[o])
                res[8 + 3 * o] = -int(math.ceil(n_sets * per_set[o] / CALC_READ_BW))
                res[9 + 3 * o] = -1
            res[10 + 3 * o] = misses[o]
    res[0], res[1] = last_out, stall
    res[2:8] = sram
    res[14], res[15], res[16] = o_first, o_stop, o_acc
    return res


_MEMO: dict[tuple, dict[str, int]] = {}
_MEMO_MAX = 512  # distinct (layer shape, memory system) pairs kept; a network repeats few shapes


def replay_layer(layer: Layer, arch: Arch) -> dict[str, int]:
    """SCALE-Sim 3.0.0's per-layer report numbers of one GEMM of ``layer`` (see the module docstring):
    cycles, start/stop cycles, DRAM words (1-byte words, as SCALE-Sim). Layers of the same shape on the same
    array and memory system (the name aside) are replayed once per process and share the result."""
    R, C = arch.rows, arch.cols
    user = arch.bandwidth_mode == "user"
    sizes = tuple(math.floor(arch.sram_bytes(b)) for b in ("ifmap", "filter", "ofmap"))
    bws = (arch.scalesim_ifmap_bank_bw, arch.scalesim_filter_bank_bw, scalesim_bandwidth(arch)) if user else \
        (CALC_READ_BW, CALC_READ_BW, C)
    key = (replace(layer, name=""), R, C, arch.dataflow, user, sizes, bws)
    hit = _MEMO.get(key)
    if hit is None:
        hit = _replay_layer(layer, arch, user, np.array(sizes, np.int64), np.array(bws, np.int64))
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        _MEMO[key] = hit
    return dict(hit)


def _replay_layer(layer: Layer, arch: Arch, user: bool, sizes: np.ndarray, bws: np.ndarray) -> dict[str, int]:
    M, N, K = scalesim_shape(layer)
    R, C, df = arch.rows, arch.cols, DF_CODE[arch.dataflow]
    y0, x0, dy, dx, ch, H, W, Cin = _input_addresses(layer)
    g = (y0, x0, dy, dx, ch, H, W, Cin)
    if_space, f_space = H * W * Cin, K * N
    empty = np.zeros(1, np.int64)
    if user:
        seq0, tot0 = _prefetch_seq(df, 0, g, R, C, M, N, K)
        seq1, tot1 = _prefetch_seq(df, 1, g, R, C, M, N, K)
        p0, l0, n0 = _line_index(seq0, math.ceil(sizes[0] / 100), if_space)
        p1, l1, n1 = _line_index(seq1, math.ceil(sizes[1] / 100), f_space)
    else:
        p0 = l0 = p1 = l1 = empty
        n0 = n1 = tot0 = tot1 = 1
    of_total = M * N * (-(-K // R) if arch.dataflow != "os" else 1)
    out = _replay(df, g, R, C, M, N, K, user, sizes, bws, if_space, f_space, p0, l0, n0, p1, l1, n1,
                  tot0, tot1, of_total)
    return dict(zip(FIELDS, (int(v) for v in out), strict=True))


def scalesim_bandwidth(arch: Arch) -> int:
    """SCALE-Sim's ``Bandwidth`` (words per cycle; its words are 1 byte): the ofmap drain rate in USER mode."""
    return arch.scalesim_bandwidth or max(1, int(arch.dram_bandwidth_bytes_per_cycle))
