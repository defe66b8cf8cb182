"""SCALE-Sim v3's own memory accounting (``memory = "scalesim"``): closed forms of its CALC mode.

(USER bandwidth mode and the per-cycle report columns: :mod:`npukit.sim._scalesim_replay`.)

SCALE-Sim 3.0.0 (R. Raj et al., ISPASS 2025; PyPI ``scalesim``) simulates every SRAM request the array
makes and counts what its double-buffered scratchpads fetch from and write to DRAM. In its CALC
bandwidth mode (stall-free reads) the counts follow three rules, which this module reproduces with the
same request order (its demand matrices: folds column-major, each fold's operand tile skewed one cycle
per array lane) without building the matrices:

* **Reads (ifmap, filter).** A read buffer of S bytes (1-byte words) keeps the addresses fetched since
  its last "slide": every E = 50 * floor(S / 100) newly fetched addresses (half the buffer, in sets of
  1% of it) the window slides and everything fetched before is forgotten. An address not in the window
  is a DRAM read. ``DRAM IFMAP/Filter Reads`` = the number of such misses; when an operand's unique
  addresses are fewer than E this is simply its unique data (e.g. 58*58*64 = 215,296 for ResNet-18's
  layer1 3x3 convs with 1 MiB SRAMs), otherwise the request stream is replayed (numba).
* **Writes (ofmap).** SCALE-Sim has no psum buffer: every fold's outputs go to the ofmap SRAM (so
  ``SRAM OFMAP Writes`` = ceil(K/R) * M * N for ws/is) and drain to DRAM in lines of ``bw`` words
  (CALC: the array width). When more than half the buffer is used and no drain is in flight, the
  partly filled line is closed and half a buffer of lines drains; a drain counts every word of its lines
  except the padding of its last line, so a closed partial line in the middle of a drain is counted
  whole (``DRAM OFMAP Writes`` slightly above the writes: 1,003,647 for 1,003,520 on layer1.0.conv1).
  A row of writes that finds the buffer full while a drain is in flight stalls until it ends.
* **SRAM reads.** Every element of every fold's operand tile: ws M*K*ceil(N/C) and K*N; os M*K*ceil(N/C)
  and K*N*ceil(M/R); is M*K and K*N*ceil(M/C). os also adds R + C to ``SRAM OFMAP Writes`` per fold.

Convs use SCALE-Sim's addresses (input pixel (y, x, c) -> (y*W + x)*C + c on the padded input, filter
(k, n) -> n*K + k) and its output extent ceil((H - fh + s) / s) (npukit's own lowering uses floor: a
layer whose stride does not divide H - fh has one more output row and column here, with windows that
run off the input); a GEMM (M, N, K) is SCALE-Sim's GEMM mode: an M x K input, 1 x K filters.
Batch > 1 layers are ``batch`` independent GEMMs, each with fresh buffers (SCALE-Sim's one layer per
row). Golden numbers from SCALE-Sim itself: ``tests/test_scalesim_memory.py``; side by side:
``benchmarks/bench_vs_scalesim.py``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ._mapping import LayerCounts, Mapping, fold_counts, os_cycles, stationary_cycles
from .arch import Arch
from .workload import Layer

WORD_BYTES = 1  # SCALE-Sim's word_size
ACTIVE_FRAC = 0.5  # its rd/wr_buf_active_frac


def epoch_length(buffer_bytes: float) -> int:
    """Misses between two slides of a SCALE-Sim CALC-mode read buffer (0: never slides)."""
    total = math.floor(buffer_bytes / WORD_BYTES)
    per_set = math.floor(total / 100)
    return int(ACTIVE_FRAC * 100) * per_set


def _geometry(layer: Layer) -> tuple[int, int, int, int, int, int, int, int]:
    """(H, W, fh, fw, C, stride, OH, OW) as SCALE-Sim sees the layer: its output extent is
    ceil((H - fh + s) / s), so a window that runs off the padded input still counts (its missing
    elements are no requests); a GEMM is an M x K input with 1 x K filters."""
    if layer.conv is None:
        return layer.M, layer.K, 1, layer.K, 1, 1, layer.M, 1
    h, w, fh, fw, c, _n, s = layer.conv
    return h, w, fh, fw, c, s, -(-(h - fh + s) // s), -(-(w - fw + s) // s)


def scalesim_shape(layer: Layer) -> tuple[int, int, int]:
    """(M, N, K) of ``layer`` under SCALE-Sim's output formula (see :func:`_geometry`)."""
    h, w, fh, fw, c, s, oh, ow = _geometry(layer)
    return oh * ow, layer.N, fh * fw * c


