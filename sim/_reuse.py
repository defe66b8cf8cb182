"""Unique data of GEMM operand tiles: how many distinct elements a tile of the lowered matrix touches.

A convolution lowered to a GEMM has an im2col input matrix X (M x K, M = output pixels in row-major
order, K = Fh*Fw*Cin) whose rows overlap: neighbouring output pixels read the same input pixels. DRAM
moves data, not im2col rows, so a buffer fill of the rows [p0, p1) of X costs the distinct input
elements those rows touch, not (p1 - p0) * K.

Worked example (ResNet-18 layer1.0.conv1: 58x58x64 padded input, 3x3 filters, stride 1, 56x56
outputs): the whole X is 3,136 x 576 = 1,806,336 elements but touches 58 * 58 * 64 = 215,296 input
elements; the first output row alone (pixels [0, 56)) touches 3 input rows x 58 columns x 64 channels
= 11,136 elements; a stride-2 1x1 conv touches every other input row and column only.

A GEMM layer without conv geometry has no overlap: rows [p0, p1) touch (p1 - p0) * K elements.
"""

from __future__ import annotations

from functools import lru_cache

from .workload import Layer


def _cols_of(a: int, b: int, s: int, fw: int) -> int:
    """Input columns touched by output columns a..b (inclusive) with stride s and filter width fw."""
    return (b - a) * s + fw if fw >= s else (b - a + 1) * fw


def _interval_union(intervals: list[tuple[int, int]], s: int, fw: int) -> int:
    """Input columns touched by the union of output-column intervals (inclusive bounds)."""
    spans = sorted((a * s, b * s + fw - 1) for a, b in intervals)  # input-column spans, inclusive
    if fw < s:  # windows do not overlap: count windows once each
        cols: set[int] = set()
        for a, b in intervals:
            cols.update(range(a, b + 1))
        return len(cols) * fw
    total, cur_lo, cur_hi = 0, spans[0][0], spans[0][1]
    for lo, hi in spans[1:]:
        if lo <= cur_hi + 1:
            cur_hi = max(cur_hi, hi)
        else:
            total += cur_hi - cur_lo + 1
            cur_lo, cur_hi = lo, hi
    return total + cur_hi - cur_lo + 1


@lru_cache(maxsize=65536)
def _conv_rows_unique(conv: tuple[int, ...], p0: int, p1: int) -> int:
    """Distinct input elements touched by output pixels [p0, p1) of a conv (padded extents)."""
    h, w, fh, fw, cin, _cout, s = conv
    ow = (w - fw) // s + 1
    r0, c0 = divmod(p0, ow)
    r1, c1 = divmod(p1 - 1, ow)

    def ocols(r: int) -> tuple[int, int]:
        return (c0 if r == r0 else 0, c1 if r == r1 else ow - 1)

    total = 0
    for y in range(r0 * s, r1 * s + fh):
        lo = max(r0, -(-(y - fh + 1) // s))
        hi = min(r1, y // s)
        if lo > hi:
            continue  # a gap row (stride larger than the filter)
        if max(lo, r0 + 1) <= min(hi, r1 - 1):
            total += _cols_of(0, ow - 1, s, fw)  # a full middle output row covers this input row
            continue
        total += _interval_union([ocols(r) for r in range(lo, hi + 1)], s, fw)
    return total * cin


def unique_rows(layer: Layer, p0: int, p1: int) -> int:
    """Distinct input elements (elements of the operand, not of X) that rows [p0, p1) of X touch."""
    if layer.conv is None:
        return (p1 - p0) * layer.K
    return _conv_unique(layer.conv, p0, p1)


def _conv_unique(conv: tuple[int, ...], p0: int, p1: int) -> int:
    """:func:`_conv_rows_unique` after moving [p0, p1) to the first output rows: only the position
    within an output row matters (translation invariance on the padded input), which keeps the cache small."""
    h, w, fh, fw, cin, cout, s = conv
    ow = (w - fw) // s + 1
    shift = (p0 // ow) * ow
    return _conv_rows_unique(conv, p0 - shift, p1 - shift)


def unique_total(layer: Layer) -> int:
    """Distinct input elements the whole X touches (the padded input a conv really reads)."""
    if layer.conv is None:
        return layer.M * layer.K
    h, w, fh, fw, cin, _cout, s = layer.conv
    oh, ow = (h - fh) // s + 1, (w - fw) // s + 1
    rows = (oh - 1) * s + fh if fh >= s else oh * fh
    cols = (ow - 1) * s + fw if fw >= s else ow * fw
    return rows * cols * cin


def tiles(extent: int, tile: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` chunks of ``tile`` over ``extent`` (the last one shorter)."""
    return [(a, min(a + tile, extent)) for a in range(0, extent, tile)]


def unique_over_tiles(layer: Layer, tile: int) -> tuple[int, int]:
    """(sum over tiles, largest tile) of the distinct input elements of X's row tiles of ``tile`` rows.

    Tiles of a conv never straddle output rows when ``tile`` < the output width (each output row is
    cut into segments) and hold whole output rows otherwise (``tile`` is then rounded down to a
    multiple of the output width by the mapper).
    """
    if layer.conv is None:
        return layer.M * layer.K, min(tile, layer.M) * layer.K
    return _unique_over_tiles(layer.conv, layer.M, tile)


@lru_cache(maxsize=4096)
def _unique_over_tiles(conv: tuple[int, ...], m: int, tile: int) -> tuple[int, int]:
    h, w, fh, fw, cin, _cout, s = conv
    ow = (w - fw) // s + 1
    total = biggest = 0
    for a, b in row_aligned_tiles(m, ow, tile):
        u = _conv_unique(conv, a, b)
        total += u
        biggest = max(biggest, u)
    return total, biggest


def row_aligned_tiles(m: int, ow: int, tile: int) -> list[tuple[int, int]]:
    """Tiles of output pixels that respect output rows: segments of ``tile`` pixels inside each row
    when ``tile`` < ``ow``, else whole rows (``tile // ow`` rows per tile)."""
    if tile >= ow:
        rows = tile // ow
        return [(a * ow, min((a + rows) * ow, m)) for a in range(0, -(-m // ow), rows)]
    out = []
    for r0 in range(0, m, ow):
        out += [(r0 + a, r0 + b) for a, b in tiles(min(ow, m - r0), tile)]
    return out


@lru_cache(maxsize=4096)
def row_aligned_tile_sizes(m: int, ow: int, tile: int) -> tuple[tuple[int, int], ...]:
    """(rows, count) of the tiles :func:`row_aligned_tiles` makes, in first-seen order (cached)."""
    out: dict[int, int] = {}
    for a, b in row_aligned_tiles(m, ow, tile):
        out[b - a] = out.get(b - a, 0) + 1
    return tuple(out.items())


def n_row_aligned_tiles(m: int, ow: int, tile: int) -> int:
    """How many tiles :func:`row_aligned_tiles` makes (closed form)."""
    oh = -(-m // ow)
    if tile >= ow:
        return -(-oh // (tile // ow))
    return oh * -(-ow // tile)
