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
from bisect import bisect_right

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


def _input_addresses(layer: Layer) -> tuple:
    """Per output pixel its window origin (y0, x0) and per im2col column its offset (dy, dx, ch); the
    element X[m, k] is input pixel (y0 + dy, x0 + dx, ch), address ((y0+dy)*W + x0+dx)*C + ch, no
    request when it falls outside the H x W input. Returns (y0, x0, dy, dx, ch, H, W, C)."""
    import numpy as np  # on demand: the closed forms need none

    h, w, fh, fw, c, s, oh, ow = _geometry(layer)
    m = np.arange(oh * ow, dtype=np.int64)
    orow, ocol = np.divmod(m, ow)
    k = np.arange(fh * fw * c, dtype=np.int64)
    c_row, rem = np.divmod(k, fw * c)
    c_col, ch = np.divmod(rem, c)
    return orow * s, ocol * s, c_row, c_col, ch, h, w, c


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
    closed = _ofmap_stall_free(L, ru, rows[0], P, T, R, df == "os", bw, active, drain)
    if closed is not None:
        return closed, 0
    import numpy as np

    from ._scalesim_kernels import _ofmap_drain

    written, stalls = _ofmap_drain(np.asarray(L, np.int64), np.asarray(ru, np.int64), np.asarray(rows, np.int64),
                                   P, T, R, df == "os", bw, active, drain)
    return int(written), int(stalls)


def _lane_writes(x: int, lanes: int, t: int) -> int:
    """Writes up to skewed step ``x`` of ``lanes`` lanes, lane l writing at steps l .. l + t - 1."""
    if x < 0:
        return 0
    full = min(lanes, max(0, x - t + 2))  # lanes done by x
    a, b = max(0, x - t + 2), min(lanes - 1, x)
    part = (b - a + 1) * (x + 1) - (a + b) * (b - a + 1) // 2 if b >= a else 0
    return full * t + part


def _ofmap_stall_free(fold_L: list[int], fold_ru: list[int], rows: int, P: int, T: int, R: int, os_mode: bool,
                      bw: int, active: int, drain_size: int) -> int | None:
    """DRAM OFMAP writes of SCALE-Sim's write buffer (the rules of ``_scalesim_kernels._ofmap_drain``) from
    drain to drain instead of row by row: a fold's writes up to a row are a closed form (its outputs
    leave skewed, lane l at rows P + l .. P + l + t - 1), so the element that triggers the next drain is
    the first one past both the half-buffer mark and the end of the drain in flight. Exact while no write
    finds the buffer full during a drain (then no stall at all); returns None otherwise (the caller
    replays). Pure Python: no numpy or numba import."""
    shift = [R - ru if os_mode else 0 for ru in fold_ru]
    tlen = [ru if os_mode else T for ru in fold_ru]
    base = [0]
    for lanes, t in zip(fold_L, tlen, strict=True):
        base.append(base[-1] + lanes * t)
    total, n_rows = base[-1], rows * len(fold_L)

    def incl(g: int) -> int:  # writes in global rows 0..g
        if g < 0:
            return 0
        if g >= n_rows:
            return total
        f, r = divmod(g, rows)
        return base[f] + _lane_writes(r - P - shift[f], fold_L[f], tlen[f])

    def row_of(e: int) -> int:  # the global row of element e
        f = bisect_right(base, e) - 1
        lo, hi = 0, rows - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if base[f] + _lane_writes(mid - P - shift[f], fold_L[f], tlen[f]) > e:
                hi = mid
            else:
                lo = mid + 1
        return f * rows + lo

    lines_per_drain = -(-drain_size // bw)
    free, line_start, n_lines, ds, drain_end, written, j = active + drain_size, 0, 0, 0, 0, 0, -1
    partial: dict[int, int] = {}

    def close(upto: int) -> None:  # lines of the elements [line_start, upto); the last one closed partly filled
        nonlocal n_lines, line_start
        stored = upto - line_start
        n_lines += stored // bw
        if stored % bw:
            partial[n_lines] = stored % bw
            n_lines += 1
        line_start = upto

    def drain() -> int:  # lines drained now; their words counted (a partial last line without its padding)
        nonlocal ds, written
        cnt = min(lines_per_drain, n_lines - ds)
        words = cnt * bw - (bw - partial.get(ds + cnt - 1, bw))
        written += words
        ds += cnt
        return words

    while True:
        e_b = incl(drain_end - 1)
        if min(e_b, total) - 1 - j >= free:  # a write in flight would find the buffer full: stalls
            return None
        e = max(j + free - active + 1, e_b, j + 1)
        if e >= total:
            break
        free -= e - j
        close(e + 1)
        if n_lines == ds:
            return None
        cnt_before = ds
        free += drain()
        drain_end = row_of(e) + (ds - cnt_before) - 1
        j = e
    close(total)
    while ds < n_lines:
        drain()
    return written


def _input_misses(layer: Layer, arch: Arch) -> int:
    unique = _unique_input(layer)
    E = epoch_length(arch.sram_bytes("ifmap"))
    if E == 0 or unique < E:
        return unique
    from ._scalesim_kernels import _misses_is_input, _misses_skewed_input

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
    if arch.dataflow == "os":  # per column fold its K x cols block, read mf times in the same order
        blocks = [K * min(arch.cols, N - fc * arch.cols) for fc in range(-(-N // arch.cols))]
    else:  # the whole K x N filter, read mf times in the same order
        blocks = [K * N]
    misses = 0
    for b in blocks:
        misses = _repeated_pass_misses(b, mf, E, misses)
    return misses


def _repeated_pass_misses(b: int, passes: int, E: int, misses: int) -> int:
    """Misses after ``passes`` reads of the same ``b`` distinct addresses in the same order by a CALC read
    buffer that slides every ``E`` misses (``_scalesim_kernels._miss``), starting from ``misses``. Each
    address's window stamp is kept as runs of positions with one stamp, so a pass costs its runs."""
    segs = [(0, b, -1)]  # (first position, end, window of the last fetch)
    for _ in range(passes):
        out = []
        for s0, s1, st in segs:
            if st == misses // E:
                out.append((s0, s1, st))
                continue
            p = s0
            while p < s1:  # misses from p on; the window changes every E misses
                w = misses // E
                n = min(s1 - p, (w + 1) * E - misses)
                out.append((p, p + n, w))
                misses += n
                p += n
        segs = []
        for seg in out:  # merge neighbours with one stamp
            if segs and segs[-1][2] == seg[2] and segs[-1][1] == seg[0]:
                segs[-1] = (segs[-1][0], seg[1], seg[2])
            else:
                segs.append(seg)
    return misses


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
        scalesim_stall_cycles=stalls,
    )