def _touched(size: int, k: int, s: int, out: int) -> int:
    """Input rows (or columns) of ``size`` that ``out`` windows of ``k`` at stride ``s`` touch."""
    if k >= s:
        return min(size, (out - 1) * s + k)
    full = min(out, (size - k) // s + 1)  # windows entirely inside
    return full * k + sum(max(0, min(k, size - o * s)) for o in range(full, out))


def _unique_input(layer: Layer) -> int:
    h, w, fh, fw, c, s, oh, ow = _geometry(layer)
    return _touched(h, fh, s, oh) * _touched(w, fw, s, ow) * c


def _input_addresses(layer: Layer) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """Per output pixel its window origin (y0, x0) and per im2col column its offset (dy, dx, ch); the
    element X[m, k] is input pixel (y0 + dy, x0 + dx, ch), address ((y0+dy)*W + x0+dx)*C + ch, no
    request when it falls outside the H x W input. Returns (y0, x0, dy, dx, ch, H, W, C)."""
    h, w, fh, fw, c, s, oh, ow = _geometry(layer)
    m = np.arange(oh * ow, dtype=np.int64)
    orow, ocol = np.divmod(m, ow)
    k = np.arange(fh * fw * c, dtype=np.int64)
    c_row, rem = np.divmod(k, fw * c)
    c_col, ch = np.divmod(rem, c)
    return orow * s, ocol * s, c_row, c_col, ch, h, w, c


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


def _ofmap(layer: Layer, arch: Arch) -> tuple[int, int]:
    """(DRAM OFMAP writes, write-buffer stall cycles) of one GEMM."""
    R, C, df = arch.rows, arch.cols, arch.dataflow
    M, N, K = scalesim_shape(layer)
    total = math.floor(arch.sram_bytes("ofmap") / WORD_BYTES)
    active = int(math.ceil(total * ACTIVE_FRAC))
    drain = total - active
    bw = C  # CALC mode drains one array-width line per cycle
    if df == "os":
        mf, nf, _ = fold_counts(M, N, arch)
        L = [min(C, N - fc * C) for fc in range(nf) for _ in range(mf)]
        ru = [min(R, M - fr * R) for _ in range(nf) for fr in range(mf)]
        rows = [R + C + K - 2] * (mf * nf)
        P, T = K - 1, R
    else:
        T, S_c = (M, N) if df == "ws" else (N, M)
        kf, cf, _ = fold_counts(K, S_c, arch)
        L = [min(C, S_c - fc * C) for fc in range(cf) for _ in range(kf)]
        ru = [0] * (kf * cf)
        rows = [2 * R + C + T - 2] * (kf * cf)
        P = 2 * R - 1
    written, stalls = _ofmap_drain(np.asarray(L, np.int64), np.asarray(ru, np.int64), np.asarray(rows, np.int64),
                                   P, T, R, df == "os", bw, active, drain)
    return int(written), int(stalls)


def _input_misses(layer: Layer, arch: Arch) -> int:
    unique = _unique_input(layer)
    E = epoch_length(arch.sram_bytes("ifmap"))
    if E == 0 or unique < E:
        return unique
    geo = _input_addresses(layer)
    R, C = arch.rows, arch.cols
    nf = -(-layer.N // C)
    if arch.dataflow == "ws":
        return int(_misses_skewed_input(*geo, R, nf, False, E))
    if arch.dataflow == "os":
        return int(_misses_skewed_input(*geo, R, nf, True, E))
    return int(_misses_is_input(*geo, R, C, E))


def _filter_misses(layer: Layer, arch: Arch) -> int:
    M, N, K = scalesim_shape(layer)
    E = epoch_length(arch.sram_bytes("filter"))
    if arch.dataflow == "ws" or E == 0 or K * N < E:
        return K * N  # ws streams every weight exactly once
    mf = -(-M // (arch.rows if arch.dataflow == "os" else arch.cols))
    if arch.dataflow == "os":
        return int(_misses_os_filter(K, N, arch.cols, mf, E))
    return int(_misses_is_filter(K, N, arch.rows, mf, E))


def scalesim_counts(layer: Layer, arch: Arch) -> LayerCounts:
    """Per-GEMM counts of ``layer`` under SCALE-Sim v3's accounting (see the module docstring); in USER
    bandwidth mode the DRAM counts and stalls come from the request replay of ``_scalesim_replay``."""
    (M, N, K), R, C, df = scalesim_shape(layer), arch.rows, arch.cols, arch.dataflow
    macs = M * N * K
    if arch.bandwidth_mode == "user":  # read stalls and request-line reads: the replay (_scalesim_replay)
        from ._scalesim_replay import replay_layer

        rep = replay_layer(layer, arch)
        ofmap_dram, stalls = rep["dram_ofmap_writes"], rep["stall_cycles"]
        ifmap_dram, filter_dram = rep["dram_ifmap_reads"], rep["dram_filter_reads"]
    else:
        ofmap_dram, stalls = _ofmap(layer, arch)
        ifmap_dram, filter_dram = _input_misses(layer, arch), _filter_misses(layer, arch)
    if df == "os":
        mf, nf, eff = fold_counts(M, N, arch)
        folds = mf * nf
        cyc = os_cycles(folds, K, arch)
        reads = dict(ifmap_reads=M * K * nf, filter_reads=K * N * mf, ofmap_writes=M * N + folds * (R + C), partial=0)
        regs = (("input", macs), ("weight", macs), ("accumulator", macs))
        mapping = Mapping("NM")
    else:
        T, S_c = (M, N) if df == "ws" else (N, M)
        kf, cf, eff = fold_counts(K, S_c, arch)
        folds = kf * cf
        cyc = stationary_cycles(folds, T, 1, arch)
        if df == "ws":
            reads = dict(ifmap_reads=M * K * cf, filter_reads=K * N, ofmap_writes=kf * M * N, partial=(kf - 1) * M * N)
            regs = (("input", macs), ("accumulator", macs), ("weight", K * N))
            mapping = Mapping("NMK")
        else:
            reads = dict(ifmap_reads=M * K, filter_reads=K * N * cf, ofmap_writes=kf * M * N, partial=(kf - 1) * M * N)
            regs = (("weight", macs), ("accumulator", macs), ("input", M * K))
            mapping = Mapping("MNK")
    return LayerCounts(
        folds=folds,
        compute_cycles=cyc,
        mapping_efficiency=eff,
        macs=macs,
        ifmap_reads=reads["ifmap_reads"],
        ifmap_dram=ifmap_dram,
        filter_reads=reads["filter_reads"],
        filter_dram=filter_dram,
        psum_reads=0,
        psum_writes=0,
        psum_dram_reads=0,
        psum_dram_writes=0,
        ofmap_writes=reads["ofmap_writes"],
        ofmap_dram=ofmap_dram,
        reg_writes=regs,
        mapping=mapping,
        ofmap_partial=reads["partial"],
        ofmap_stall_cycles=stalls,
    )
